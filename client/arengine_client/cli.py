"""The `arengine` command, installed by the client distribution: arengine's full command line
where arengine is installed (`arengine.cli`), and otherwise the commands that only talk to a
server, `recognize --server URL` and `listen --server URL`; `serve`, `models` and `references`
then say that they need the full package.

The flags of those two commands are declared here once, for both command lines. Without arengine,
the post-processing parameters are not known here (the kinds declare them, on the server): each
`--name VALUE` the parser does not know is sent as one (`--threshold 0.6`), and the server
refuses a wrong one with its name and range.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from arengine_client import __version__
from arengine_client.errors import ArengineError
from arengine_client.files import Failure, plan, remaining
from arengine_client.live import CONTAINER_FORMATS, FORMATS

JOB_OVER_S = 600.0
"""`recognize --server` sends a recording longer than this as a job: the server's default
`request_timeout_s` is as long, and a job survives a dropped connection and a restart."""

FULL_ONLY = {
    "serve": "run the HTTP server",
    "models": "list the models that load",
    "references": "add, remove or list the references of a fingerprint model",
}
"""The commands that run the engine here, with their help: arengine's, not the client's."""

AUDIO_SUFFIXES = frozenset(
    {
        ".wav",
        ".wave",
        ".w64",
        ".rf64",
        ".flac",
        ".mp3",
        ".ogg",
        ".oga",
        ".opus",
        ".spx",
        ".m4a",
        ".m4b",
        ".mp4",
        ".mov",
        ".aac",
        ".adts",
        ".webm",
        ".mka",
        ".mkv",
        ".aif",
        ".aiff",
        ".aifc",
        ".caf",
        ".au",
        ".snd",
        ".wma",
        ".amr",
        ".ac3",
        ".mpc",
        ".wv",
        ".ape",
    }
)
"""The files under a folder that the client alone sends: it cannot look inside them as
arengine does (by content), so it goes by the name; other files are reported as skipped."""

LISTEN_EXAMPLES = """examples:
  arengine listen --server URL --sources sources.toml > tags.ndjson
  ffmpeg -i rtsp://camera/stream -f s16le -ac 1 -ar 16000 - | arengine listen --server URL -
  ffmpeg -i rtsp://cam/stream -c:a libopus -f webm - | arengine listen --server URL --format webm -
  arecord -f S16_LE -r 16000 -c 1 -t raw | arengine listen --server URL --model speech,events -
  arengine listen --server URL --realtime --model events hall.flac > tags.ndjson

Tags are printed as JSON lines as each becomes final, the summary last.
exit status: 0 when the stream ended with its summary, 1 when the server ended it with an error,
2 when it could not start"""


def main(argv: Sequence[str] | None = None) -> None:
    """The `arengine` console script."""
    if importlib.util.find_spec("arengine") is not None:
        from arengine.cli import main as full

        full(argv)
        return
    sys.exit(run(argv))


def add_concurrency_flag(recognize: argparse.ArgumentParser, help: str) -> None:
    """`--concurrency N`: files at once. `--jobs`, its old name, still works and warns: `jobs`
    are also the server's durable jobs (`POST /v1/jobs`, which `--job-over-s` sends to)."""
    recognize.add_argument("--concurrency", type=int, default=4, metavar="N", help=help)
    recognize.add_argument(
        "--jobs",
        type=int,
        dest="concurrency",
        default=argparse.SUPPRESS,
        action=_DeprecatedAlias,
        help=argparse.SUPPRESS,
    )


class _DeprecatedAlias(argparse.Action):
    """An option's old name: it sets the same value, and says so on stderr."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        new = "--" + self.dest.replace("_", "-")
        print(f"arengine: {option_string} is deprecated; use {new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_server_flags(recognize: argparse.ArgumentParser, required: bool) -> None:
    """`recognize`'s flags for a server: `--server` and `--job-over-s`."""
    recognize.add_argument(
        "--server",
        metavar="URL",
        required=required,
        help="send the files to this arengine server (or load balancer) instead of an in-process "
        "engine; the API key comes from ARENGINE_API_KEY; --concurrency uploads at a time",
    )
    recognize.add_argument(
        "--job-over-s",
        type=float,
        default=JOB_OVER_S,
        metavar="SECONDS",
        help="with --server: a recording longer than this is sent as a job (POST /v1/jobs), "
        "which survives a dropped connection and a server restart; its result is fetched once "
        f"done (default: {JOB_OVER_S:g})",
    )


def add_listen_flags(listen: argparse.ArgumentParser) -> None:
    """`listen`'s own flags (the post-processing parameters are the caller's)."""
    listen.add_argument(
        "source",
        metavar="INPUT",
        nargs="?",
        help="- for raw PCM on standard input, or a file (or --sources instead)",
    )
    listen.add_argument("--server", metavar="URL", required=True, help="the arengine server")
    listen.add_argument(
        "--sources",
        type=Path,
        metavar="FILE",
        help="a TOML file of named sources (cameras' RTSP, HTTP or Icecast streams, sound "
        "devices) read here and sent at once, each reconnected when it or the server goes away; "
        "needs arengine-client[sources] (PyAV)",
    )
    listen.add_argument(
        "--status-s",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="with --sources: print each source's status line this often, and at each change "
        "(0: at changes only; default: 10)",
    )
    listen.add_argument(
        "--model", help="model name, or several separated by commas (default: speech)"
    )
    listen.add_argument(
        "--format",
        "--pcm-format",
        dest="pcm_format",
        choices=FORMATS,
        default="s16le",
        help="standard input's audio: raw PCM samples, or a WebM/Ogg stream (Opus or Vorbis) "
        "that states its own rate and channels (default: s16le)",
    )
    listen.add_argument(
        "--sample-rate", type=int, default=16000, help="standard input's rate (default: 16000)"
    )
    listen.add_argument(
        "--channels", type=int, default=1, help="standard input's channels (default: 1)"
    )
    listen.add_argument(
        "--realtime",
        action="store_true",
        help="send a file at real speed, as a live source would (default: as fast as the "
        "server reads)",
    )
    listen.add_argument(
        "--progress", action="store_true", help="print the progress lines to standard error"
    )


def listen_parser(commands: Any) -> argparse.ArgumentParser:
    """The `listen` command's parser, added to `commands` (a parser's subparsers)."""
    listen: argparse.ArgumentParser = commands.add_parser(
        "listen",
        help="send a live stream to a server and print its tags as they come",
        description="Send raw PCM or a WebM/Ogg stream from standard input (-), or an audio "
        "file, to a server's WS /v1/listen; print each tag as a JSON line as soon as it is "
        "final. The API key comes from ARENGINE_API_KEY.",
        epilog=LISTEN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_listen_flags(listen)
    return listen


def listen_command(
    source: str | None,
    server: str,
    model: str | None,
    pcm_format: str,
    sample_rate: int,
    channels: int,
    realtime: bool,
    progress: bool,
    parameters: Mapping[str, float | str],
    sources: Path | None = None,
    status_s: float = 10.0,
) -> int:
    """`arengine listen`: 0 when the stream ended with its summary (`listen.py`); with a
    sources file, when every source ended (`listen_sources.py`)."""
    from arengine_client.remote import Remote

    if sources is not None:
        if source is not None or model is not None or parameters:
            print(
                "arengine: with --sources, each source's models and parameters come from the "
                "file; give no INPUT, --model or parameter flags",
                file=sys.stderr,
            )
            return 2
        return _listen_sources(Remote.from_env(server), sources, progress, status_s)
    if source is None:
        print("arengine: listen needs an INPUT (- or a file) or --sources FILE", file=sys.stderr)
        return 2
    from arengine_client.listen import listen

    opening: dict[str, Any] = {"format": pcm_format}
    if pcm_format not in CONTAINER_FORMATS:
        opening.update(sample_rate=sample_rate, channels=channels)
    return listen(
        Remote.from_env(server), source, model or "speech", opening, realtime, progress, parameters
    )


def _listen_sources(remote: Any, path: Path, progress: bool, status_s: float) -> int:
    """`arengine listen --sources`: 2 when the file or PyAV is missing or wrong."""
    from arengine_client.capture import CaptureError, require_av
    from arengine_client.listen_sources import listen_sources
    from arengine_client.sources import SourcesFileError, load

    try:
        found = load(path)
        require_av()
    except (SourcesFileError, CaptureError) as error:
        print(f"arengine: {error}", file=sys.stderr)
        return 2
    return listen_sources(remote, found, progress=progress, status_s=status_s)


def build_parser() -> argparse.ArgumentParser:
    """The client's command line: the remote commands, and a refusal for the others."""
    parser = argparse.ArgumentParser(
        prog="arengine",
        description="arengine's client: send audio files or a live stream to an arengine "
        "server. `serve`, `models` and `references` need the full arengine package.",
        epilog="examples:\n  arengine recognize --server http://lb:8080 calls/ --format csv"
        "\n  arengine listen --server http://lb:8080 hall.wav"
        "\nPost-processing parameters go as --NAME VALUE (--threshold 0.6); the server checks "
        "them.\nRun `arengine COMMAND --help` for a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"arengine-client {__version__} (no arengine)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    recognize = commands.add_parser(
        "recognize",
        help="tag audio files on a server, one output file per input",
        description="Send audio files (and the audio files under folders, by their names) to "
        "a server, writing <out>/<stem>.<ext> for each, in a format the server writes.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    recognize.add_argument("inputs", nargs="+", type=Path, metavar="FILE_OR_DIR")
    recognize.add_argument("--model", default="speech", help="model name, or several, commas")
    recognize.add_argument(
        "--format", default="json", help="output format, one of the server's (default: json)"
    )
    recognize.add_argument(
        "--out", type=Path, default=Path("."), help="output folder (default: current folder)"
    )
    add_concurrency_flag(recognize, "files sent at once (default: 4)")
    recognize.add_argument(
        "--resume", action="store_true", help="skip inputs whose output file already exists"
    )
    add_server_flags(recognize, required=True)
    listen_parser(commands)
    for name, summary in FULL_ONLY.items():
        commands.add_parser(name, help=f"{summary} (needs the full arengine package)")
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    """The client's command line; its exit status."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    options = vars(args)
    command = options.pop("command")
    if command in FULL_ONLY:
        print(
            f"arengine: `arengine {command}` needs the full arengine package (pip install "
            "arengine); this is arengine-client, which sends work to a server "
            "(`arengine recognize --server URL`, `arengine listen --server URL`)",
            file=sys.stderr,
        )
        return 2
    options["parameters"] = _parameters(parser, rest)
    if command == "listen":
        return listen_command(**options)
    return recognize(**options)


def _parameters(parser: argparse.ArgumentParser, rest: Sequence[str]) -> dict[str, float | str]:
    """`--name VALUE` (or `--name=VALUE`) pairs as post-processing parameters, as given."""
    parameters: dict[str, float | str] = {}
    items = iter(rest)
    for item in items:
        if not item.startswith("--") or item == "--":
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        name, equals, value = item[2:].partition("=")
        if not equals:
            value = next(items, "")
            if not value or value.startswith("--"):
                parser.error(f"--{name} needs a value (a post-processing parameter)")
        parameters[name.replace("-", "_")] = value
    return parameters


def recognize(
    inputs: list[Path],
    server: str,
    model: str,
    format: str,
    out: Path,
    concurrency: int,
    job_over_s: float,
    resume: bool,
    parameters: Mapping[str, float | str],
) -> int:
    """`arengine recognize --server` without arengine: the server writes each output."""
    from arengine_client._sync import Client
    from arengine_client.files import print_skipped, report
    from arengine_client.remote import Remote, recognize_remote, server_format

    files, skipped = expand(inputs)
    if not files:
        print("arengine: no audio files found in the inputs", file=sys.stderr)
        print_skipped(skipped)
        return 2
    if concurrency < 1:
        print("arengine: --concurrency must be at least 1", file=sys.stderr)
        return 2
    remote = dataclasses.replace(Remote.from_env(server), job_over_s=job_over_s)
    with Client(remote.url, remote.api_key) as client:
        try:
            fmt = server_format(client, format)
        except (ValueError, ArengineError, httpx.HTTPError) as error:
            print(f"arengine: {server}: {_why(error)}", file=sys.stderr)
            return 2
        work = plan(files, fmt, out, [path for path in inputs if path.is_dir()])
        todo = remaining(work) if resume else work
        if len(todo) < len(work) and todo:
            print(
                f"resume: {len(work) - len(todo)} outputs already there, skipped", file=sys.stderr
            )
        failures: list[Failure] = []
        if todo:
            failures = recognize_remote(remote, todo, model, fmt, concurrency, overrides=parameters)
    if todo:
        print_skipped(skipped)
    return report(failures, todo)


def _why(error: Exception) -> str:
    if isinstance(error, ArengineError):
        return error.message
    return str(error) or type(error).__name__


def expand(inputs: Sequence[Path]) -> tuple[list[Path], list[Failure]]:
    """Files as given, and the files under each folder with an audio file's name (recursively,
    sorted), with the other files skipped and why."""
    files: list[Path] = []
    skipped: list[Failure] = []
    for item in inputs:
        if not item.is_dir():
            files.append(item)
            continue
        for path in sorted(p for p in item.rglob("*") if p.is_file()):
            if path.suffix.lower() in AUDIO_SUFFIXES:
                files.append(path)
            else:
                skipped.append(Failure(path, "not an audio file's name"))
    return files, skipped
