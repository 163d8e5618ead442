"""The command line: `arengine serve` (one flag per setting, generated from `Settings`),
`arengine recognize` (files through an in-process engine), `arengine listen` (a live stream sent
to a server), `arengine models`, `arengine references` (a fingerprint model's reference
library) and `arengine db` (the shared database's schema, and copying it)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arengine import __version__
from arengine.cli.serve import (
    add_serve_parser,
    add_setting_flags,
    serve,
    settings_of,
)
from arengine.outputs.combined import TABLES
from arengine.outputs.formats import (
    FORMAT_NAMES,
    FORMATS,
    Format,
    get_format,
    known_formats,
)
from arengine.settings import FIELDS, Settings
from arengine_client.cli import (
    JOB_OVER_S,
    add_concurrency_flag,
    add_server_flags,
    listen_command,
    listen_parser,
)
from arengine_client.files import print_skipped, report

if TYPE_CHECKING:  # the engine and runner modules load torch; `--help` should not
    from arengine.cli.runner import Failure, Planned
    from arengine.service.engine import Engine

log = logging.getLogger("arengine")
ENGINE_SETTINGS = (
    "engine_threads",
    "intra_op_threads",
    "inter_op_threads",
    "models_dir",
    "segment_s",
    "segments_ahead",
    "max_duration_s",
)
"""The settings `recognize` takes: those of the engine, not of the HTTP server. Not `models`:
`--model` names the models to run, and only those load."""

RECOGNIZE_EXAMPLES = (
    """examples:
  arengine recognize talk.flac                       # talk.json in the current folder
  arengine recognize calls/ --format csv --out tags/ # every audio file under calls/
  arengine recognize a.wav b.mp3 --format vtt --concurrency 2 --engine-threads 4
  arengine recognize songs/ --model pitch --format raven
  arengine recognize archive/ --model birds --format birdnet --resume --combined all.csv
  ARENGINE_API_KEY=... arengine recognize archive/ --server http://lb:8080 --concurrency 16 --resume

formats (other names in brackets):
"""
    + "\n".join(
        f"  {f.name:<9}{' (' + ', '.join(f.aliases) + ')' if f.aliases else '':<13} "
        f".{f.extension:<15}{f.description}"
        for f in FORMATS.values()
    )
    + """
exit status: 0 when every file was recognized, 1 when any failed, 2 on a usage error"""
)


REFERENCES_EXAMPLES = """examples:
  arengine references add jingles ident.wav promo.mp3   # creates models/jingles when missing
  arengine references add jingles take2.flac --title "Station ident"
  arengine references list jingles
  arengine references remove jingles 3
  arengine references list jingles --database-url postgresql://arengine@db/arengine

exit status: 0 when done, 1 when a file or id was refused, 2 on a usage error"""


DB_EXAMPLES = """examples:
  ARENGINE_DATABASE_URL=postgresql://arengine@db/arengine arengine db upgrade
  arengine db current --data-dir data
  arengine db copy --from sqlite:///data/jobs.sqlite3 --to postgresql://arengine@db/arengine \\
      --models-dir models    # its fingerprint models' library files go to the shared tables

exit status: 0 when done, 1 when the database refused, 2 on a usage error"""

DATABASE_SETTINGS = (
    "database_url",
    "database_url_file",
    "database_password_file",
    "data_dir",
    "models_dir",
)
"""The settings `arengine db` takes (and ARENGINE_DATABASE_PASSWORD from the environment);
`copy` reads the fingerprint models' library files of `models_dir`."""
REFERENCES_DATABASE = (
    "database_url", "database_url_file", "database_password_file", "database_migrate"
)  # fmt: skip
"""The database settings `arengine references` takes: a PostgreSQL URL holds the libraries."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="arengine",
        description="Audio-recognition inference server and command-line tagger.",
        epilog="examples:\n  arengine serve --port 8080\n  arengine recognize calls/ --format csv"
        "\n  arengine models\nRun `arengine COMMAND --help` for a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"arengine {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(commands)
    recognize = commands.add_parser(
        "recognize",
        help="tag audio files in-process, one output file per input",
        description="Tag audio files (and the audio files under folders) with an in-process "
        "engine, a few files at a time, writing <out>/<stem>.<ext> for each (a file under a "
        "folder keeps its path under it: <out>/sub/<stem>.<ext>).",
        epilog=RECOGNIZE_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    recognize.add_argument("inputs", nargs="+", type=Path, metavar="FILE_OR_DIR")
    recognize.add_argument(
        "--model",
        default="speech",
        help="model name, or several separated by commas (speech,notes: decoded once, "
        "one output with every model's tags in timestamp order); only these load; "
        "default: speech",
    )
    recognize.add_argument("--models", action=_Removed, help=argparse.SUPPRESS)
    recognize.add_argument(
        "--gate",
        metavar="MODEL",
        help="a loudness model that gates the others: they skip the segments in which it hears "
        "nothing loud (the HTTP query's gate; it loads too)",
    )
    recognize.add_argument(
        "--format",
        default="json",
        choices=FORMAT_NAMES,
        metavar="FORMAT",
        help=f"output format: {known_formats().removesuffix(', ndjson')} (default: json)",
    )
    recognize.add_argument(
        "--out", type=Path, default=Path("."), help="output folder (default: current folder)"
    )
    add_concurrency_flag(recognize, "files recognized at once (default: 4)")
    add_server_flags(recognize, required=False)
    recognize.add_argument(
        "--resume",
        action="store_true",
        help="skip inputs whose output file already exists (an interrupted run started again; "
        "names come from every input, done or not, so none takes another's)",
    )
    recognize.add_argument(
        "--combined",
        type=Path,
        metavar="FILE",
        help="also write one table of every file's rows with the recording's path (formats "
        f"{', '.join(TABLES)}), as BirdNET-Analyzer's combined results; with --resume it "
        "includes the outputs already there",
    )
    add_setting_flags(recognize, ENGINE_SETTINGS)
    _add_parameter_flags(recognize)
    listen = listen_parser(commands)
    _add_parameter_flags(listen)
    listen.add_argument(
        "--gate",
        dest=PARAMETER_PREFIX + "gate",  # sent in the query, as the parameters are
        default=argparse.SUPPRESS,
        metavar="MODEL",
        help="a loudness model that gates the others: they skip the segments in which it hears "
        "nothing loud",
    )
    models = commands.add_parser(
        "models",
        help="list the models that load",
        description="Load the models and list them: name, kind, label count, sample rate.",
        epilog="examples:\n  arengine models\n  arengine models --models-dir ./my-models"
        "\n  arengine models --markdown   # the model cards, as in models/README.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    models.add_argument(
        "--markdown",
        action="store_true",
        help="print the model cards as a Markdown table (task, licence, source, plan...)",
    )
    add_setting_flags(models, ("models_dir", "models", "segment_s"))
    references = commands.add_parser(
        "references",
        help="add, remove or list the references of a fingerprint model",
        description="Manage a fingerprint model's reference library (its folder's "
        "library.sqlite). Servers that load the model see the change at their next segment.",
        epilog=REFERENCES_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    references.add_argument("action", choices=("add", "remove", "list"))
    references.add_argument("name", help="the model's folder in the models folder")
    references.add_argument(
        "items", nargs="*", help="add: audio files; remove: reference ids; list: none"
    )
    references.add_argument(
        "--title", help="add: the title of the (one) reference, instead of its file name"
    )
    add_setting_flags(references, ("models_dir", "max_duration_s", *REFERENCES_DATABASE))
    db = commands.add_parser(
        "db",
        help="migrate the jobs' database, or copy one into another",
        description="The database the servers share (--database-url, or the SQLite file of "
        "--data-dir): bring its schema up to date (upgrade), show its revisions (current), or "
        "copy an embedded SQLite database into an empty PostgreSQL one (copy).",
        epilog=DB_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    db.add_argument("action", choices=("upgrade", "current", "copy"))
    db.add_argument("--from", dest="source", metavar="URL", help="copy: the database to read")
    db.add_argument("--to", dest="target", metavar="URL", help="copy: the empty database to fill")
    add_setting_flags(db, DATABASE_SETTINGS)
    return parser


class _Removed(argparse.Action):
    """`recognize --models`, which chose the models to load beside `--model`'s models to run: a
    usage error that says what to use (argparse would otherwise take it as `--models-dir`)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs="?", **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        parser.error(
            f"{option_string} is gone: --model names the models to run (only those load), "
            "--models-dir the folder they are in"
        )


def _add_parameter_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per post-processing parameter of any kind (`--lat 40.4`, `--species 'A;B'`),
    from the kinds' declarations, as the HTTP query takes them."""
    from arengine.kinds.catalog import KINDS

    kinds: dict[str, list[str]] = {}
    types: dict[str, Any] = {}
    docs: dict[str, str] = {}
    for kind in KINDS.values():
        params = kind.parameters
        for name, bounds in params.bounds().items():
            types.setdefault(name, int if bounds.whole else float)
            docs.setdefault(name, params.docs()[name])
            kinds.setdefault(name, []).append(kind.name)
        for name, doc in params.texts().items():
            types.setdefault(name, str)
            docs.setdefault(name, doc)
            kinds.setdefault(name, []).append(kind.name)
    for name, used in kinds.items():
        # One kind's parameter says what it does; a shared name means something per kind.
        doc = docs[name] if len(used) == 1 else "post-processing parameter, per kind (README)"
        parser.add_argument(
            "--" + name.replace("_", "-"),
            dest=PARAMETER_PREFIX + name,
            type=types[name],
            default=argparse.SUPPRESS,
            metavar=name.upper(),
            help=f"{doc} ({', '.join(used)} models)".replace("%", "%%"),
        )


PARAMETER_PREFIX = "parameter:"
"""Where a post-processing flag's value goes in the parsed arguments (no setting has a colon)."""


def main(argv: Sequence[str] | None = None) -> None:
    args = vars(build_parser().parse_args(argv))
    command = args.pop("command")
    parameters = {
        name.removeprefix(PARAMETER_PREFIX): args.pop(name)
        for name in list(args)
        if name.startswith(PARAMETER_PREFIX)
    }
    options = {name: args.pop(name) for name in list(args) if name not in FIELDS}
    if command in ("recognize", "listen"):
        options["parameters"] = parameters
    settings = settings_of(args)
    if command == "serve":
        serve(settings, list(sys.argv[1:] if argv is None else argv))
    elif command == "recognize":
        sys.exit(recognize(settings, **options))
    elif command == "listen":
        sys.exit(listen_command(**options))
    elif command == "models":
        sys.exit(list_models(settings, **options))
    elif command == "references":
        from arengine.cli.references import references

        sys.exit(references(settings, **options))
    elif command == "db":
        from arengine.cli.database import database

        sys.exit(database(settings, **options))


def _engine(settings: Settings) -> Any:
    """An in-process engine with its models loaded, torch threads pinned as `serve` does."""
    os.environ.setdefault("OMP_NUM_THREADS", str(settings.engine.intra_op_threads))
    os.environ.setdefault("MKL_NUM_THREADS", str(settings.engine.intra_op_threads))
    logging.basicConfig(level=logging.WARNING, format="arengine: %(levelname)s: %(message)s")

    from arengine.service.engine import Engine
    from arengine.system.threads import configure_torch

    configure_torch(settings.engine.intra_op_threads, settings.engine.inter_op_threads)
    engine = Engine(settings)
    engine.load_models()
    for failure in engine.failures:
        print(f"arengine: model {failure.path} unavailable: {failure.reason}", file=sys.stderr)
    return engine


def recognize(
    settings: Settings,
    inputs: list[Path],
    model: str,
    format: str,
    out: Path,
    concurrency: int,
    server: str | None = None,
    resume: bool = False,
    parameters: Mapping[str, float | str] | None = None,
    combined: Path | None = None,
    job_over_s: float = JOB_OVER_S,
    gate: str | None = None,
) -> int:
    """Tag every input file; 0 if all succeeded, 1 if any failed, 2 if nothing could start.
    `parameters`: the post-processing overrides of every file (`{"lat": 40.4, "lon": -80.0}`);
    `combined`: where to write one table of all files' rows too; `gate`: a loudness model whose
    quiet segments the models skip."""
    overrides = dict(parameters or {})
    from arengine.cli.runner import expand, plan, recognize_files, remaining, write_combined

    files, skipped = expand(inputs)
    if not files:
        print("arengine: no audio files found in the inputs", file=sys.stderr)
        print_skipped(skipped)
        return 2
    if concurrency < 1:
        print("arengine: --concurrency must be at least 1", file=sys.stderr)
        return 2
    fmt = get_format(format)
    # Names over every input, before `--resume` leaves some out: a file's name never depends on
    # which of the others are done.
    work = plan(files, fmt, out, [path for path in inputs if path.is_dir()])
    unfit = _combined_refusal(combined, fmt, work)
    if unfit is not None:
        print(f"arengine: {unfit}", file=sys.stderr)
        return 2
    todo = remaining(work) if resume else work
    if len(todo) < len(work) and todo:
        print(f"resume: {len(work) - len(todo)} outputs already there, skipped", file=sys.stderr)
    failures: list[Failure] = []
    if todo and server is not None:
        from arengine_client.remote import Remote, recognize_remote

        remote = dataclasses.replace(Remote.from_env(server), job_over_s=job_over_s)
        query = overrides if gate is None else {**overrides, "gate": gate}
        failures = recognize_remote(remote, todo, model, fmt, concurrency, overrides=query)
    elif todo:
        loaded = model if gate is None else f"{model},{gate}"
        engine = _engine(
            settings.model_copy(
                update={"engine": settings.engine.model_copy(update={"models": loaded})}
            )
        )
        try:
            refused = _refusal(engine, model, format, overrides, gate)
            if refused is not None:
                print(f"arengine: {refused}", file=sys.stderr)
                return 2
            failures = recognize_files(
                engine, todo, model, fmt, concurrency, overrides=overrides, gate=gate
            )
        finally:
            engine.close()
    if combined is not None:
        count = write_combined(work, fmt, combined, failures)
        print(f"combined: {count} files' rows in {combined}", file=sys.stderr)
    if todo:
        print_skipped(skipped)
    return report(failures, todo)


def _combined_refusal(combined: Path | None, fmt: Format, work: Sequence[Planned]) -> str | None:
    """Why `--combined` cannot be written in `fmt` to `combined`, or None."""
    if combined is None:
        return None
    if fmt.name not in TABLES:
        return f"--combined takes a table format: {', '.join(TABLES)}; not {fmt.name}"
    if any(item.target.resolve() == combined.resolve() for item in work):
        return f"--combined {combined} is the output file of one of the inputs"
    return None


def _refusal(
    engine: Engine,
    model: str,
    format: str,
    overrides: Mapping[str, float | str],
    gate: str | None = None,
) -> str | None:
    """Why `model` (one name or several, comma-separated) cannot run with `overrides` and
    `gate` or fill `format`."""
    from arengine.errors import ArengineError

    try:
        recognizers = engine.check(model, overrides, gate)
    except ArengineError as error:
        return str(error)
    for recognizer in recognizers:
        if not get_format(format).accepts(recognizer.labels):
            return f"format {format} holds only notes; model {recognizer.name!r} tags none"
    return None


def list_models(settings: Settings, markdown: bool = False) -> int:
    """Print the models that load, one per line (or their cards as Markdown); 1 if none did."""
    engine = _engine(settings)
    if markdown:
        from arengine.cli.cards import markdown_table

        try:
            print(markdown_table(engine.models))
        finally:
            engine.close()
        return 0 if engine.models else 1
    try:
        rows = [("name", "kind", "labels", "sample_rate")]
        for name, loaded in sorted(engine.models.items()):
            recognizer = loaded.recognizer
            rows.append(
                (name, recognizer.kind, str(len(recognizer.labels)), str(recognizer.sample_rate))
            )
    finally:
        engine.close()
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return 0 if engine.models else 1
