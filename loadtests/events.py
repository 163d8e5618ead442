"""The events model (YAMNet in torch) against the TFLite runtime: agreement, speed, timing.

    python -m loadtests.events [yamnet.tflite] [--minutes 30] [--processes 2] [--rounds 2]

`yamnet.tflite` is the source model, which the repository does not hold (models/events/README.md
says where it comes from); without the argument it is `$YAMNET_TFLITE`, else
`loadtests/out/yamnet.tflite`, and where there is no such file the run says it is skipped and
exits 0 (`make bench` runs it either way). The TFLite runtime is `ai-edge-litert` (the test
extra). Three figures, side by side in one run:

1. agreement on every window of Debian's freedesktop and alsa-utils sounds: the port against the
   runtime (XNNPACK, what `reference.npz` holds), and the runtime's builtin kernels against its
   XNNPACK ones for scale;
2. throughput on a `--minutes` recording, as one single-thread process per core for each: torch
   through the recognizer's own windows and chunks, TFLite one window per `invoke()`; audio
   seconds per CPU second, the two alternating `--rounds` times;
3. timing: that recording is quiet noise with a phone ring, an alarm clock, a bell and a voice
   inserted every 20 s; each must start a tag of its own labels (`EXPECTED`) within 0.5 s at the
   manifest's defaults, and no tag may start where only noise is (`--timing-only`: this alone,
   without the TFLite file).
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from arengine.audio.decode import BLOCK_FRAMES
from arengine.audio.segments import Segmenter
from arengine.kinds.catalog import KINDS
from arengine.kinds.events.network import WINDOW, Yamnet
from arengine.models import DEFAULT_MODELS_DIR
from arengine.models.registry import load_models
from arengine.postprocess.vocabulary import Ontology
from tests.recordings import DEBIAN_SOUNDS, debian_sounds, event_windows, mono_16k

RATE = 16000
HOP = 7680
INSERTED = {
    "phone": "freedesktop/stereo/phone-incoming-call.oga",
    "alarm clock": "freedesktop/stereo/alarm-clock-elapsed.oga",
    "bell": "freedesktop/stereo/bell.oga",
    "voice": "alsa/Front_Center.wav",
}
EVERY_S = 20


def _interpreter(tflite: Path, xnnpack: bool = True) -> Callable[[np.ndarray], np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    resolver = OpResolverType.AUTO if xnnpack else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    interpreter = Interpreter(
        model_path=str(tflite), num_threads=1, experimental_op_resolver_type=resolver
    )
    interpreter.allocate_tensors()
    (source,), (output,) = interpreter.get_input_details(), interpreter.get_output_details()

    def run(window: np.ndarray) -> np.ndarray:
        interpreter.set_tensor(source["index"], np.ascontiguousarray(window, dtype=np.float32))
        interpreter.invoke()
        return np.array(interpreter.get_tensor(output["index"])[0])

    return run


def agreement(tflite: Path) -> None:
    from tests.kinds.events.test_recognizer import _same_top5

    model = Yamnet.load(DEFAULT_MODELS_DIR / "events" / "yamnet.pt")
    xnnpack, builtin = _interpreter(tflite), _interpreter(tflite, xnnpack=False)
    windows = np.concatenate([event_windows(mono_16k(path)) for path in debian_sounds()])
    reference = np.stack([xnnpack(w) for w in windows])
    others = {
        "torch port": model(torch.from_numpy(windows)).numpy(),
        "TFLite builtin kernels": np.stack([builtin(w) for w in windows]),
    }
    print(f"\n{len(windows)} windows against the TFLite runtime (XNNPACK, one thread)\n")
    print("| | same top 5 | every score within 0.03 | largest difference | mean abs |")
    print("|---|---|---|---|---|")
    for name, scores in others.items():
        worst = np.abs(scores - reference).max(axis=1)
        top5 = np.mean([_same_top5(r, o) for r, o in zip(reference, scores, strict=True)])
        print(
            f"| {name} | {top5:.1%} | {np.mean(worst <= 0.03):.1%} | {worst.max():.3f} | "
            f"{np.abs(scores - reference).mean():.5f} |"
        )


def recording(minutes: float) -> tuple[np.ndarray, list[tuple[str, float]]]:
    """Pink noise at -50 dBFS (RMS) with the sounds inserted every `EVERY_S` seconds."""
    rng = np.random.default_rng(0)
    length = round(minutes * 60 * RATE)
    spectrum = np.fft.rfft(rng.normal(0, 1, length))
    spectrum /= np.sqrt(np.maximum(np.fft.rfftfreq(length, 1 / RATE), 20.0))
    noise = np.fft.irfft(spectrum, length)
    audio = (noise / np.sqrt(np.mean(noise**2)) * 0.00316).astype(np.float32)
    sounds = [(name, mono_16k(DEBIAN_SOUNDS / path)) for name, path in INSERTED.items()]
    inserted = []
    for k, at in enumerate(range(EVERY_S // 2, int(minutes * 60) - EVERY_S // 2, EVERY_S)):
        name, sound = sounds[k % len(sounds)]
        start = at * RATE + int(rng.integers(0, RATE))
        audio[start : start + len(sound)] += sound
        inserted.append((name, start / RATE))
    return audio.astype(np.float32), inserted


def _torch_share(args: tuple[np.ndarray, str]) -> tuple[int, float]:
    """(windows, CPU seconds of this process for them), the model loaded before the clock."""
    audio, _ = args
    torch.set_num_threads(1)
    recognizer = load_models(DEFAULT_MODELS_DIR, ["events"])[0]["events"].recognizer
    windows = 0
    started = time.process_time()
    for segment in Segmenter(decoder_blocks(audio), recognizer.plan):
        windows += len(recognizer.infer(recognizer.features(segment), segment))
    return windows, time.process_time() - started


def decoder_blocks(audio: np.ndarray) -> Iterator[np.ndarray]:
    """The recording in the blocks a decoder hands over (one block would make the segmenter
    copy what remains of it at every segment: quadratic in its length)."""
    return (audio[start : start + BLOCK_FRAMES] for start in range(0, len(audio), BLOCK_FRAMES))


def _tflite_share(args: tuple[np.ndarray, str]) -> tuple[int, float]:
    audio, tflite = args
    run = _interpreter(Path(tflite))
    starts = range(0, len(audio) - WINDOW + 1, HOP)
    started = time.process_time()
    for start in starts:
        run(audio[start : start + WINDOW])
    return len(starts), time.process_time() - started


def throughput(audio: np.ndarray, tflite: Path, processes: int, rounds: int) -> None:
    """Audio seconds per CPU second (each process's own CPU time, so the other tenants of a
    shared machine count less than in wall time), torch and TFLite alternating `rounds` times;
    the ratio is of each side's best round."""
    parts = np.array_split(audio, processes)
    print(
        f"\n{len(audio) / RATE / 60:.0f} min, one single-thread process per core ({processes}), "
        f"{rounds} alternating rounds\n"
    )
    print("| round | | windows | CPU s | audio s per CPU s |")
    print("|---|---|---|---|---|")
    rates: dict[str, list[float]] = {"TFLite (XNNPACK int8)": [], "torch port": []}
    context = multiprocessing.get_context("spawn")
    works = {
        "TFLite (XNNPACK int8)": (_tflite_share, str(tflite)),
        "torch port": (_torch_share, ""),
    }
    for round_ in range(1, rounds + 1):
        for name, (work, extra) in works.items():
            with context.Pool(processes) as pool:
                pool.map(work, [(part[: RATE * 5], extra) for part in parts])  # load and warm up
                shares = pool.map(work, [(part, extra) for part in parts])
            windows, cpu = sum(w for w, _ in shares), sum(c for _, c in shares)
            rates[name].append(len(audio) / RATE / cpu)
            print(f"| {round_} | {name} | {windows} | {cpu:.1f} | {rates[name][-1]:.0f} |")
    best = max(rates["torch port"]) / max(rates["TFLite (XNNPACK int8)"])
    print(f"\ntorch / TFLite, best against best: {best:.2f} (target 1.5)")
    for round_, (theirs, ours) in enumerate(zip(*rates.values(), strict=True), 1):
        print(f"round {round_}: {ours / theirs:.2f}")


EXPECTED = {
    "phone": ("Alarm",),
    "alarm clock": ("Alarm", "Brief tone"),
    "bell": ("Bell", "Alarm", "Brief tone"),
    "voice": ("Human voice",),
}
"""The AudioSet ontology classes whose labels (the class and every class under it) count as
finding each sound: a phone is an "Alarm" (Telephone, Ringtone, Telephone bell ringing sit under
it); an alarm clock an "Alarm" or a "Brief tone" (Beep, bleep; Ping; Ding: the beeps of clocks and
appliances); a bell a "Bell", an "Alarm" or a "Brief tone"; a voice a "Human voice" (Speech and
its kinds). A tag of another label near a sound (Camera, Frog) does not find it."""


def own_labels(ontology: Ontology, sound: str) -> set[str]:
    """The AudioSet ids that find `sound`: its `EXPECTED` classes and every class under them."""
    ids = {name: class_id for class_id, name in ontology.names.items()}
    missing = [name for name in EXPECTED[sound] if name not in ids]
    if missing:
        raise ValueError(f"not AudioSet classes: {missing}")
    return set().union(*(ontology.under(ids[name]) for name in EXPECTED[sound]))


def timing(audio: np.ndarray, inserted: list[tuple[str, float]], hop_s: float) -> None:
    loaded = load_models(DEFAULT_MODELS_DIR, ["events"])[0]["events"]
    recognizer = loaded.recognizer
    if hop_s != recognizer.plan.hop / RATE:
        manifest = dataclasses.replace(
            loaded.manifest, model={**loaded.manifest.model, "hop_s": hop_s}
        )
        recognizer = KINDS["events"].build(manifest, manifest.segment_s)
    tagger = recognizer.tagger({})
    tags = []
    for segment in Segmenter(decoder_blocks(audio), recognizer.plan):
        tags += tagger.push(recognizer.infer(recognizer.features(segment), segment))
    tags += tagger.finish(len(audio))
    ontology = Ontology.read(DEFAULT_MODELS_DIR / "events" / "ontology.json")
    lengths = {name: len(mono_16k(DEBIAN_SOUNDS / path)) / RATE for name, path in INSERTED.items()}
    print(
        f"\nhop {hop_s} s: {len(inserted)} sounds inserted, {len(tags)} tags at the manifest's "
        "defaults; a sound's tags are those of its labels (EXPECTED) over it, from 1 s before\n"
    )
    print(
        "| sound | inserted | a tag within 0.5 s of its start | its first tag within 0.5 s | "
        "first tag's start - onset, s: least, mean, most | labels of its tags |"
    )
    print("|---|---|---|---|---|---|")
    for name in INSERTED:
        wanted = own_labels(ontology, name)
        near, first, labels = 0, [], set[str]()
        for _, at in (item for item in inserted if item[0] == name):
            own = [
                t
                for t in tags
                if t.extra.get("label_id") in wanted
                and t.start < at + lengths[name]
                and t.end > at - 1
            ]
            near += any(abs(t.start - at) <= 0.5 for t in own)
            first.append(min((t.start for t in own), default=np.inf) - at)
            labels.update(t.label for t in own)
        errors = np.array(first)
        seen = errors[np.isfinite(errors)]
        spread = f"{seen.min():+.2f}, {seen.mean():+.2f}, {seen.max():+.2f}" if len(seen) else "-"
        print(
            f"| {name} | {len(errors)} | {near} | {np.sum(np.abs(errors) <= 0.5)} | {spread} | "
            f"{'; '.join(sorted(labels))} |"
        )
    spans = [(at - 1, at + lengths[name] + 1) for name, at in inserted]
    stray = [t for t in tags if not any(t.start < b and t.end > a for a, b in spans)]
    print(f"\ntags on noise alone (1 s or more from any sound): {len(stray)} ", end="")
    print(sorted({t.label for t in stray}))


DEFAULT_TFLITE = Path(__file__).parent / "out" / "yamnet.tflite"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tflite", type=Path, nargs="?")
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="alternating throughput rounds")
    parser.add_argument(
        "--throughput-only", action="store_true", help="skip the agreement and timing figures"
    )
    parser.add_argument(
        "--timing-only", action="store_true", help="only the timing figures (no TFLite file)"
    )
    args = parser.parse_args(argv)
    audio, inserted = recording(args.minutes)
    if args.timing_only:
        for hop_s in (0.48, 0.24):
            timing(audio, inserted, hop_s)
        return
    tflite = args.tflite or Path(os.environ.get("YAMNET_TFLITE") or DEFAULT_TFLITE)
    if not tflite.is_file():
        print(
            f"skipped: no YAMNet TFLite file at {tflite} (give its path or set YAMNET_TFLITE; "
            "models/events/README.md says where it comes from)"
        )
        return
    if not args.throughput_only:
        agreement(tflite)
        for hop_s in (0.48, 0.24):
            timing(audio, inserted, hop_s)
    throughput(audio, tflite, args.processes, args.rounds)


if __name__ == "__main__":
    main()
