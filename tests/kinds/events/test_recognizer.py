"""The `events` model: YAMNet's TFLite graph in torch, proved against the TFLite runtime.

`models/events/reference.npz` holds the runtime's scores (ai-edge-litert 2.3, XNNPACK, one thread)
on every 0.975-s window, 0.48 s apart, of Debian's freedesktop and alsa-utils sounds (see
`models/events/convert_yamnet.py`). The graph is int8; the port rounds every activation to the same
grid, but its float32 FFT moves a log-mel value one step now and then (the runtime's FFT is
double) and oneDNN's requantisation rounds once more than XNNPACK's, so activations drift. Its
logits sit on a grid of 0.35 and its scores on the 32 values that grid gives through the sigmoid
and the 1/256 output grid (`_ladder`): the gate is one step of that ladder, on every score of
every window, on every ISA oneDNN may pick (`test_the_gate_holds_on_every_isa_this_cpu_has`).
Measured (AMD EPYC with AVX2 only, torch 2.13; Intel Xeon with AMX, torch 2.11, each
`ONEDNN_MAX_CPU_ISA` from AVX2 to AMX): every score within one step, 22-34 windows of 67 with a
one-step difference somewhere; the int8 kernels of AVX-512 without VNNI, which saturate, moved
scores by up to 17 steps (hence `events.int8_sums_exact`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

import arengine.kinds.events.network as events
from arengine.audio.segments import Segmenter
from arengine.errors import InvalidInput
from arengine.kinds.events.network import WINDOW, Yamnet
from arengine.kinds.events.recognizer import EventsRecognizer, read_class_map
from arengine.kinds.manifest import read_manifest
from arengine.models import DEFAULT_MODELS_DIR
from arengine.models.registry import load_models, overrides_by_model
from arengine.types import Tag
from tests.recordings import DEBIAN_SOUNDS, debian_sounds, event_windows, mono_16k

FOLDER = DEFAULT_MODELS_DIR / "events"
ISAS = {  # oneDNN's names for the levels it may pick, and the CPU flags each needs
    "AVX2": {"avx2"},
    "AVX512_CORE": {"avx512f", "avx512bw", "avx512vl", "avx512dq"},
    "AVX512_CORE_VNNI": {"avx512f", "avx512_vnni"},
    "AVX512_CORE_AMX": {"avx512f", "avx512_vnni", "amx_int8"},
}


@pytest.fixture(scope="module")
def model() -> Yamnet:
    return Yamnet.load(FOLDER / "yamnet.pt")


@pytest.fixture(scope="module")
def compared(model: Yamnet) -> tuple[np.ndarray, np.ndarray]:
    """(reference, port) scores of every window of every Debian recording."""
    return _compare(model)


def _compare(model: Yamnet) -> tuple[np.ndarray, np.ndarray]:
    with np.load(FOLDER / "reference.npz") as stored:
        reference = {key: stored[key] for key in stored.files}
    ours, theirs = [], []
    for path in debian_sounds():
        windows = torch.from_numpy(event_windows(mono_16k(path)))
        with torch.inference_mode():
            ours.append(model(windows).numpy())
        theirs.append(reference[path.name])
    return np.concatenate(theirs), np.concatenate(ours)


def _ladder(model: Yamnet) -> np.ndarray:
    """Every score the network can give, ascending: its logit grid through the sigmoid, on its
    output grid."""
    logits = torch.arange(model.fc_quant.low, model.fc_quant.high + 1) * model.fc_quant.scale
    return np.unique(model.score_quant(torch.sigmoid(logits)).numpy())


def _steps(scores: np.ndarray, ladder: np.ndarray) -> np.ndarray:
    """Each score's place on the ladder (an error if one is not on it)."""
    places = np.searchsorted(ladder, scores - 1e-6)
    np.testing.assert_array_equal(ladder[np.minimum(places, len(ladder) - 1)], scores)
    return places


def _same_top5(reference: np.ndarray, ours: np.ndarray) -> bool:
    """Each side's 5 best are within one step of the other side's 5th best (steps on the
    ladder; a class tied within a step is not a disagreement)."""
    theirs, mine = np.argsort(-reference, kind="stable")[:5], np.argsort(-ours, kind="stable")[:5]
    fifth, my_fifth = np.sort(reference)[-5], np.sort(ours)[-5]
    return bool((reference[mine] >= fifth - 1).all() and (ours[theirs] >= my_fifth - 1).all())


def test_the_port_gives_the_runtimes_top5_and_scores(
    compared: tuple[np.ndarray, np.ndarray], model: Yamnet
) -> None:
    _assert_agrees(*compared, _ladder(model))


@pytest.mark.parametrize("fused", [True, False])
def test_without_the_int8_kernels_the_float_path_agrees_as_well(
    monkeypatch: pytest.MonkeyPatch, fused: bool
) -> None:
    """Where torch has no oneDNN, the network loads without its int8 operators and the
    convolutions run in float on the same integer grids: with oneDNN's fused clamp, or in plain
    torch."""
    monkeypatch.setattr(events, "INT8", False)
    monkeypatch.setattr(events, "FUSED", fused)
    model = Yamnet.load(FOLDER / "yamnet.pt")
    _assert_agrees(*_compare(model), _ladder(model))


def _assert_agrees(reference: np.ndarray, ours: np.ndarray, ladder: np.ndarray) -> None:
    assert len(reference) >= 60
    theirs, mine = _steps(reference, ladder), _steps(ours, ladder)
    assert np.abs(theirs - mine).max() <= 1  # every score of every window
    assert all(_same_top5(r, o) for r, o in zip(theirs, mine, strict=True))


def _cpu_flags() -> set[str]:
    cpuinfo = Path("/proc/cpuinfo")
    text = cpuinfo.read_text() if cpuinfo.exists() else ""
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split()}


@pytest.mark.slow
@pytest.mark.parametrize("isa", ISAS)
def test_the_gate_holds_on_every_isa_this_cpu_has(isa: str) -> None:
    """The agreement tests again with oneDNN's kernels capped at each ISA level the CPU has
    (oneDNN reads the cap once, at its first kernel: hence a process each)."""
    if not ISAS[isa] <= _cpu_flags():
        pytest.skip(f"this CPU has no {isa}")
    tests = f"{__file__}::test_the_port_gives_the_runtimes_top5_and_scores"
    tests += f" {__file__}::test_without_the_int8_kernels_the_float_path_agrees_as_well"
    tests += f" {__file__}::test_the_int8_kernels_are_used_only_where_they_sum_exactly"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests.split()],
        env={**os.environ, "ONEDNN_MAX_CPU_ISA": isa},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "4 passed" in done.stdout


def test_the_int8_kernels_are_used_only_where_they_sum_exactly() -> None:
    """VNNI and AMX sum u8 x s8 products in int32; below them (or capped below them) oneDNN adds
    pairs in int16, which saturates on loud windows, and the network runs in float instead."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    flags = _cpu_flags()
    vnni = bool({"avx512_vnni", "avx_vnni", "amx_int8"} & flags)
    if cap in ("AVX2", "AVX512_CORE") or not vnni:
        assert not events.int8_sums_exact()
    elif "avx512_vnni" in flags or "amx_int8" in flags:
        assert events.int8_sums_exact()
    model = Yamnet.load(FOLDER / "yamnet.pt")
    assert bool(model._int8) == (events.INT8 and events.int8_sums_exact())


def test_the_scores_mean_what_audioset_says(compared: tuple[np.ndarray, np.ndarray]) -> None:
    labels, _ = read_class_map(FOLDER / "yamnet_class_map.csv")
    top = {
        path.name: labels[int(mono.max(0).argmax())]
        for path, mono in zip(debian_sounds(), _per_file(compared[1]), strict=True)
    }
    assert top["phone-incoming-call.oga"] in ("Telephone bell ringing", "Telephone", "Ringtone")
    assert top["Front_Center.wav"] == "Speech"
    assert top["camera-shutter.oga"] in ("Camera", "Single-lens reflex camera")


def _per_file(scores: np.ndarray) -> list[np.ndarray]:
    counts = [len(event_windows(mono_16k(path))) for path in debian_sounds()]
    return np.split(scores, np.cumsum(counts)[:-1])


def test_one_network_shared_by_threads_equals_serial(model: Yamnet) -> None:
    windows = torch.from_numpy(event_windows(mono_16k(debian_sounds()[0])))
    with torch.inference_mode():
        serial = model(windows).numpy()

    def run(_: int) -> np.ndarray:
        with torch.inference_mode():
            out: np.ndarray = model(windows).numpy()
        return out

    with ThreadPoolExecutor(8) as pool:
        for result in pool.map(run, range(16)):
            np.testing.assert_array_equal(result, serial)


def test_the_vendored_files_are_the_ones_the_readme_names() -> None:
    readme = (FOLDER / "README.md").read_text()
    for name in ("yamnet.pt", "yamnet_class_map.csv", "ontology.json"):
        assert hashlib.sha256((FOLDER / name).read_bytes()).hexdigest() in readme


def test_the_recognizer_scores_each_window_once_across_segments() -> None:
    loaded, failures = load_models(DEFAULT_MODELS_DIR, ["events"], segment_s=2.0)
    assert failures == []
    recognizer = loaded["events"].recognizer
    assert isinstance(recognizer, EventsRecognizer)
    assert recognizer.plan.hop == 7680 and recognizer.plan.lookahead == WINDOW - 7680
    assert recognizer.ids[0] == "/m/09x0r" and recognizer.labels[0] == "Speech"


def test_an_events_manifest_lists_no_labels() -> None:
    manifest = read_manifest(FOLDER / "manifest.toml")
    assert manifest.kind == "events" and manifest.labels == ()


@pytest.mark.parametrize(
    ("right", "wrong", "reason"),
    [
        ('"Glass", "Shatter",', '"Glass", "Shatterr",', "unknown label 'Shatterr' in a group"),
        ('"alarm", "Screaming"', '"alarm", "Screamin"', "unknown label 'Screamin'"),
        ("hop_s = 0.48", "hop_s = 0.0", "hop_s must be above 0"),
    ],
)
def test_a_manifest_naming_what_is_not_there_is_unavailable_with_the_reason(
    tmp_path: Path, right: str, wrong: str, reason: str
) -> None:
    folder = tmp_path / "events"
    shutil.copytree(FOLDER, folder)
    manifest = folder / "manifest.toml"
    text = manifest.read_text()
    assert right in text
    manifest.write_text(text.replace(right, wrong, 1))
    loaded, failures = load_models(tmp_path)
    assert loaded == {} and len(failures) == 1
    assert reason in failures[0].reason


@pytest.mark.parametrize("segment_s", [1.0, 2.4, 7.0])
def test_segment_boundaries_neither_split_nor_repeat_an_event(segment_s: float) -> None:
    """A phone ring, a voice and an alarm clock: the same tags whatever the segment length."""
    parts = [
        mono_16k(DEBIAN_SOUNDS / name)
        for name in (
            "freedesktop/stereo/phone-incoming-call.oga",
            "alsa/Front_Center.wav",
            "freedesktop/stereo/alarm-clock-elapsed.oga",
        )
    ]
    audio = np.concatenate([np.concatenate([p, np.zeros(8000, np.float32)]) for p in parts])

    def tags(length_s: float) -> list[Tag]:
        loaded, _ = load_models(DEFAULT_MODELS_DIR, ["events"], segment_s=length_s)
        recognizer = loaded["events"].recognizer
        tagger = recognizer.tagger({"hysteresis": 0.3})
        found = []
        for segment in Segmenter(iter([audio]), recognizer.plan):
            found += tagger.push(recognizer.infer(recognizer.features(segment), segment))
        return found + tagger.finish(len(audio))

    whole = tags(30.0)
    assert {"Telephone bell ringing", "Speech"} <= {t.label for t in whole}
    assert tags(segment_s) == whole


def pink_noise(seconds: float, dbfs: float = -50.0, seed: int = 0) -> np.ndarray:
    """Pink noise (power falling as 1/f above 20 Hz) at `dbfs` RMS, 16 kHz: the quiet room the
    timing checks put their sounds in (loadtests/events.py too)."""
    rng = np.random.default_rng(seed)
    length = round(seconds * 16000)
    spectrum = np.fft.rfft(rng.normal(0, 1, length))
    spectrum /= np.sqrt(np.maximum(np.fft.rfftfreq(length, 1 / 16000), 20.0))
    noise = np.fft.irfft(spectrum, length)
    quiet: np.ndarray = (noise / np.sqrt(np.mean(noise**2)) * 10 ** (dbfs / 20)).astype(np.float32)
    return quiet


def _default_tags(audio: np.ndarray) -> list[Tag]:
    """The events model's tags at its manifest's defaults, segment after segment."""
    recognizer = load_models(DEFAULT_MODELS_DIR, ["events"])[0]["events"].recognizer
    tagger = recognizer.tagger({})
    found = []
    for segment in Segmenter(iter([audio]), recognizer.plan):
        found += tagger.push(recognizer.infer(recognizer.features(segment), segment))
    return found + tagger.finish(len(audio))


def test_an_alarm_clock_is_tagged_at_its_onset_at_the_defaults() -> None:
    """The freedesktop alarm clock at 12 offsets across one hop: each starts a beep tag within
    0.5 s. Its onset windows score 0.20-0.26 on "Beep, bleep": under the kind's 0.3, five of
    the 12 had no beep tag within 0.5 s of their onset (EventParams.thresholds)."""
    sound = mono_16k(DEBIAN_SOUNDS / "freedesktop/stereo/alarm-clock-elapsed.oga")
    onsets = [1.0 + k * (8.0 + 0.04) for k in range(12)]  # 0.04 s further into a hop each time
    audio = pink_noise(onsets[-1] + 8.0)
    for onset in onsets:
        start = round(onset * 16000)
        audio[start : start + len(sound)] += sound
    beeps = [t.start for t in _default_tags(audio) if t.label == "Beep, bleep"]
    late = [at for at in onsets if not any(abs(start - at) <= 0.5 for start in beeps)]
    assert late == []


PHONE_LABELS = {"Alarm", "Telephone", "Telephone bell ringing", "Ringtone"}


def test_a_phone_ring_starts_its_tag_at_its_onset() -> None:
    """The freedesktop incoming call at 12 offsets across one hop: its first phone tag starts
    within 0.5 s of the onset. A tag used to start half a hop before its first window's centre,
    and a sharp onset fires a window it fills only the end of: up to 0.66 s early."""
    sound = mono_16k(DEBIAN_SOUNDS / "freedesktop/stereo/phone-incoming-call.oga")
    gap = len(sound) / 16000 + 6.0
    onsets = [1.0 + k * (gap + 0.04) for k in range(12)]  # 0.04 s further into a hop each time
    audio = pink_noise(onsets[-1] + gap)
    for onset in onsets:
        start = round(onset * 16000)
        audio[start : start + len(sound)] += sound
    phone = [t.start for t in _default_tags(audio) if t.label in PHONE_LABELS]
    firsts = [
        min((s for s in phone if onset - 2.0 <= s <= onset + 2.0), default=None) for onset in onsets
    ]
    off = [
        (at, first)
        for at, first in zip(onsets, firsts, strict=True)
        if first is None or abs(first - at) > 0.5
    ]
    assert off == []


def test_quiet_noise_alone_starts_no_tag_at_the_defaults() -> None:
    assert _default_tags(pink_noise(120.0)) == []


def test_a_label_list_goes_to_the_label_models_that_know_its_names() -> None:
    loaded, _ = load_models(DEFAULT_MODELS_DIR, ["music", "events"])
    music, events = loaded["music"].recognizer, loaded["events"].recognizer
    shares = overrides_by_model([music, events], {"exclude": "Speech", "threshold": 0.4})
    # "no vocals;Glass" names a label of each model, all of neither: refused below, not split.
    assert shares == [{"threshold": 0.4}, {"exclude": "Speech", "threshold": 0.4}]
    assert overrides_by_model([music, events], {"profile": "safety"}) == [{}, {"profile": "safety"}]
    with pytest.raises(InvalidInput, match="unknown label 'Glas'"):
        overrides_by_model([music, events], {"labels": "Glas"})
    with pytest.raises(InvalidInput, match="unknown label"):
        overrides_by_model([music, events], {"labels": "no vocals;Glass"})


def test_a_segments_patches_are_its_windows_patches(model: Yamnet) -> None:
    """The recognizer computes the log-mel once per 10-ms frame and slices each window's patch
    from it: the same scores as the network on each window."""
    loaded, _ = load_models(DEFAULT_MODELS_DIR, ["events"], segment_s=4.0)
    recognizer = loaded["events"].recognizer
    audio = mono_16k(DEBIAN_SOUNDS / "alsa/Front_Center.wav")
    (segment,) = list(Segmenter(iter([audio[: 4 * 7680]]), recognizer.plan))
    windows = torch.from_numpy(segment.samples).unfold(0, WINDOW, 7680)[: segment.frames]
    with torch.inference_mode():
        expected = model(windows).numpy()
    np.testing.assert_array_equal(recognizer.infer(recognizer.features(segment), segment), expected)


def test_a_long_segments_log_mel_crosses_its_passes_unchanged(model: Yamnet) -> None:
    """A default segment's 3,120 frames take several `MEL_FRAMES` passes: each window's patch
    sliced from them is the one computed from that window alone."""
    recognizer = load_models(DEFAULT_MODELS_DIR, ["events"])[0]["events"].recognizer
    sounds = [mono_16k(path) for path in debian_sounds()]
    audio = np.concatenate(sounds * (1 + recognizer.plan.segment_samples // sum(map(len, sounds))))
    segment = next(iter(Segmenter(iter([audio]), recognizer.plan)))
    assert len(segment.samples) > 2 * events.MEL_FRAMES * 160
    windows = torch.from_numpy(segment.samples).unfold(0, WINDOW, recognizer.plan.hop)
    with torch.inference_mode():
        expected = model.patches(windows[: segment.frames])
    torch.testing.assert_close(recognizer.features(segment), expected, rtol=0, atol=0)
