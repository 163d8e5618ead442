"""The `arengine` command: `serve`, `recognize` (local or `--server`), `models`, progress.

May import: arengine, audio, client, db, engine, errors, http, jobs, kinds, live, models, outputs,
service, settings, system, types.
"""

from arengine.cli.commands import main

__all__ = ["main"]
