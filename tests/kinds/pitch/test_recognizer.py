"""The pitch model: CREPE tiny frames and decoding, thread-safe, scriptable, right on tones."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from arengine.audio.segments import Segmenter
from arengine.errors import InvalidInput
from arengine.kinds.pitch.network import CHUNK_FRAMES, HOP, WINDOW, Crepe, decode, normalise
from arengine.kinds.pitch.recognizer import PitchRecognizer
from tests.conftest import ROOT

WEIGHTS = ROOT / "models" / "pitch" / "tiny.pth"
RATE = 16000


@pytest.fixture(scope="module")
def crepe() -> Crepe:
    return Crepe.load(WEIGHTS)


@pytest.fixture(scope="module")
def recognizer() -> PitchRecognizer:
    return PitchRecognizer(WEIGHTS, segment_s=0.5)


def tone(frequency: float, seconds: float, overtones: int = 0) -> np.ndarray:
    """A sine, or a harmonic tone whose k-th overtone has amplitude 1 / (k + 1)."""
    t = np.arange(round(seconds * RATE)) / RATE
    wave = sum(np.sin(2 * np.pi * frequency * (k + 1) * t) / (k + 1) for k in range(overtones + 1))
    scaled: np.ndarray = (0.3 * wave / np.max(np.abs(wave))).astype(np.float32)
    return scaled


def _frames(audio: np.ndarray) -> torch.Tensor:
    return normalise(torch.from_numpy(audio).unfold(0, WINDOW, HOP))


def test_weights_are_frozen_and_the_scripted_model_equals_eager(crepe: Crepe) -> None:
    assert not crepe.training
    assert all(not p.requires_grad for p in crepe.parameters())
    state = torch.load(WEIGHTS, map_location="cpu", weights_only=True)
    trained = sum(v.numel() for k, v in state.items() if k.endswith(("weight", "bias")))
    assert sum(p.numel() for p in crepe.parameters()) == trained == 486_552
    frames = _frames(tone(330, 0.5, overtones=3))
    scripted = torch.jit.script(crepe)
    with torch.inference_mode():
        eager = crepe(frames)
        assert eager.shape == (len(frames), 360)
        assert torch.allclose(scripted(frames), eager, atol=1e-6)


@pytest.mark.slow
def test_many_threads_sharing_the_model_match_one_thread(crepe: Crepe) -> None:
    inputs = [_frames(tone(200 + 60 * i, 0.4, overtones=i % 3)) for i in range(8)]
    with torch.inference_mode():
        serial = [crepe(x) for x in inputs]
    results: dict[tuple[int, int], torch.Tensor] = {}
    barrier = threading.Barrier(8)

    def work(worker: int) -> None:
        barrier.wait()
        for repeat in range(3):
            for i in range(worker, worker + 8):
                with torch.inference_mode():
                    results[(worker, repeat * 8 + i % 8)] = crepe(inputs[i % 8])

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8 * 24
    for (_, key), value in results.items():
        assert torch.equal(value, serial[key % 8])


@pytest.mark.parametrize("frequency", [110.0, 220.0, 440.0, 523.25, 659.25, 880.0])
@pytest.mark.parametrize("overtones", [0, 3])
def test_decoded_pitch_is_within_20_cents_on_tones(
    crepe: Crepe, frequency: float, overtones: int
) -> None:
    with torch.inference_mode():
        scores = decode(crepe(_frames(tone(frequency, 1.0, overtones)))).numpy()
    periodicity = scores[:, 1]
    voiced = periodicity >= 0.65
    assert voiced.mean() == 1.0, periodicity.min()
    cents = 1200 * np.log2(scores[voiced, 0] / frequency)
    assert np.abs(cents).max() < 20


def test_noise_is_unvoiced(crepe: Crepe) -> None:
    noise = np.random.default_rng(3).standard_normal(RATE).astype(np.float32) * 0.1
    with torch.inference_mode():
        periodicity = decode(crepe(_frames(noise))).numpy()[:, 1]
    assert periodicity.max() < 0.65
    assert np.median(periodicity) < 0.3


def test_decode_is_the_weighted_mean_around_the_peak() -> None:
    activations = torch.zeros(2, 360)
    activations[0, 100] = 0.8
    activations[0, 101] = 0.8  # halfway between bins 100 and 101
    activations[0, 110] = 0.5  # outside the 9-bin window: ignored
    activations[1, 0] = 0.9  # the window is clipped at bin 0
    activations[1, 2] = 0.3
    scores = decode(activations).numpy()
    cents = 1997.3794084376191 + 20 * np.array([100.5, (0 * 0.9 + 2 * 0.3) / 1.2])
    assert np.allclose(scores[:, 0], 10 * 2 ** (cents / 1200), rtol=1e-6)
    assert np.allclose(scores[:, 1], [0.8, 0.9])


def test_frame_i_is_the_window_centred_on_sample_i_hop(recognizer: PitchRecognizer) -> None:
    audio = np.random.default_rng(0).standard_normal(23_456).astype(np.float32)
    padded = np.concatenate([np.zeros(512, np.float32), audio, np.zeros(1024, np.float32)])
    blocks = (audio[i : i + 3000] for i in range(0, len(audio), 3000))
    frames = 0
    for segment in Segmenter(blocks, recognizer.plan):
        features = recognizer.features(segment)
        assert features.shape == (segment.frames, WINDOW)
        for i in (0, segment.frames - 1):
            centre = (segment.first_frame + i) * HOP
            window = torch.from_numpy(padded[centre : centre + WINDOW])  # audio centre +- 512
            assert torch.allclose(features[i], normalise(window[None])[0], atol=1e-5)
        scores = recognizer.infer(features, segment)
        assert scores.shape == (segment.frames, 2)
        assert scores.dtype == np.float32
        frames += segment.frames
    assert frames == -(-len(audio) // HOP)


def test_infer_in_chunks_equals_one_call(crepe: Crepe) -> None:
    recognizer = PitchRecognizer(WEIGHTS, segment_s=3.0)
    audio = np.concatenate([tone(261.63, 1.5, overtones=2), tone(392.0, 1.7)])
    segment = next(iter(Segmenter(iter([audio]), recognizer.plan)))
    assert segment.frames == 300 > CHUNK_FRAMES
    features = recognizer.features(segment)
    with torch.inference_mode():
        whole = decode(crepe(features)).numpy()
    assert np.allclose(recognizer.infer(features, segment), whole, rtol=1e-5, atol=1e-6)


def test_recognizer_contract(recognizer: PitchRecognizer) -> None:
    assert (recognizer.name, recognizer.kind, recognizer.sample_rate) == ("pitch", "pitch", 16000)
    assert recognizer.labels[0] == "C1"
    assert recognizer.labels[-1] == "B7"
    assert "A4" in recognizer.labels
    assert "C#5" in recognizer.labels
    assert len(recognizer.labels) == 84
    assert recognizer.plan.segment_frames == 50
    assert recognizer.defaults() == {
        "threshold": 0.65,
        "min_duration_ms": 100.0,
        "median_frames": 5.0,
    }
    recognizer.warm_up()
    assert recognizer.tagger({"threshold": 0.8}).params.threshold == 0.8
    with pytest.raises(InvalidInput) as caught:
        recognizer.tagger({"threshold": 0.5, "merge_gap_ms": 10, "hysteresis": 1})
    assert caught.value.code == "invalid_parameter"
    assert "hysteresis, merge_gap_ms does not apply" in caught.value.message
    assert "min_duration_ms" in caught.value.message
    for bad in ({"threshold": 1.5}, {"median_frames": 4}, {"min_duration_ms": -1}):
        with pytest.raises(InvalidInput) as caught:
            recognizer.tagger(bad)
        assert caught.value.code == "invalid_parameter"
