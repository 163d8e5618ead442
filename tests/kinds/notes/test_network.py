"""The torch port of basic-pitch's network against the original ONNX model's activations."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from torch.nn import functional

from arengine.kinds.notes.network import FRAMES, SHAPES, WINDOW, Activations, BasicPitch

NOTES = Path(__file__).resolve().parents[3] / "models" / "notes"


@pytest.fixture(scope="module")
def model() -> BasicPitch:
    return BasicPitch.load(NOTES / "nmp.pt")


@pytest.fixture(scope="module")
def clip() -> np.ndarray:
    audio, rate = sf.read(NOTES / "reference.flac", dtype="float32")
    assert rate == 22050 and audio.shape == (WINDOW,)
    clip: np.ndarray = audio
    return clip


def _run(model: BasicPitch, audio: np.ndarray) -> dict[str, np.ndarray]:
    with torch.inference_mode():
        out = model(torch.from_numpy(audio).reshape(-1, WINDOW))
    return {name: getattr(out, name).numpy() for name in ("note", "onset", "contour")}


def test_matches_the_stored_onnx_activations(model: BasicPitch, clip: np.ndarray) -> None:
    reference = np.load(NOTES / "reference.npz")
    ours = _run(model, clip)
    for name, width in (("note", 88), ("onset", 88), ("contour", 264)):
        assert ours[name].shape == (1, FRAMES, width)
        np.testing.assert_allclose(ours[name][0], reference[name], rtol=0, atol=1e-4)
    # The clip has notes: the comparison is not between two near-zero maps.
    assert reference["note"].max() > 0.5 and reference["onset"].max() > 0.5


def test_the_vendored_onnx_file_is_basic_pitchs() -> None:
    digest = hashlib.sha256((NOTES / "nmp.onnx").read_bytes()).hexdigest()
    assert digest == "2c3c1d144bfa61ad236e92e169c13535c880469a12a047d4e73451f2c059a0ec"


def test_matches_onnxruntime_live(model: BasicPitch, clip: np.ndarray) -> None:
    """basic-pitch's own nmp.onnx (vendored unchanged) under onnxruntime, where it is installed:
    on the clip and on a louder, noisier copy, batched."""
    onnxruntime = pytest.importorskip("onnxruntime")
    path = Path(os.environ.get("ARENGINE_BASIC_PITCH_ONNX", NOTES / "nmp.onnx"))
    rng = np.random.default_rng(3)
    noisy = (clip * 2 + 0.02 * rng.standard_normal(WINDOW)).astype(np.float32)
    batch = np.stack([clip, noisy])
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    theirs = session.run(
        ["StatefulPartitionedCall:1", "StatefulPartitionedCall:2", "StatefulPartitionedCall:0"],
        {"serving_default_input_2:0": batch[:, :, None]},
    )
    ours = _run(model, batch)
    for name, expected in zip(("note", "onset", "contour"), theirs, strict=True):
        _assert_same_within_float32(ours[name], expected)


TOLERANCE = 5e-4
"""Two float32 runs of a 12-layer network that sum in different orders: onnxruntime 1.32.0 was
off by up to 1.12e-4 (a 1e-4 gate failed every time), 5.5e-6 on average. The gate allows 4x that
maximum, asks the mean to stay at float32's level, and every decision at the tagger's thresholds
to agree wherever a value is farther than the tolerance from the threshold."""


def _assert_same_within_float32(ours: np.ndarray, theirs: np.ndarray) -> None:
    difference = np.abs(ours - theirs)
    assert difference.max() <= TOLERANCE, difference.max()
    assert difference.mean() <= 2e-5, difference.mean()
    for threshold in (0.35, 0.5, 0.8):
        clear = np.abs(theirs - threshold) > TOLERANCE
        assert np.array_equal((ours >= threshold)[clear], (theirs >= threshold)[clear])


def test_windows_are_independent_in_a_batch(model: BasicPitch, clip: np.ndarray) -> None:
    """Each window is normalised on its own, so batching never changes a window's output."""
    alone = _run(model, clip)
    quiet = (0.01 * clip[::-1]).copy()
    batched = _run(model, np.stack([quiet, clip]))
    for name in alone:
        np.testing.assert_allclose(batched[name][1], alone[name][0], rtol=0, atol=1e-4)


def _direct(model: BasicPitch, audio: torch.Tensor) -> Activations:
    """The network as the ONNX graph computes it: every convolution direct, over the stack."""
    weights = {name: getattr(model, name.replace(".", "_")).contiguous() for name in SHAPES}

    def conv(
        x: torch.Tensor, layer: str, padding: tuple[int, int], stride: int = 1
    ) -> torch.Tensor:
        w, b = weights[f"{layer}.weight"], weights[f"{layer}.bias"]
        return functional.conv2d(x, w, b, stride=(1, stride), padding=padding)

    stack = model.harmonic_stack(model.log_cqt(audio)).contiguous()
    contour = torch.sigmoid(conv(torch.relu(conv(stack, "contour1", (1, 19))), "contour2", (2, 2)))
    note = torch.sigmoid(conv(torch.relu(conv(contour, "note1", (3, 2), 3)), "note2", (3, 1)))
    onset = torch.cat([note, torch.relu(conv(stack, "onset1", (2, 1), 3))], dim=1)
    onset = torch.sigmoid(conv(onset, "onset2", (1, 1)))
    return Activations(note[:, 0], onset[:, 0], contour[:, 0])


def test_the_rearranged_convolutions_equal_the_direct_ones(
    model: BasicPitch, clip: np.ndarray
) -> None:
    """The contour convolution by FFT over the CQT (its edge bins corrected) and the one-channel
    convolutions by kernel rows give the direct convolutions' activations, far inside the 1e-4
    gate: on the clip, a loud noisy copy, and noise alone (every CQT bin busy, edges included)."""
    rng = np.random.default_rng(5)
    noise = rng.standard_normal(WINDOW).astype(np.float32)
    batch = torch.from_numpy(np.stack([clip, 3 * clip + 0.05 * noise, 0.3 * noise]))
    with torch.inference_mode():
        ours, direct = model(batch), _direct(model, batch)
    for name in ("note", "onset", "contour"):
        np.testing.assert_allclose(getattr(ours, name), getattr(direct, name), rtol=0, atol=1e-5)


@pytest.mark.parametrize("edge", [1, 3, 9, 15, 30])
def test_frames_left_out_are_cut_from_the_full_output(
    model: BasicPitch, clip: np.ndarray, edge: int
) -> None:
    """Not computing the edge frames (nor the hidden frames only they need) leaves the others
    as they are: at 1 and 3 some layers still reach the window's zero padding, from 9 none."""
    batch = torch.from_numpy(np.stack([clip, 0.1 * clip[::-1]]))
    with torch.inference_mode():
        full, cut = model(batch), model(batch, edge=edge)
    for name in ("note", "onset", "contour"):
        kept = getattr(full, name)[:, edge : FRAMES - edge]
        np.testing.assert_allclose(getattr(cut, name), kept, rtol=0, atol=1e-6)


def test_rejects_an_edge_that_leaves_no_frame(model: BasicPitch) -> None:
    with pytest.raises(ValueError, match=r"edge must be 0 \.\. 85 frames, not 86"):
        model(torch.zeros(1, WINDOW), edge=86)


def test_silence_gives_no_activity(model: BasicPitch) -> None:
    out = _run(model, np.zeros(WINDOW, np.float32))
    assert out["note"].max() < 0.3 and out["onset"].max() < 0.5


def test_threads_share_the_model(model: BasicPitch, clip: np.ndarray) -> None:
    """One module called from 4 threads at once gives each thread the serial result."""
    inputs = [np.roll(clip, 5000 * i) for i in range(4)]
    serial = [_run(model, audio)["note"] for audio in inputs]
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        for _ in range(3):
            results[i] = _run(model, inputs[i])["note"]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i in range(4):
        np.testing.assert_allclose(results[i], serial[i], rtol=0, atol=1e-6)


def test_rejects_a_weights_file_with_a_wrong_shape(tmp_path: Path) -> None:
    state = torch.load(NOTES / "nmp.pt", weights_only=True)
    state["note2.weight"] = torch.zeros(1, 32, 7, 5)
    torch.save(state, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match=r"note2.weight has shape \(1, 32, 7, 5\), expected"):
        BasicPitch.load(tmp_path / "bad.pt")
    del state["note2.weight"]
    torch.save(state, tmp_path / "short.pt")
    with pytest.raises(ValueError, match=r"lacks note2\.weight"):
        BasicPitch.load(tmp_path / "short.pt")
