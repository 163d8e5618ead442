"""`arengine serve`: its flags (one per setting, grouped by section), and the server's start.

Light on purpose: `serve` re-executes itself under jemalloc (`arengine/system/allocator.py`)
before anything heavy loads, so this module imports the settings alone, and `main` parses a
`serve` command line without the other commands' parsers (theirs load torch, the formats and
every kind). Everything else loads once, under the allocator the server runs with.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_settings import SettingsError

from arengine.settings import FIELDS, SECTIONS, Settings

log = logging.getLogger("arengine")
ENV_ONLY = frozenset(
    {"api_keys", "admin_keys", "webhook_secret", "mqtt_password", "database_password"}
)
"""Settings that are secrets: a flag would show them in every user's `ps`."""


def add_serve_parser(commands: Any) -> None:
    """The `serve` command in `commands` (an `add_subparsers` result): a flag per setting."""
    serve = commands.add_parser(
        "serve",
        help="run the HTTP server",
        description="Run the HTTP server. Every flag can also be set as ARENGINE_<NAME> or "
        "ARENGINE_<SECTION>__<NAME>.",
        epilog="example: arengine serve --port 8080 --engine-threads 4\n"
        "secrets are environment only: ARENGINE_API_KEYS=key1,key2 ARENGINE_ADMIN_KEYS=key3 "
        "arengine serve",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for section, model in SECTIONS.items():
        group = serve.add_argument_group(f"{section} settings", model.__doc__)
        add_setting_flags(group, model.model_fields)


def add_setting_flags(parser: argparse._ActionsContainer, names: Iterable[str]) -> None:
    """A flag per setting in `names` (`--engine-threads`), secrets left out (`ENV_ONLY`)."""
    for name in names:
        if name in ENV_ONLY:
            continue
        field = SECTIONS[FIELDS[name]].model_fields[name]
        flag = "--" + name.replace("_", "-")
        help_text = f"{field.description} [env ARENGINE_{name.upper()}, default {field.default}]"
        if field.annotation is bool:
            parser.add_argument(
                flag,
                dest=name,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=help_text,
            )
        else:
            parser.add_argument(
                flag,
                dest=name,
                type=flag_type(field.annotation),
                default=argparse.SUPPRESS,
                help=help_text,
            )


def flag_type(annotation: Any) -> Any:
    """The argparse type of a setting's annotation: int, float or Path, else str."""
    for kind in (int, float, Path):
        if annotation is kind or kind in getattr(annotation, "__args__", ()):
            return kind
    return str


def settings_of(flags: dict[str, Any]) -> Settings:
    """The settings from the environment and the parsed `flags`; exits naming what is wrong."""
    try:
        return Settings(**flags)
    except (ValidationError, SettingsError) as error:
        sys.exit(f"arengine: invalid settings:\n{error}")


def main(argv: Sequence[str]) -> None:
    """`arengine serve ...` (`argv` starts with `serve`), parsed by the `serve` parser alone:
    the same flags and help as the whole command line's, which refuses what it does not know."""
    parser = argparse.ArgumentParser(prog="arengine")
    add_serve_parser(parser.add_subparsers(dest="command", required=True))
    parsed, unknown = parser.parse_known_args(argv)
    if unknown:  # refused by the whole command line, whose usage names every command
        from arengine.cli.commands import main as commands

        commands(argv)
        return
    flags = vars(parsed)
    flags.pop("command")
    serve(settings_of(flags), list(argv))


def serve(settings: Settings, argv: list[str]) -> None:
    """Run the server; re-executes once under jemalloc first when it is wanted and installed."""
    from arengine.system.allocator import active_allocator, reexec_with_jemalloc
    from arengine.system.logs import configure as configure_logging

    if settings.server.jemalloc:
        reexec_with_jemalloc(argv, settings.server.malloc_conf)
    _check_job_store(settings)
    # OpenMP reads this when torch loads; set before the import so no pool starts wider.
    os.environ.setdefault("OMP_NUM_THREADS", str(settings.engine.intra_op_threads))
    os.environ.setdefault("MKL_NUM_THREADS", str(settings.engine.intra_op_threads))
    configure_logging(settings.server.log_level)

    from arengine.http import server
    from arengine.http.app import create_app
    from arengine.system.threads import available_cpus, configure_torch

    threads = configure_torch(settings.engine.intra_op_threads, settings.engine.inter_op_threads)
    fields = {
        "allocator": active_allocator(),
        "intra_op_threads": threads.intra_op,
        "inter_op_threads": threads.inter_op,
        "engine_threads": settings.engine.engine_threads or available_cpus(),
        "cpus": available_cpus(),
        "api_keys": len(settings.security.api_key_list()),  # how many, never which
        "admin_keys": len(settings.security.admin_key_list()),
    }
    message = " ".join(f"{key}={value}" for key, value in fields.items())
    log.info("starting: %s", message, extra={"fields": fields})
    if not settings.security.api_keys and settings.server.host not in (
        "127.0.0.1",
        "::1",
        "localhost",
    ):
        log.warning(
            "no API keys: every endpoint is open to whoever reaches %s", settings.server.host
        )
    server.run(create_app(settings), settings)


def _check_job_store(settings: Settings) -> None:
    """Exit with one line naming the job store and what to do when it cannot be opened, before
    the server starts (where it would be a traceback from the application's start)."""
    if settings.jobs.data_dir is None:
        return
    from arengine.db.engine import open_engine
    from arengine.db.url import DatabaseUrlError, database_url
    from arengine.jobs.store import JobStore, StoreUnusable

    try:
        url = database_url(settings)
        engine = None if url is None else open_engine(url, 1)
        JobStore.open(
            settings.jobs.data_dir, engine, migrate=settings.database.database_migrate
        ).close()
    except (StoreUnusable, DatabaseUrlError, OSError) as error:
        sys.exit(f"arengine: {error}")
