"""The speech model against its conv reference: per-op profile, FLOPs, equivalence on a recording.

    python -m loadtests.speech_model profile [--windows 1000] [--batch 1 4]
    python -m loadtests.speech_model equivalence loadtests/out/35min.wav

`profile` times every step of one forward on one thread (thread CPU time, best of `--reps`, so
other jobs on a shared machine inflate it less than wall time), for the served FFT model and for
the reference that arengine served before (STFT as a 258x256 conv), and counts FLOPs.
`equivalence` runs both over every segment of a recording as the engine cuts it (30 s, 2 s
pre-roll): the largest per-window probability difference, and the frame F1 of the speech tags the
engine returns with each model, as served (the FFT model 4 segments per call, the reference one).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from torch import Tensor, nn

from arengine.audio.decode import decode
from arengine.audio.segments import Segmenter
from arengine.audio.validation import AudioLimits
from arengine.engine.pool import EnginePool
from arengine.engine.request import RequestSpec
from arengine.kinds.speech.network import (
    CONTEXT,
    WINDOW,
    SpeechModel,
    read_silero_weights,
    silero_package_archive,
)
from arengine.kinds.speech.recognizer import SpeechRecognizer
from arengine.models.tagging import ModelTagging
from arengine.system.threads import available_cpus
from loadtests.agreement import frame_f1
from loadtests.roofline import counted_flops, this_cpu
from tests.kinds.speech.reference import ConvSpeechModel

LSTM_FLOPS_PER_WINDOW = 2 * 2 * 128 * 4 * 128
"""Input and recurrent products of one LSTM step (128 in, 128 hidden, 4 gates); the flop counter
does not see torch's fused mkldnn LSTM kernel, so it is added by hand."""
FFT_FLOPS_PER_WINDOW = 4 * int(2.5 * 256 * 8)
"""Four 256-point real FFTs at ~2.5 N log2 N each (the flop counter does not count FFTs)."""


def best_ms(run: Callable[[], object], reps: int) -> float:
    """Best thread-CPU time of `reps` calls, in ms."""
    run()
    best = float("inf")
    for _ in range(reps):
        started = time.thread_time()
        run()
        best = min(best, time.thread_time() - started)
    return best * 1e3


def flops_per_window(model: nn.Module, windows: int = 256) -> float:
    """Counted FLOPs of one forward per 512-sample window, LSTM and FFT included."""
    counted = counted_flops(model, torch.zeros(1, CONTEXT + windows * WINDOW))
    extra = LSTM_FLOPS_PER_WINDOW + (FFT_FLOPS_PER_WINDOW if isinstance(model, SpeechModel) else 0)
    return counted / windows + extra


def fast_steps(model: SpeechModel, x: Tensor) -> dict[str, Callable[[], object]]:
    batch, n = x.shape[0], (x.shape[1] - CONTEXT) // WINDOW
    spectrum = model.spectrum(x, n)
    encoded = model.encode(spectrum).view(batch, n, 128)
    return {
        "STFT (frames, Hann, rfft, magnitude)": lambda: model.spectrum(x, n),
        "conv1-4 as matrix products": lambda: model.encode(spectrum),
        "LSTM": lambda: model.lstm(encoded),
    }


def reference_steps(model: ConvSpeechModel, x: Tensor) -> dict[str, Callable[[], object]]:
    batch, n = x.shape[0], (x.shape[1] - CONTEXT) // WINDOW
    frames = x.unfold(1, CONTEXT + WINDOW, WINDOW).reshape(batch * n, 1, CONTEXT + WINDOW)
    padded = nn.functional.pad(frames, (0, CONTEXT), mode="reflect")
    spec = model.stft_conv(padded)
    magnitude = torch.sqrt(spec[:, :129] ** 2 + spec[:, 129:] ** 2)
    h1 = torch.relu(model.conv1(magnitude))
    h2 = torch.relu(model.conv2(h1))
    h3 = torch.relu(model.conv3(h2))
    h4 = torch.relu(model.conv4(h3)).reshape(batch, n, 128)

    def framing() -> object:
        part = x.unfold(1, CONTEXT + WINDOW, WINDOW).reshape(batch * n, 1, CONTEXT + WINDOW)
        return nn.functional.pad(part, (0, CONTEXT), mode="reflect")

    return {
        "unfold and reflect pad": framing,
        "STFT as a 258x256 conv": lambda: model.stft_conv(padded),
        "magnitude": lambda: torch.sqrt(spec[:, :129] ** 2 + spec[:, 129:] ** 2),
        "conv1": lambda: torch.relu(model.conv1(magnitude)),
        "conv2": lambda: torch.relu(model.conv2(h1)),
        "conv3": lambda: torch.relu(model.conv3(h2)),
        "conv4": lambda: torch.relu(model.conv4(h3)),
        "LSTM": lambda: model.lstm(h4),
    }


def profile(windows: int, batches: list[int], reps: int) -> None:
    torch.set_num_threads(1)
    weights = read_silero_weights(silero_package_archive())
    fast, reference = SpeechModel(weights), ConvSpeechModel(weights)
    rng = np.random.default_rng(0)
    audio_s = windows * WINDOW / 16000
    print(f"{this_cpu().name}, {available_cpus()} CPUs, one thread, torch {torch.__version__}")
    print(f"one segment of {windows} windows ({audio_s:.1f} s); thread CPU ms, best of {reps}\n")
    print("| model | step | ms | share |")
    print("|---|---|---|---|")
    x = torch.from_numpy((0.1 * rng.standard_normal((1, CONTEXT + windows * WINDOW))).astype("f4"))
    with torch.inference_mode():
        for name, model, steps in [
            ("reference (conv STFT)", reference, reference_steps(reference, x)),
            ("served (FFT, matmuls)", fast, fast_steps(fast, x)),
        ]:
            total = best_ms(lambda model=model: model(x), reps)  # type: ignore[misc]
            for step, run in steps.items():
                ms = best_ms(run, reps)
                print(f"| {name} | {step} | {ms:.2f} | {ms / total:.0%} |")
            print(
                f"| {name} | **whole forward** | **{total:.2f}** | {audio_s / total * 1e3:.0f}x"
                " real time per core |"
            )
        print("\n| model | batch (segments per call) | ms per segment | x real time per core |")
        print("|---|---|---|---|")
        for size in batches:
            xs = torch.from_numpy(
                (0.1 * rng.standard_normal((size, CONTEXT + windows * WINDOW))).astype("f4")
            )
            for name, model in [("reference", reference), ("served", fast)]:
                ms = best_ms(lambda model=model, xs=xs: model(xs), reps) / size  # type: ignore[misc]
                print(f"| {name} | {size} | {ms:.2f} | {audio_s / ms * 1e3:.0f}x |")
    print("\n| model | FLOPs per window | MFLOP per audio second |")
    print("|---|---|---|")
    for name, model in [("reference", reference), ("served", fast)]:
        per_window = flops_per_window(model)
        print(f"| {name} | {per_window / 1e3:.0f} k | {per_window * 16000 / WINDOW / 1e6:.1f} |")


def equivalence(path: Path) -> None:
    torch.set_num_threads(1)
    weights = read_silero_weights(silero_package_archive())
    fast, reference = SpeechModel(weights), ConvSpeechModel(weights)
    info = sf.info(str(path))
    recognizer = SpeechRecognizer(fast, segment_s=30, preroll_s=2, max_batch=4)
    worst, worst_batched, windows, above = 0.0, 0.0, 0, 0
    segments = list(Segmenter(decode(path, info.samplerate, 16000, info.frames), recognizer.plan))
    with torch.inference_mode():
        for first in range(0, len(segments), 4):
            group = segments[first : first + 4]
            features = [recognizer.features(segment) for segment in group]
            batched = recognizer.infer_batch(features, group)
            for x, segment, scores in zip(features, group, batched, strict=True):
                ours, theirs = fast(x)[0], reference(x)[0]
                worst = max(worst, (ours - theirs).abs().max().item())
                skipped = theirs[segment.skip_frames :].numpy()
                worst_batched = max(worst_batched, float(abs(scores - skipped).max()))
                windows += ours.shape[0]
                above += int((theirs > 0.5).sum())
    limits = AudioLimits(
        max_duration_s=86400, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
    )
    pool = EnginePool(available_cpus())
    try:
        tags = [
            pool.submit(
                RequestSpec("eq", path, (recognizer,), ModelTagging((recognizer,), {}), limits, 4)
            )
            .future.result()
            .tags
            for recognizer in (
                SpeechRecognizer(fast, 30, 2, max_batch=4),  # as served: 4 segments per call
                SpeechRecognizer(reference, 30, 2),  # silero-vad's own forward
            )
        ]
    finally:
        pool.close()
    ours_tags, theirs_tags = ([(t.start, t.end) for t in found] for found in tags)
    seconds = info.frames / info.samplerate
    print(f"{path.name}: {seconds / 60:.1f} min, {windows} windows ({above} above 0.5)")
    print(f"largest per-window probability difference, served vs reference: {worst:.2e}")
    print(f"the same, served 4 segments per call: {worst_batched:.2e}")
    print(
        f"speech tags: {len(ours_tags)} served, {len(theirs_tags)} reference, frame F1 "
        f"{frame_f1(ours_tags, theirs_tags, seconds):.5f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    timing = commands.add_parser("profile", help="per-op times, batches and FLOPs, one thread")
    timing.add_argument("--windows", type=int, default=1000, help="1000 = 30 s + 2 s pre-roll")
    timing.add_argument("--batch", type=int, nargs="+", default=[1, 2, 4, 8])
    timing.add_argument("--reps", type=int, default=20)
    same = commands.add_parser("equivalence", help="served vs reference on a recording")
    same.add_argument("path", type=Path)
    args = parser.parse_args()
    if args.command == "profile":
        profile(args.windows, args.batch, args.reps)
    else:
        equivalence(args.path)


if __name__ == "__main__":
    main()
