"""The speech model: equal to silero-vad's own model and to the conv reference, thread-safe."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import soxr
import torch
from silero_vad import load_silero_vad

from arengine.audio.segments import Segment
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
from arengine.models import DEFAULT_MODELS_DIR
from arengine.models.registry import load_models
from arengine.models.tagging import ModelTagging
from loadtests.agreement import frame_f1
from tests.conftest import Phrases, RecordingFactory
from tests.kinds.speech.reference import ConvSpeechModel


def _speech_16k(phrases: tuple[list[np.ndarray], int]) -> np.ndarray:
    audio, rate = phrases
    gap = np.zeros(8000, np.float32)
    return np.concatenate([np.concatenate([gap, soxr.resample(a, rate, 16000)]) for a in audio])


def _windows(audio: np.ndarray) -> np.ndarray:
    n = -(-len(audio) // WINDOW)
    x = np.zeros(CONTEXT + n * WINDOW, np.float32)
    x[CONTEXT : CONTEXT + len(audio)] = audio
    return x


def test_matches_the_package_model_on_real_speech(
    speech_model: SpeechModel, phrases: Phrases
) -> None:
    x = _windows(_speech_16k(phrases))
    reference = load_silero_vad()
    reference.reset_states()
    n = (len(x) - CONTEXT) // WINDOW
    with torch.no_grad():
        theirs = torch.cat(
            [
                reference(
                    torch.from_numpy(x[CONTEXT + i * WINDOW : CONTEXT + (i + 1) * WINDOW]), 16000
                )
                for i in range(n)
            ],
            dim=1,
        )[0]
        ours = speech_model(torch.from_numpy(x)[None])[0]
    assert ours.shape == theirs.shape
    assert (ours - theirs).abs().max().item() <= 1e-4
    assert (theirs > 0.5).sum() > n // 4  # the comparison covers real speech, not only silence


def test_many_threads_sharing_the_model_match_one_thread(
    speech_model: SpeechModel, phrases: Phrases
) -> None:
    audio = _speech_16k(phrases)
    inputs = [torch.from_numpy(_windows(audio[i * 3000 :]))[None] for i in range(8)]
    with torch.no_grad():
        serial = [speech_model(x) for x in inputs]
    results: dict[tuple[int, int], torch.Tensor] = {}
    barrier = threading.Barrier(8)

    def work(worker: int) -> None:
        barrier.wait()
        for round_ in range(3):
            index = (worker + round_) % len(inputs)
            with torch.no_grad():
                results[(worker, round_)] = speech_model(inputs[index])

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 24
    for (worker, round_), out in results.items():
        assert torch.equal(out, serial[(worker + round_) % len(inputs)])


def test_batch_rows_are_independent(speech_model: SpeechModel, phrases: Phrases) -> None:
    audio = _speech_16k(phrases)[: 20 * WINDOW]
    a, b = _windows(audio), _windows(audio[::-1].copy())
    with torch.no_grad():
        batched = speech_model(torch.from_numpy(np.stack([a, b])))
        single = speech_model(torch.from_numpy(b)[None])
    assert torch.allclose(batched[1], single[0], atol=1e-6)


def test_a_segment_is_one_call_into_torch_whatever_its_length(speech_model: SpeechModel) -> None:
    """Each call into torch from Python lets go of the GIL and takes it back, and with the
    server's other threads wanting it each can wait for the interpreter's switch interval: the
    forward runs a segment's ops in one scripted call, not ~75 driven from Python."""
    calls: list[str] = []

    def count(frame: object, event: str, arg: object) -> None:
        if event == "c_call":
            calls.append(getattr(arg, "__qualname__", repr(arg)))

    for windows in (10, 937, 4 * 937):  # 0.3 s, a 30-s segment, and 2 minutes in a batch of 4
        x = torch.zeros(1 if windows < 4 * 937 else 4, CONTEXT + min(windows, 937) * WINDOW)
        calls.clear()
        with torch.inference_mode():
            sys.setprofile(count)
            try:
                speech_model(x)
            finally:
                sys.setprofile(None)
        assert len(calls) <= 6, (windows, calls)


@pytest.fixture(scope="module")
def reference() -> ConvSpeechModel:
    """The network as arengine served it before the FFT rewrite (STFT as a 258x256 conv)."""
    return ConvSpeechModel(read_silero_weights(silero_package_archive()))


def test_matches_the_conv_reference_window_by_window(
    speech_model: SpeechModel, reference: ConvSpeechModel, phrases: Phrases
) -> None:
    audio = _speech_16k(phrases)
    # Three rows of different audio, more windows than one encoder chunk (256), and a tail of
    # samples that is not a whole window: every row, chunk and edge is compared.
    rows = [_windows(audio), _windows(audio[::-1].copy()), _windows(0.3 * audio[4000:])]
    width = min(len(r) for r in rows) - 300
    x = torch.from_numpy(np.stack([r[:width] for r in rows]))
    with torch.no_grad():
        ours, theirs = speech_model(x), reference(x)
        single = speech_model(x[1:2])
    assert ours.shape == theirs.shape and ours.shape[1] > 300
    assert (ours - theirs).abs().max().item() <= 1e-4
    assert (single[0] - theirs[1]).abs().max().item() <= 1e-4
    assert (theirs > 0.5).sum() > ours.numel() // 4


def test_speech_tags_match_the_conv_reference(
    speech_model: SpeechModel, reference: ConvSpeechModel, recording: RecordingFactory
) -> None:
    pieces = [
        p
        for i in range(16)
        for p in [("silence", 0.4 + (i % 5) * 0.7), ("speech", 0), ("noise", 0.3 * (i % 2))]
    ]
    clip = recording("long.wav", pieces=pieces)
    limits = AudioLimits(
        max_duration_s=3600, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
    )
    pool = EnginePool(threads=2)
    try:
        tags = [
            pool.submit(
                RequestSpec(
                    "r",
                    clip.path,
                    (recognizer := SpeechRecognizer(model, 4.0, 2.0),),
                    ModelTagging((recognizer,), {}),
                    limits,
                    4,
                )
            )
            .future.result(timeout=120)
            .tags
            for model in (speech_model, reference)
        ]
    finally:
        pool.close()
    ours, theirs = ([(t.start, t.end) for t in found] for found in tags)
    assert len(theirs) >= 12
    assert frame_f1(ours, theirs, clip.duration_s) >= 0.995
    assert len(ours) == len(theirs)


def test_a_basis_that_is_not_a_hann_dft_is_refused() -> None:
    weights = read_silero_weights(silero_package_archive())
    weights["stft_conv.weight"] = weights["stft_conv.weight"] * 1.01
    with pytest.raises(ValueError, match="not a periodic-Hann-windowed DFT"):
        SpeechModel(weights)


def test_a_batch_of_segments_gives_each_segment_its_own_scores(
    speech_model: SpeechModel, phrases: Phrases
) -> None:
    audio = _speech_16k(phrases)
    recognizer = SpeechRecognizer(speech_model, segment_s=4.0, preroll_s=1.0)
    # Unequal lengths (a row without pre-roll, a short last one) are right-padded in the batch.
    segments = [
        Segment(0, 0, 0, 125, _windows(audio[: 125 * WINDOW])),
        Segment(1, 125, 31, 125, _windows(audio[94 * WINDOW : 250 * WINDOW])),
        Segment(2, 250, 31, 40, _windows(audio[219 * WINDOW : 290 * WINDOW - 7])),
    ]
    features = [recognizer.features(segment) for segment in segments]
    batched = recognizer.infer_batch(features, segments)
    for scores, feature, segment in zip(batched, features, segments, strict=True):
        alone = recognizer.infer(feature, segment)
        assert scores.shape == alone.shape == (segment.frames,)
        assert np.abs(scores - alone).max() <= 1e-5


def test_the_manifest_sets_the_batch_size_and_a_bad_one_is_reported(tmp_path: Path) -> None:
    shipped = (DEFAULT_MODELS_DIR / "speech" / "manifest.toml").read_text()
    assert "\nbatch = 4" in shipped
    for name, batch in [("four", "4"), ("zero", "0"), ("huge", "17")]:
        (tmp_path / name).mkdir()
        text = shipped.replace('name = "speech"', f'name = "{name}"')
        (tmp_path / name / "manifest.toml").write_text(
            text.replace("\nbatch = 4", f"\nbatch = {batch}")
        )
    loaded, failures = load_models(tmp_path)
    assert list(loaded) == ["four"]
    assert loaded["four"].recognizer.max_batch == 4
    reasons = sorted(failure.reason for failure in failures)
    assert reasons == [
        "ValueError: max_batch must be 1 to 16, got 0",
        "ValueError: max_batch must be 1 to 16, got 17",
    ]
