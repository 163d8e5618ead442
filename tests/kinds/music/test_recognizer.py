"""The `music` model: musicnn's MTT network in torch, proved against musicnn's own TF graph.

`models/music/reference.npz` holds musicnn's input patches (its librosa front end) and the taggram
its TF graph computed on `models/music/reference.flac` (see `models/music/convert.py`).
"""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import librosa
import numpy as np
import pytest
import soundfile as sf
import torch

from arengine.kinds.manifest import read_manifest
from arengine.kinds.music.network import CONTEXT, LABELS, PATCH_HOP, MusicLogMel, Musicnn
from arengine.models import DEFAULT_MODELS_DIR
from arengine.models.registry import load_models

FOLDER = DEFAULT_MODELS_DIR / "music"


@pytest.fixture(scope="module")
def model() -> Musicnn:
    return Musicnn.load(FOLDER / "musicnn_mtt.pth")


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    with np.load(FOLDER / "reference.npz") as stored:
        return {key: stored[key] for key in stored.files}


def _clip() -> np.ndarray:
    audio, rate = sf.read(FOLDER / "reference.flac", dtype="float32")
    assert rate == 16000 and audio.ndim == 1
    clip: np.ndarray = audio
    return clip


def _patch_samples(audio: np.ndarray) -> torch.Tensor:
    """What the segmenter gives for whole patches: the centring context, then the patches."""
    whole = len(audio) // PATCH_HOP * PATCH_HOP
    return torch.from_numpy(np.concatenate([np.zeros(CONTEXT, np.float32), audio[:whole]]))


def test_the_network_equals_musicnns_graph_on_its_own_input(
    model: Musicnn, reference: dict[str, np.ndarray]
) -> None:
    patches = torch.from_numpy(reference["patches"].astype(np.float32))
    with torch.inference_mode():
        ours = model(patches).numpy()
    assert ours.shape == reference["taggram"].shape == (3, 50)
    np.testing.assert_allclose(ours, reference["taggram"], rtol=0, atol=1e-5)
    # The clip is a piano piece: the conversion kept what the tags mean.
    assert LABELS[int(ours.mean(0).argmax())] == "piano"


def test_the_front_end_equals_librosas(reference: dict[str, np.ndarray]) -> None:
    audio = _clip()
    ours = MusicLogMel()(_patch_samples(audio)).numpy()
    # musicnn's own: librosa's mel power, rounded to float16, log10(10000 x + 1).
    mel = librosa.feature.melspectrogram(y=audio, sr=16000, hop_length=256, n_fft=512, n_mels=96)
    theirs = np.log10(10000 * mel.T.astype(np.float16).astype(np.float32) + 1)
    difference = np.abs(ours - theirs[: len(ours) * 187].reshape(ours.shape))
    # A mel value on a float16 rounding edge may round either way (measured: 0.01% of values,
    # at most 2.4e-4 apart); all the others agree to float32 precision.
    assert difference.max() < 1e-3
    assert np.mean(difference > 1e-5) < 1e-3
    # musicnn also takes the logarithm in float16: its patches are ours to float16 precision
    # (half a unit in the last place at the largest values here, about 4: 2e-3; measured 1.3e-3).
    stored = np.abs(ours - reference["patches"].astype(np.float32))
    assert stored.max() < 2e-3
    assert stored.mean() < 3e-4


def test_audio_to_tags_equals_musicnn_end_to_end(
    model: Musicnn, reference: dict[str, np.ndarray]
) -> None:
    with torch.inference_mode():
        ours = model(MusicLogMel()(_patch_samples(_clip()))).numpy()
    np.testing.assert_allclose(ours, reference["taggram"], rtol=0, atol=5e-4)


def test_loud_audio_gives_finite_scores(model: Musicnn) -> None:
    """musicnn's float16 logarithm overflows here (10000 x mel > 65504); arengine's does not."""
    t = np.arange(CONTEXT + PATCH_HOP) / 16000
    loud = torch.from_numpy((0.9 * np.sin(2 * np.pi * 110 * t)).astype(np.float32))
    features = MusicLogMel()(loud)
    mel = librosa.feature.melspectrogram(
        y=loud.numpy()[CONTEXT:], sr=16000, hop_length=256, n_fft=512, n_mels=96
    )
    with np.errstate(over="ignore"):
        assert np.isinf(10000 * mel.astype(np.float16)).any()
    with torch.inference_mode():
        assert torch.isfinite(model(features)).all()


def test_one_network_shared_by_threads_equals_serial(model: Musicnn) -> None:
    rng = np.random.default_rng(3)
    inputs = [
        MusicLogMel()(torch.from_numpy(rng.normal(0, 0.1, CONTEXT + n * PATCH_HOP).astype("f4")))
        for n in (1, 2, 1, 3, 2, 1, 1, 2)
    ]

    def run(x: torch.Tensor) -> np.ndarray:
        with torch.inference_mode():
            scores: np.ndarray = model(x).numpy().copy()
        return scores

    serial = [run(x) for x in inputs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = list(pool.map(run, inputs))
    for one, other in zip(serial, threaded, strict=True):
        np.testing.assert_array_equal(one, other)


def test_the_manifest_must_list_musicnns_labels(tmp_path: Path) -> None:
    shutil.copytree(FOLDER, tmp_path / "music")
    manifest = tmp_path / "music" / "manifest.toml"
    manifest.write_text(
        manifest.read_text().replace('"guitar", "classical"', '"classical", "guitar"')
    )
    loaded, failures = load_models(tmp_path)
    assert loaded == {}
    assert "musicnn's 50 MagnaTagATune tags in their order" in failures[0].reason


def test_the_model_card_says_the_training_data_is_non_commercial() -> None:
    card = read_manifest(FOLDER / "manifest.toml").card
    assert card.licence is not None and "non-commercial" in card.licence
    assert card.training_data is not None and "MagnaTagATune" in card.training_data
    assert "non-commercial use only" in card.training_data
