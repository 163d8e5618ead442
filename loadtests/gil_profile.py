"""What holds the GIL in a loaded server: the share of wall time, by area of the code.

    python -m loadtests.gil_profile                       # the benchmark's 35-minute WAV and MP3
    python -m loadtests.gil_profile --minutes 3           # the same recordings, 3 minutes long
    python -m loadtests.gil_profile FILE... [--clients 2] [--rounds 2] [--server-flag=...]

Starts `arengine serve` (speech, engine threads = CPUs, intra-op 1), attaches `py-spy record
--gil --idle --format raw` (py-spy 0.4 must be on PATH or in the venv, and may need root), posts
each recording from `--clients` clients `--rounds` times, as `threads_vs_processes` does, and
sorts the samples of the thread holding the GIL by area (`AREAS`, the innermost frame that names
one): the share of the load's wall time in which the GIL was held, in all and per area. Without
paths it writes the threads-against-processes recordings (`--minutes` long, 35 by default) to
`--out-dir`, a 16 kHz mono WAV and a 44.1 kHz stereo MP3 (and an M4A with `--m4a`). The raw stacks
are kept beside them for flame graphs.

On a shared machine the shares still say where the GIL goes, but not how long anything takes: a
thread the kernel preempts while holding the GIL keeps collecting samples. Compare shares taken in
one run, and absolute seconds only on a quiet machine.
"""

from __future__ import annotations

import argparse
import inspect
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from arengine.engine.request import EngineRequest
from arengine.system.threads import available_cpus
from loadtests.recordings import write_recording
from loadtests.server import running_server
from loadtests.threads_vs_processes import load

AREAS = (
    ("multipart and spooling", ("/multipart/", "/python_multipart/", "http/uploads.py")),
    ("decoding", ("arengine/audio/", "/av/", "/soundfile", "/soxr/")),
    ("post-processing", ("arengine/postprocess/", "tagger.py", "arengine/outputs/", "merge.py")),
    ("inference glue", ("arengine/kinds/", "/torch/")),
    ("HTTP and event loop", ("/uvicorn/", "/httptools/", "/h11/", "/starlette/", "/fastapi/",
                             "/asyncio/", "/anyio/", "arengine/http/", "/pydantic")),
)  # fmt: skip
"""Areas, each by the paths of its frames; a sample counts in the area of its innermost frame
that names one (numpy's or the standard library's frames name none)."""

ENGINE_TASKS = {
    "_validate": "decoding",
    "_decode": "decoding",
    "_decoded": "decoding",
    "_infer": "inference glue",
    "_postprocess_in_order": "post-processing",
    "_complete": "post-processing",
}
"""The engine's task functions (methods of `EngineRequest`), for frames under them that name no
area (numpy's, the standard library's)."""

TASK_FILE = "/".join(Path(inspect.getfile(EngineRequest)).parts[-3:])
"""Where the task functions are, as a frame names it: `arengine/engine/request.py`."""

ENGINE = "engine (scheduling, queues)"
OTHER = "other"


def area_of(frames: list[str]) -> str:
    """The area of one sampled stack (py-spy's frames, outermost first: `name (file:line)`)."""
    for frame in reversed(frames):
        where = frame.replace("\\", "/")
        for area, marks in AREAS:
            if any(mark in where for mark in marks):
                return area
    for frame in reversed(frames):
        # py-spy names a method with its class: `EngineRequest._infer`.
        name, where = frame.split(" ", 1)[0].rsplit(".", 1)[-1], frame.replace("\\", "/")
        if name in ENGINE_TASKS and TASK_FILE in where:
            return ENGINE_TASKS[name]
    if any("arengine/engine/" in frame for frame in frames):
        return ENGINE
    return OTHER


def read_raw(path: Path) -> list[tuple[list[str], int]]:
    """py-spy's raw (collapsed) stacks: `frame;frame;... count` per line."""
    samples = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            samples.append((stack.split(";"), int(count)))
    return samples


def shares(samples: list[tuple[list[str], int]], possible: float) -> dict[str, float]:
    """Each area's GIL-holding samples over `possible` (the rate times the load's wall seconds),
    and `total`, all of them."""
    areas: Counter[str] = Counter()
    for frames, count in samples:
        areas[area_of(frames)] += count
    out = {area: count / possible for area, count in areas.most_common()}
    out["total"] = sum(areas.values()) / possible
    return out


def table(rows: dict[str, dict[str, float]]) -> str:
    """A Markdown table: a column per recording, a row per area (GIL held, share of wall time)."""
    names = list(rows)
    areas = [name for name, _ in AREAS] + [ENGINE, OTHER]
    lines = ["| GIL held, share of wall time | " + " | ".join(names) + " |"]
    lines.append("|---" * (len(names) + 1) + "|")
    lines.append("| **all** | " + " | ".join(f"**{rows[n]['total']:.0%}**" for n in names) + " |")
    for area in areas:
        cells = [f"{rows[name].get(area, 0.0):.1%}" for name in names]
        lines.append(f"| {area} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def top_frames(samples: list[tuple[list[str], int]], possible: float, top: int) -> str:
    """The innermost Python frames that held the GIL most, with their area, as Markdown rows."""
    frames: Counter[tuple[str, str]] = Counter()
    for stack, count in samples:
        frames[(stack[-1].split(" (", 1)[0], area_of(stack))] += count
    rows = [f"| `{name}` | {area} | {count / possible:.1%} |" for (name, area), count in
            frames.most_common(top)]  # fmt: skip
    return "\n".join(["| innermost frame | area | share of wall time |", "|---|---|---|", *rows])


def recordings(folder: Path, minutes: float, m4a: bool) -> list[Path]:
    """The threads-against-processes recordings, `minutes` long, written once."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{minutes:g}min"
    wav, master = folder / f"{stem}.wav", folder / f"{stem}-44k.wav"
    if not wav.exists():
        write_recording(wav, minutes, 16000, 1, 0)
    if not master.exists():
        write_recording(master, minutes, 44100, 2, 0)
    out = [wav]
    for suffix, codec in (
        ("mp3", ["libmp3lame", "-b:a", "128k"]),
        ("m4a", ["aac", "-b:a", "128k"]),
    ):
        target = folder / f"{stem}-44k.{suffix}"
        if suffix == "m4a" and not m4a:
            continue
        if not target.exists():
            subprocess.run(
                ["ffmpeg", "-v", "error", "-y", "-i", str(master), "-c:a", *codec, str(target)],
                check=True,
            )
        out.append(target)
    return out


def profile(
    path: Path,
    spy: str,
    clients: int,
    rounds: int,
    rate: int,
    flags: list[str],
    native: bool,
    port: int = 8870,
    top: int = 0,
) -> tuple[float, dict[str, float]]:
    """One server under `clients` x `rounds` posts of `path`: the load's wall seconds, the
    shares."""
    raw = path.with_name(path.name + ".gil.txt")
    threads = str(available_cpus())
    args = ["--models", "speech", "--engine-threads", threads, *flags]
    with running_server(port, *args) as (server, _):
        recorder = subprocess.Popen(
            [spy, "record", "--gil", "--idle", "--full-filenames", "--format", "raw",
             "--rate", str(rate), *(["--native"] if native else []),
             "-o", str(raw), "-p", str(server.pid)],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wall = load([port], clients, path.read_bytes(), rounds)
        finally:
            recorder.send_signal(2)  # py-spy writes its output on SIGINT
            recorder.wait(60)
    samples = read_raw(raw)
    if top:
        print(top_frames(samples, rate * wall, top), flush=True)
    return wall, shares(samples, rate * wall)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("paths", type=Path, nargs="*")
    parser.add_argument("--minutes", type=float, default=35, help="length of the recordings made")
    parser.add_argument("--m4a", action="store_true", help="an M4A too, when none is given")
    parser.add_argument("--out-dir", type=Path, default=Path("loadtests/out"))
    parser.add_argument("--clients", type=int, default=available_cpus())
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--native", action="store_true", help="py-spy --native (costlier)")
    parser.add_argument("--port", type=int, default=8870)
    parser.add_argument("--top", type=int, default=0, help="list the N innermost frames too")
    parser.add_argument(
        "--server-flag", action="append", default=[], help="passed to `arengine serve`"
    )
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    paths = args.paths or recordings(args.out_dir, args.minutes, args.m4a)
    rows = {}
    for path in paths:
        wall, row = profile(
            path,
            spy,
            args.clients,
            args.rounds,
            args.rate,
            args.server_flag,
            args.native,
            args.port,
            args.top,
        )
        print(
            f"{path.name}: {args.clients} clients x {args.rounds} posts in {wall:.1f} s", flush=True
        )
        rows[path.name] = row
    print()
    print(table(rows))


if __name__ == "__main__":
    main()
