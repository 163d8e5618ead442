"""Adding recordings to a fingerprint model's reference library, for the CLI and the HTTP API.

A file is probed and decoded as an upload for recognition is (`arengine/audio/`: the same
sniffing, limits and decoders), fingerprinted as its blocks arrive (bounded memory) and added in
one transaction. `library_of` finds (or makes, with its manifest) a model folder's library: its
SQLite file, or with a server database (PostgreSQL) the model's rows there, keyed by its name.

Example::

    library = library_of(Path("models/jingles"), create=True)  # database=engine: PostgreSQL
    ref = add_file(library, Path("ident.flac"), limits, "Station ident", {"client": "acme"})
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from arengine.audio.validation import AudioLimits
from arengine.errors import ErrorCode, InvalidInput
from arengine.kinds.fingerprint.library import Library, Reference

LIBRARY_FILE = "library.sqlite"
MANIFEST = """\
# A reference library made by `arengine references add`: recordings to find inside uploads.
# {where}
name = "{name}"
kind = "fingerprint"
sample_rate = {rate}

[segments]
length_s = 30.0

[weights]
file = "{library}"   # managed with `arengine references add|remove|list {name}`

[model]
memory_index_mb = 1024  # held in memory up to this size, else looked up in the database (0)

[postprocess]
min_hits = 30     # matched anchors an occurrence needs (tuned on held-out sets)
min_score = 0.02  # share of the stretch's hashes that must match
max_gap_s = 3.0   # seconds without a match that end an occurrence
min_heard = 0.5   # share of the reference's onsets whose peaks an occurrence must have

[card]
task = "occurrences of the library's recordings (fingerprints; found at 90-110% speed or pitch)"
licence = "that of the reference recordings the library was built from"
source = "arengine references add"
version = "changes as references are added and removed"
"""


IN_FILE = (
    "library.sqlite holds them (SQLite); copy this folder to other hosts as you would weights."
)
IN_DATABASE = (
    "They are in the server database (database_url), under this name; every replica with this\n"
    "# folder serves them. The weights are this file: there is nothing else to load."
)


def library_of(folder: Path, create: bool, database: sa.Engine | None = None) -> Library:
    """The library of the model folder `folder`; made, with its manifest, when `create`.
    With `database` (PostgreSQL) the model's share of it, by the name its manifest gives."""
    manifest = folder / "manifest.toml"
    if database is not None:
        if create and not manifest.exists():
            folder.mkdir(parents=True, exist_ok=True)
            _write_manifest(manifest, IN_DATABASE, manifest.name)
        return Library.shared(database, model_name(folder))
    path = folder / LIBRARY_FILE
    if path.is_file() or not create:
        return Library(path)
    library = Library.create(path)
    if not manifest.exists():
        _write_manifest(manifest, IN_FILE, LIBRARY_FILE)
    return library


def model_name(folder: Path) -> str:
    """The name a model folder's manifest gives (its folder's name when it has none yet)."""
    manifest = folder / "manifest.toml"
    if manifest.is_file():
        name = tomllib.loads(manifest.read_text(encoding="utf-8")).get("name")
        if isinstance(name, str):
            return name
    return folder.name


def _write_manifest(path: Path, where: str, weights: str) -> None:
    from arengine.kinds.fingerprint.landmarks import SAMPLE_RATE  # torch: only when adding

    text = MANIFEST.format(name=path.parent.name, rate=SAMPLE_RATE, library=weights, where=where)
    path.write_text(text, encoding="utf-8")


def add_file(
    library: Library, path: Path, limits: AudioLimits, title: str, metadata: dict[str, Any]
) -> Reference:
    """Decode, fingerprint and store the recording at `path`; the reference as stored.

    Raises the decoders' `ArengineError`s, and `InvalidInput` (`no_landmarks`) for a recording
    with nothing to find (silence, or shorter than a landmark pair).
    """
    # Here, not at the top: `references list` and `remove` need neither torch nor the decoders
    # (a second of the command's start, of two and a half).
    from arengine.audio.decode import decode
    from arengine.audio.validation import probe
    from arengine.kinds.fingerprint.landmarks import SAMPLE_RATE, fingerprint_blocks, landmark_span

    info = probe(path, limits)
    decoding = decode(path, info, SAMPLE_RATE, int(limits.max_duration_s * info.sample_rate))
    try:
        hashes, samples = fingerprint_blocks(decoding)
    finally:
        decoding.close()
    if not len(hashes):
        raise InvalidInput(
            f"the recording ({samples / SAMPLE_RATE:.1f} s) has no landmarks: silence or too "
            "short to be found; a reference needs a few seconds of sound",
            code=ErrorCode.NO_LANDMARKS,
        )
    duration_s = samples / SAMPLE_RATE
    span_s = landmark_span(hashes)
    ref = library.add(title, duration_s, metadata, hashes, span_s)
    return Reference(ref, title, duration_s, metadata, *span_s)
