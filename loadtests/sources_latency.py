"""How soon an alarm clock on a network stream turns its MQTT state ON: the whole path a Home
Assistant user wires, `arengine listen --sources` to a server to a broker.

    python -m loadtests.sources_latency [--runs 20]

One server (`--models events --mqtt-url ...`), one Mosquitto broker (Debian's), one `arengine
listen --sources` process with one source: a live stream, FFmpeg encoding what this script
writes to it (16-kHz PCM at real speed: silence, and the alarm clock now and then) as Ogg/Opus
served over HTTP, as a camera's audio or an Icecast mount would be. A run plays
freedesktop's alarm clock into the stream; its latency is the ON message's arrival at a
subscriber less the moment the alarm's first sample was written to FFmpeg: the sound's start in
the stream's own time, so Opus encoding, the network, the client's decoding, the server and the
broker are all inside it. The next run waits for the OFF and `GAP_S` of silence.

Prints each run and the median; the issue's target is 2 s. Run on a machine nobody else uses for
figures to compare.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from loadtests.server import running_server
from tests.conftest import free_port
from tests.mosquitto import Heard, Subscriber, running_broker
from tests.recordings import DEBIAN_SOUNDS, mono_16k
from tests.stream_server import FFMPEG

RATE = 16000
AVAILABILITY = "arengine/nursery/availability"


GAP_S = 3.0
"""Silence after an OFF before the next alarm (and before the first: the stream settles)."""

CHUNK = RATE // 50
"""20 ms of samples per write."""


class LiveStream:
    """FFmpeg serving, as Ogg/Opus over HTTP, the PCM written to it; `play` queues a sound,
    silence is written otherwise, at real speed, from a thread."""

    def __init__(self) -> None:
        self.url = f"http://127.0.0.1:{free_port()}/live.ogg"
        self.process = subprocess.Popen(
            [
                FFMPEG, "-hide_banner", "-loglevel", "error", "-f", "s16le", "-ar", str(RATE),
                "-ac", "1", "-i", "pipe:0", "-c:a", "libopus", "-b:a", "64k",
                "-page_duration", "20000", "-f", "ogg", "-listen", "1", self.url,
            ],
            stdin=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # its complaint when the listener goes at the end
        )  # fmt: skip
        self._queued: list[np.ndarray] = []
        self.played_at: list[float] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._feed, daemon=True).start()

    def play(self, sound: np.ndarray) -> None:
        with self._lock:
            self._queued.append(sound)

    def _feed(self) -> None:
        assert self.process.stdin is not None
        silence = np.zeros(CHUNK, np.float32)
        begun, written = time.monotonic(), 0
        sound, at = None, 0
        while self.process.poll() is None:
            with self._lock:
                if sound is None and self._queued:
                    sound, at = self._queued.pop(0), 0
            chunk = silence if sound is None else sound[at : at + CHUNK]
            if sound is not None and at == 0:
                self.played_at.append(time.monotonic())
            if sound is not None:
                at += CHUNK
                if at >= len(sound):
                    sound = None
            try:
                self.process.stdin.write((np.clip(chunk, -1, 1) * 32767).astype("<i2").tobytes())
                self.process.stdin.flush()
            except (BrokenPipeError, ValueError):
                return
            written += len(chunk)
            time.sleep(max(0.0, begun + written / RATE - time.monotonic()))

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(10)


def run(runs: int) -> list[float]:
    chime = mono_16k(DEBIAN_SOUNDS / "freedesktop/stereo/alarm-clock-elapsed.oga")
    latencies = []
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        with running_broker(work) as broker:
            flags = ("--models", "events", "--mqtt-url", broker.url, "--mqtt-hold-s", "0.5")
            with running_server(free_port(), *flags) as (_, url):
                stream = LiveStream()
                sources = work / "sources.toml"
                sources.write_text(f'[sources.nursery]\nurl = "{stream.url}"\nmodels = "events"\n')
                command = [
                    sys.executable, "-m", "arengine", "listen", "--server", url,
                    "--sources", str(sources), "--status-s", "0",
                ]  # fmt: skip
                listener = subprocess.Popen(command, stdout=subprocess.DEVNULL)
                heard = Subscriber(broker)
                try:
                    assert heard.wait(
                        lambda s: s.payloads("arengine/nursery/availability")[-1:] == ["online"],
                        120,
                    ), "the stream never reached the server"
                    for number in range(runs):
                        latencies.append(_once(stream, heard, chime, number))
                        print(f"run {number + 1}: ON {latencies[-1]:.2f} s after the alarm's start")
                finally:
                    heard.close()
                    listener.terminate()
                    listener.wait(30)
                    stream.stop()
    return latencies


def _ons(heard: Subscriber) -> list[Heard]:
    pattern = re.compile(r"arengine/nursery/events/[^/]+/state")
    return [m for m in heard.messages if pattern.fullmatch(m.topic) and m.payload == "ON"]


def _once(stream: LiveStream, heard: Subscriber, chime: np.ndarray, number: int) -> float:
    """One alarm clock: its ON's latency; returns once every state is OFF again."""
    time.sleep(GAP_S)
    seen = len(_ons(heard))
    stream.play(chime)
    assert heard.wait(lambda s: len(_ons(s)) > seen, 60), "no ON"
    on = _ons(heard)[seen]
    # Every label's state, not only the first one's: a label turned ON late by this alarm (a
    # bell after the alarm clock) once counted as the next run's ON, before its alarm.
    assert heard.wait(lambda s: _all_off(s), 60), "no OFF"
    return on.at - stream.played_at[number]


def _all_off(heard: Subscriber) -> bool:
    """Every state topic that has been ON is OFF again."""
    return all(heard.payloads(topic)[-1] == "OFF" for topic in {m.topic for m in _ons(heard)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="alarm clocks (default: 20)")
    args = parser.parse_args()
    latencies = run(args.runs)
    print(f"median ON latency over {len(latencies)} runs: {statistics.median(latencies):.2f} s")


if __name__ == "__main__":
    main()
