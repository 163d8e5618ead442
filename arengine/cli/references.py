"""`arengine references add|remove|list NAME ...`: a fingerprint model's reference library.

Files are decoded as uploads are (`arengine/kinds/fingerprint/references.py`: the same
sniffing, limits and decoders), fingerprinted and added in one transaction each. `add` makes the
model folder `NAME` with its `manifest.toml` and an empty library when missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

from arengine.audio.validation import AudioLimits
from arengine.errors import ArengineError
from arengine.kinds.fingerprint.library import Library
from arengine.kinds.fingerprint.references import add_file, library_of
from arengine.models.registry import DEFAULT_MODELS_DIR, PACKAGED_MODELS_DIR
from arengine.settings import Settings


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
        library = library_of((settings.models_dir or DEFAULT_MODELS_DIR) / name, action == "add")
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
    limits = AudioLimits(
        max_duration_s=settings.max_duration_s,
        max_channels=settings.max_channels,
        min_sample_rate=settings.min_sample_rate,
        max_sample_rate=settings.max_sample_rate,
    )
    failed = 0
    for path in files:
        try:
            ref = add_file(library, path, limits, title or path.stem, {"file": path.name})
        except (ArengineError, OSError) as error:
            print(f"arengine: {path}: {error}", file=sys.stderr)
            failed += 1
            continue
        print(f"{ref.id}\t{ref.duration_s:.3f}\t{ref.title}")
    return 1 if failed else 0


def _remove(library: Library, items: list[str]) -> int:
    failed = 0
    for item in items:
        if not item.isdigit() or not library.remove(int(item)):
            print(f"arengine: no reference {item!r} (see `references list`)", file=sys.stderr)
            failed += 1
    return 1 if failed else 0
