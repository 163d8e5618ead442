"""The `arengine` command: `serve`, `recognize` (local or `--server`), `models`, progress.

May import: arengine, audio, client, db, engine, errors, http, jobs, kinds, live, models, outputs,
service, settings, system, types.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    """The command line. `serve` is parsed by its own light parser (`serve.py`), so the process
    it re-executes under jemalloc has loaded nothing heavy first; the other commands by the
    whole parser (`commands.py`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["serve"]:
        from arengine.cli.serve import main as serve

        serve(args)
        return
    from arengine.cli.commands import main as commands

    commands(args)
