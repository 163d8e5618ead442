"""Live streams (`WS /v1/listen`): how late tags come, how many streams a server holds, memory.

    python -m loadtests.listen [--seconds 30] [--no-delays] [--streams 1,4,8,16]
        [--streams-model speech] [--long-minutes 120]

One server (`--models speech,events`) on 127.0.0.1, streams fed at real speed in 0.1-s messages,
each sent when its last sample would have been recorded (as a sound card delivers them):

1. delay per model (unless `--no-delays`): one stream, `--seconds` of speech (espeak-ng phrases
   between silence, tones and noise) for `speech`, and of quiet noise with a phone, an alarm
   clock, a bell and a voice every 20 s for `events` (`loadtests/events.py`), also without its
   500-ms merge gap, and both again as WebM/Opus encoded by ffmpeg as they are recorded
   (`{"format": "webm"}`, decoded to 48 kHz by the server). A tag's delay is its arrival at the
   client less the moment its end (the tag's own `end`) was sent;
2. streams held: `N` streams at once for each `--streams` (the speech recording to speech, or
   with `--streams-model events` the events recording to events), their delays' median and 90th
   percentile, the server's RSS growth per stream, the p99 of 5-s uploads posted meanwhile
   against the same uploads alone, and the cores the server and this client kept busy (CPU
   seconds over wall seconds: near the machine's cores, the streams are past what it holds).

3. a long stream (`--long-minutes` of speech, 16 kHz) fed as fast as the server reads it, to a
   server whose files and streams are cut alike (`--segment-s` = `--listen-segment-s` = 1.024):
   the server's RSS over the stream, and whether its tags equal those of the file posted.

Run on a machine nobody else uses for figures to compare; BENCHMARKS.md says what it was.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import soundfile as sf
from websockets.asyncio.client import ClientConnection, connect

from loadtests.events import recording as events_recording
from loadtests.recordings import write_recording
from loadtests.server import memory_mib, running_server
from loadtests.thread_sweep import cpu_seconds

RATE = 16000
CHUNK_S = 0.1


async def stream(url: str, model: str, audio: np.ndarray, webm: bool = False) -> list[float]:
    """Send `audio` (16 kHz mono) at real speed; each tag's delay from its end being sent.
    `model`: the query's model and overrides (`events&merge_gap_ms=0`). `webm`: encoded as it
    is recorded by ffmpeg into WebM/Opus (`WEBM_ENCODER`), whose bytes are sent as they come,
    as a browser's MediaRecorder sends its chunks."""
    delays: list[float] = []
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2")
    opening = (
        {"format": "webm"} if webm else {"format": "s16le", "sample_rate": RATE, "channels": 1}
    )
    async with connect(f"{url}/v1/listen?model={model}", max_size=None, ping_interval=None) as ws:
        await ws.send(json.dumps(opening))
        started = time.monotonic()
        send = _send_webm if webm else _send_pcm
        sender = asyncio.ensure_future(send(ws, pcm, started))
        async for message in ws:
            line = json.loads(message)
            if "label" in line:
                delays.append(time.monotonic() - (started + line["end"]))
            if "error" in line:
                raise RuntimeError(line["error"])
        await sender
    return delays


async def _recorded(pcm: np.ndarray, started: float) -> AsyncIterator[bytes]:
    """`pcm` in 0.1-s pieces, each once its last sample would have been recorded."""
    chunk = int(RATE * CHUNK_S)
    for k in range(0, len(pcm), chunk):
        piece = pcm[k : k + chunk]
        await asyncio.sleep(max(0.0, started + (k + len(piece)) / RATE - time.monotonic()))
        yield piece.tobytes()


async def _send_pcm(ws: ClientConnection, pcm: np.ndarray, started: float) -> None:
    async for piece in _recorded(pcm, started):
        await ws.send(piece)
    await ws.send(json.dumps({"end": True}))


WEBM_ENCODER = (
    "ffmpeg", "-v", "error", "-f", "s16le", "-ar", str(RATE), "-ac", "1", "-i", "pipe:0",
    "-c:a", "libopus", "-b:a", "32k", "-f", "webm", "-cluster_time_limit", "100", "pipe:1",
)  # fmt: skip
"""Opus at 32 kbit/s in WebM clusters of 0.1 s: a MediaRecorder with a 100-ms timeslice."""


async def _send_webm(ws: ClientConnection, pcm: np.ndarray, started: float) -> None:
    encoder = await asyncio.create_subprocess_exec(
        *WEBM_ENCODER, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert encoder.stdin is not None and encoder.stdout is not None

    async def record() -> None:
        assert encoder.stdin is not None
        async for piece in _recorded(pcm, started):
            encoder.stdin.write(piece)
            await encoder.stdin.drain()
        encoder.stdin.close()

    recorder = asyncio.ensure_future(record())
    while data := await encoder.stdout.read(1 << 16):
        await ws.send(data)
    await recorder
    await encoder.wait()
    await ws.send(json.dumps({"end": True}))


async def uploads(url: str, clip: Path, until: float) -> list[float]:
    """Post `clip` again and again until `until` (monotonic); each request's wall time."""
    times = []
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        while time.monotonic() < until:
            begun = time.monotonic()
            reply = await client.post("/v1/recognize", files={"file": clip.read_bytes()})
            reply.raise_for_status()
            times.append(time.monotonic() - begun)
            await asyncio.sleep(0.2)
    return times


async def rss(pid: int, until: float) -> list[float]:
    """The server's RSS (MiB) every half second until `until`."""
    samples = []
    while time.monotonic() < until:
        samples.append(memory_mib(pid))
        await asyncio.sleep(0.5)
    return samples


async def held(
    url: str, model: str, audio: np.ndarray, n: int, clip: Path, pid: int
) -> tuple[list[float], list[float], float]:
    """`n` streams of `audio` to `model` at once, each rolled by a second more than the last,
    and uploads of `clip` meanwhile: delays, upload times, and the server's median RSS while
    they ran."""
    until = time.monotonic() + len(audio) / RATE
    streams = [stream(url, model, np.roll(audio, i * RATE)) for i in range(n)]
    *results, times, memory = await asyncio.gather(
        *streams, uploads(url, clip, until), rss(pid, until)
    )
    delays = [d for result in results for d in result]
    return delays, times, float(np.median(memory))


async def fast(url: str, path: Path, pid: int) -> tuple[list[dict[str, object]], list[float]]:
    """Stream the WAV at `path` as fast as the server reads it: its tags, and the server's
    RSS (MiB) every second meanwhile."""
    tags: list[dict[str, object]] = []
    memory: list[float] = []
    async with connect(f"{url}/v1/listen?model=speech", max_size=None, ping_interval=None) as ws:
        await ws.send(json.dumps({"format": "s16le", "sample_rate": RATE, "channels": 1}))

        async def send() -> None:
            with sf.SoundFile(str(path)) as audio:
                while len(block := audio.read(RATE, dtype="int16")):
                    await ws.send(block.tobytes())
            await ws.send(json.dumps({"end": True}))

        async def sample() -> None:
            while True:
                memory.append(memory_mib(pid))
                await asyncio.sleep(1.0)

        sender, sampler = asyncio.ensure_future(send()), asyncio.ensure_future(sample())
        async for message in ws:
            line = json.loads(message)
            if "label" in line:
                tags.append(line)
        sampler.cancel()
        await sender
    return tags, memory


def long_stream(port: int, minutes: float, folder: Path) -> None:
    path = folder / "long.wav"
    write_recording(path, minutes, RATE, 1, seed=1)
    flags = ("--models", "speech", "--segment-s", "1.024", "--listen-segment-s", "1.024")
    with running_server(port, *flags, "--upload-dir", str(folder)) as (process, url):
        began = time.monotonic()
        tags, memory = asyncio.run(fast(url.replace("http://", "ws://"), path, process.pid))
        took = time.monotonic() - began
        with path.open("rb") as body:
            posted = httpx.post(url + "/v1/recognize", files={"file": body}, timeout=600)
        same = posted.json()["tags"] == tags
    tenth = max(1, len(memory) // 10)
    print(
        f"\n{minutes:g} minutes streamed in {took:.1f} s ({minutes * 60 / took:.0f}x real time): "
        f"RSS {np.median(memory[:tenth]):.0f} MiB over its first tenth, "
        f"{np.median(memory[-tenth:]):.0f} MiB over its last, peak {max(memory):.0f} MiB; "
        f"{len(tags)} tags, {'equal to' if same else 'NOT equal to'} the file's"
    )


def summary(delays: list[float]) -> str:
    if not delays:
        return "no tags"
    quantiles = np.percentile(delays, [50, 90])
    return f"median {quantiles[0]:.2f} s, p90 {quantiles[1]:.2f} s ({len(delays)} tags)"


def p99(times: list[float]) -> float:
    return float(np.percentile(times, 99)) if times else float("nan")


def one_stream_per_model(ws_url: str, speech: np.ndarray, events: np.ndarray) -> None:
    """Part 1 of the module docstring."""
    print("\n| model | delay from a sound's end to its tag at the client |\n|---|---|")
    runs = [
        ("speech", speech),
        ("events", events),
        ("events&merge_gap_ms=0", events),  # no window of grace before a run ends
    ]
    for model, audio in runs:
        print(f"| {model} | {summary(asyncio.run(stream(ws_url, model, audio)))} |")
    for model, audio in runs[:2]:
        delays = asyncio.run(stream(ws_url, model, audio, webm=True))
        print(f"| {model}, WebM/Opus | {summary(delays)} |")


def delays_and_streams(
    port: int, seconds: float, counts: str, streams_model: str, delays: bool, folder: Path
) -> None:
    """Parts 1 (if `delays`) and 2 of the module docstring."""
    speech_path = folder / "speech.wav"
    write_recording(speech_path, seconds / 60, RATE, 1)
    speech, _ = sf.read(str(speech_path), dtype="float32")
    events, _ = events_recording(max(seconds, 40) / 60)
    clip = folder / "clip.wav"
    sf.write(str(clip), speech[: 5 * RATE], RATE)
    most = max(16, *(int(count) for count in counts.split(",")))  # the default limit is 16
    flags = ("--models", "speech,events", "--upload-dir", str(folder))
    with running_server(port, *flags, "--max-listen-streams", str(most)) as (process, url):
        ws_url = url.replace("http://", "ws://")
        if delays:
            one_stream_per_model(ws_url, speech, events)
        alone_until = time.monotonic() + 10
        alone = asyncio.run(uploads(url, clip, alone_until))
        print(f"\n5-s uploads alone: p99 {p99(alone):.3f} s over {len(alone)} requests\n")
        print(
            f"| {streams_model} streams | delay | RSS per stream | 5-s uploads' p99 meanwhile "
            "| cores busy: server, client |\n|---|---|---|---|---|"
        )
        audio = events if streams_model == "events" else speech
        for n in (int(count) for count in counts.split(",")):
            before = memory_mib(process.pid)
            cpu = cpu_seconds(process.pid), time.process_time(), time.monotonic()
            held_delays, times, during = asyncio.run(
                held(ws_url, streams_model, audio, n, clip, process.pid)
            )
            wall = time.monotonic() - cpu[2]
            server = (cpu_seconds(process.pid) - cpu[0]) / wall
            client = (time.process_time() - cpu[1]) / wall
            grown = (during - before) / n
            print(
                f"| {n} | {summary(held_delays)} | {grown:.1f} MiB | {p99(times):.3f} s "
                f"({p99(times) / p99(alone):.1f}x alone) | {server:.2f}, {client:.2f} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--streams", default="1,4,8,16")
    parser.add_argument("--streams-model", choices=("speech", "events"), default="speech")
    parser.add_argument(
        "--delays", action=argparse.BooleanOptionalAction, default=True,
        help="part 1 (one stream per model); --no-delays goes straight to the streams held",
    )  # fmt: skip
    parser.add_argument("--long-minutes", type=float, default=120.0)
    parser.add_argument("--port", type=int, default=8790)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="listen-bench-"))
    if args.seconds:
        delays_and_streams(
            args.port, args.seconds, args.streams, args.streams_model, args.delays, folder
        )
    if args.long_minutes:
        long_stream(args.port + 1, args.long_minutes, folder)


if __name__ == "__main__":
    main()
