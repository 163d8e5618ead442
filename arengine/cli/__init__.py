"""The `arengine` command: `serve`, `recognize` (local or `--server`), `models`, progress."""

from arengine.cli.commands import main

__all__ = ["main"]
