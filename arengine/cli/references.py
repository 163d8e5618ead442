"""`arengine references add|remove|list NAME ...`: a fingerprint model's reference library.

Files are decoded as uploads are (`arengine/audio/`: the same sniffing, limits and decoders),
fingerprinted and added in one transaction each. `add` makes the model folder `NAME` with its
`manifest.toml` and an empty library when missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from arengine.audio.decode import decode
from arengine.audio.validation import AudioLimits, probe
from arengine.errors import ArengineError
from arengine.models.fingerprint import SAMPLE_RATE, add_recording
from arengine.models.fingerprint_store import Library
from arengine.models.registry import DEFAULT_MODELS_DIR, PACKAGED_MODELS_DIR
from arengine.settings import Settings

LIBRARY_FILE = "library.sqlite"
MANIFEST = """\
# A reference library made by `arengine references add`: recordings to find inside uploads.
# library.sqlite holds them (SQLite); copy this folder to other hosts as you would weights.
name = "{name}"
kind = "fingerprint"
sample_rate = {rate}

[segments]
length_s = 30.0

[weights]
file = "{library}"   # managed with `arengine references add|remove|list {name}`

[postprocess]
min_hits = 15     # matching hashes an occurrence needs
min_score = 0.02  # share of the stretch's hashes that must match
max_gap_s = 3.0   # seconds without a match that end an occurrence

[card]
task = "occurrences of the library's reference recordings (acoustic fingerprints)"
licence = "that of the reference recordings the library was built from"
source = "arengine references add"
version = "changes as references are added and removed"
"""


def library_of(settings: Settings, name: str, create: bool) -> Library:
    """The library of the model folder `name`; made, with its manifest, when `create`."""
    folder = (settings.models_dir or DEFAULT_MODELS_DIR) / name
    path = folder / LIBRARY_FILE
    if path.is_file() or not create:
        return Library(path)
    library = Library.create(path)
    manifest = folder / "manifest.toml"
    if not manifest.exists():
        text = MANIFEST.format(name=name, rate=SAMPLE_RATE, library=LIBRARY_FILE)
        manifest.write_text(text, encoding="utf-8")
    return library


def decoded(path: Path, settings: Settings) -> np.ndarray:
    """The file as an upload would be decoded: mono float32 at the fingerprint rate."""
    limits = AudioLimits(
        max_duration_s=settings.max_duration_s,
        max_channels=settings.max_channels,
        min_sample_rate=settings.min_sample_rate,
        max_sample_rate=settings.max_sample_rate,
    )
    info = probe(path, limits)
    decoding = decode(path, info, SAMPLE_RATE, int(limits.max_duration_s * info.sample_rate))
    try:
        return np.concatenate([np.zeros(0, np.float32), *decoding])
    finally:
        decoding.close()


def references(
    settings: Settings, action: str, name: str, items: list[str], title: str | None = None
) -> int:
    """Run one action; 0 when every item was done, 1 when any was refused (said on stderr)."""
    if title is not None and (action != "add" or len(items) != 1):
        print("arengine: --title names one file being added", file=sys.stderr)
        return 2
    if (
        action == "add"
        and settings.models_dir is None
        and DEFAULT_MODELS_DIR == PACKAGED_MODELS_DIR
    ):
        print(
            "arengine: the built-in models are inside the installed package, which is no place "
            "for a library: name a folder with --models-dir (and serve that folder with "
            f"--models-dir; copy models from {DEFAULT_MODELS_DIR} into it to serve them too)",
            file=sys.stderr,
        )
        return 2
    try:
        library = library_of(settings, name, create=action == "add")
    except FileNotFoundError as error:
        print(f"arengine: {error}: add a reference first", file=sys.stderr)
        return 1
    if action == "add":
        return _add(library, [Path(item) for item in items], title, settings)
    if action == "remove":
        return _remove(library, items)
    for ref in library.references():
        print(f"{ref.id}\t{ref.duration_s:.3f}\t{ref.title}")
    return 0


def _add(library: Library, files: list[Path], title: str | None, settings: Settings) -> int:
    failed = 0
    for path in files:
        try:
            samples = decoded(path, settings)
        except (ArengineError, OSError) as error:
            print(f"arengine: {path}: {error}", file=sys.stderr)
            failed += 1
            continue
        name = title or path.stem
        duration_s = len(samples) / SAMPLE_RATE
        ref = add_recording(library, name, samples, {"file": path.name})
        print(f"{ref}\t{duration_s:.3f}\t{name}")
    return 1 if failed else 0


def _remove(library: Library, items: list[str]) -> int:
    failed = 0
    for item in items:
        if not item.isdigit() or not library.remove(int(item)):
            print(f"arengine: no reference {item!r} (see `references list`)", file=sys.stderr)
            failed += 1
    return 1 if failed else 0
