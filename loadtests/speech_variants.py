"""Cheaper speech-model calls, measured and gated: bf16 autocast, dynamic int8 LSTM, torch.compile.

    python -m loadtests.speech_variants loadtests/out/35min.wav [--segments 20]

For each variant the CPU supports (read from its flags, never assumed): thread CPU ms per 30 s
segment (one thread, best of `--reps`, batch 1 and 4), the largest per-window probability
difference from the served fp32 model over the first `--segments` segments of the recording, and
the frame F1 of the speech tags those probabilities give. The accuracy gate (BENCHMARKS.md):
every fp32 path within 1e-4 and tags at F1 >= 0.995; a reduced-precision variant is only worth
serving if it passes the tag gate and is faster.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from arengine.audio.decode import decode
from arengine.audio.segments import Segmenter
from arengine.kinds.speech.network import SpeechModel
from arengine.kinds.speech.recognizer import SpeechRecognizer
from arengine.kinds.speech.tagger import SpeechParams, SpeechTagger
from loadtests.agreement import Intervals, frame_f1
from loadtests.roofline import this_cpu

Forward = Callable[[torch.Tensor], torch.Tensor]


def variants(model: SpeechModel, flags: frozenset[str]) -> dict[str, Forward]:
    out: dict[str, Forward] = {"fp32 (served)": model}
    if "avx512_bf16" in flags or "amx_bf16" in flags:

        def bf16(x: torch.Tensor) -> torch.Tensor:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out: torch.Tensor = model(x).float()
            return out

        out["bf16 autocast"] = bf16
    if "avx512_vnni" in flags or "avx_vnni" in flags:
        # quantize_dynamic swaps matching children of the module it is given, not the root.
        quantised = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]
            SpeechModel.from_silero_package(), {torch.nn.LSTM}, dtype=torch.qint8
        )
        out["dynamic int8 LSTM"] = quantised
    return out


def best_ms(forward: Forward, x: torch.Tensor, reps: int) -> float:
    forward(x)
    best = float("inf")
    for _ in range(reps):
        started = time.thread_time()
        forward(x)
        best = min(best, time.thread_time() - started)
    return best * 1e3


def tags_of(scores: list[np.ndarray], audio_samples: int) -> Intervals:
    tagger = SpeechTagger(SpeechParams(), sample_rate=16000, hop=512)
    tags = [tag for part in scores for tag in tagger.push(part)]
    tags += tagger.finish(audio_samples)
    return [(t.start, t.end) for t in tags]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path)
    parser.add_argument("--segments", type=int, default=20)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--compile", action="store_true", help="also torch.compile (inductor)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cpu = this_cpu()
    model = SpeechModel.from_silero_package()
    forwards = variants(model, cpu.flags)
    if args.compile:
        started = time.perf_counter()
        compiled = torch.compile(model)
        try:
            with torch.inference_mode():
                compiled(torch.zeros(1, 64 + 1000 * 512))
        except Exception as error:  # report why it cannot be served, measure the others
            print(f"torch.compile failed: {type(error).__name__}: {str(error)[:300]}")
        else:
            print(f"torch.compile warm-up: {time.perf_counter() - started:.1f} s")
            forwards["torch.compile (inductor)"] = compiled
    info = sf.info(str(args.path))
    plan = SpeechRecognizer(model, 30, 2).plan
    segments = []
    for segment in Segmenter(decode(args.path, info.samplerate, 16000, info.frames), plan):
        segments.append(segment)
        if len(segments) == args.segments:
            break
    samples = sum(s.frames for s in segments) * 512
    x1 = torch.from_numpy(segments[1].samples)[None]
    x4 = torch.from_numpy(np.stack([s.samples for s in segments[1:5]]))
    print(f"{cpu.line()}\n{len(segments)} segments of {args.path.name}, one thread\n")
    print("| variant | ms per segment, batch 1 | ms per segment, batch 4 | largest probability "
          "difference from fp32 | tag frame F1 vs fp32 |")  # fmt: skip
    print("|---|---|---|---|---|")
    reference: list[np.ndarray] = []
    with torch.inference_mode():
        for name, forward in forwards.items():
            scores = [
                forward(torch.from_numpy(s.samples)[None])[0, s.skip_frames :].numpy()
                for s in segments
            ]
            reference = reference or scores
            worst = max(float(np.abs(a - b).max()) for a, b in zip(scores, reference, strict=True))
            f1 = frame_f1(tags_of(scores, samples), tags_of(reference, samples), samples / 16000)
            one, four = best_ms(forward, x1, args.reps), best_ms(forward, x4, args.reps) / 4
            print(f"| {name} | {one:.2f} | {four:.2f} | {worst:.1e} | {f1:.4f} |", flush=True)


if __name__ == "__main__":
    main()
