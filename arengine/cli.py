"""The command line: `arengine serve`, with one flag per setting, generated from `Settings`."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from arengine.settings import Settings

log = logging.getLogger("arengine")
ENV_ONLY = frozenset({"api_keys"})
"""Settings that are secrets: a flag would show them in every user's `ps`."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="arengine", description="Audio-recognition inference server."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="run the HTTP server",
        description="Run the HTTP server. Every flag can also be set as ARENGINE_<NAME>.",
        epilog="example: arengine serve --port 8080 --engine-threads 4\n"
        "secrets are environment only: ARENGINE_API_KEYS=key1,key2 arengine serve",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for name, field in Settings.model_fields.items():
        if name in ENV_ONLY:
            continue
        flag = "--" + name.replace("_", "-")
        help_text = f"{field.description} [env ARENGINE_{name.upper()}, default {field.default}]"
        if field.annotation is bool:
            serve.add_argument(
                flag,
                dest=name,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=help_text,
            )
        else:
            serve.add_argument(
                flag,
                dest=name,
                type=_flag_type(field.annotation),
                default=argparse.SUPPRESS,
                help=help_text,
            )
    return parser


def _flag_type(annotation: Any) -> Any:
    for kind in (int, float, Path):
        if annotation is kind or kind in getattr(annotation, "__args__", ()):
            return kind
    return str


def main(argv: Sequence[str] | None = None) -> None:
    args = vars(build_parser().parse_args(argv))
    command = args.pop("command")
    try:
        settings = Settings(**args)
    except ValidationError as error:
        sys.exit(f"arengine: invalid settings:\n{error}")
    if command == "serve":
        serve(settings, list(sys.argv[1:] if argv is None else argv))


def serve(settings: Settings, argv: list[str]) -> None:
    """Run the server; re-executes once under jemalloc first when it is wanted and installed."""
    from arengine.allocator import active_allocator, reexec_with_jemalloc
    from arengine.logs import configure as configure_logging

    if settings.jemalloc:
        reexec_with_jemalloc(argv, settings.malloc_conf)
    # OpenMP reads this when torch loads; set before the import so no pool starts wider.
    os.environ.setdefault("OMP_NUM_THREADS", str(settings.intra_op_threads))
    os.environ.setdefault("MKL_NUM_THREADS", str(settings.intra_op_threads))
    configure_logging(settings.log_level)

    from arengine.http import server
    from arengine.http.app import create_app
    from arengine.threads import available_cpus, configure_torch

    threads = configure_torch(settings.intra_op_threads, settings.inter_op_threads)
    fields = {
        "allocator": active_allocator(),
        "intra_op_threads": threads.intra_op,
        "inter_op_threads": threads.inter_op,
        "engine_threads": settings.engine_threads or available_cpus(),
        "cpus": available_cpus(),
    }
    message = " ".join(f"{key}={value}" for key, value in fields.items())
    log.info("starting: %s", message, extra={"fields": fields})
    server.run(create_app(settings), settings)
