"""Regenerate `nmp.pt` (and the reference activations) from basic-pitch's ONNX model.

Run once, in a throwaway environment, never at run time:

    python3 -m venv /tmp/convert-venv
    /tmp/convert-venv/bin/pip install torch==2.13.0 onnx onnxruntime soundfile \
        librosa "resampy<0.4.3" "setuptools<70" pretty_midi scipy scikit-learn
    pip download basic-pitch==0.4.0 --no-deps -d /tmp/bp && unzip /tmp/bp/*.whl -d /tmp/bp/whl
    /tmp/convert-venv/bin/pip install --no-deps /tmp/bp/basic_pitch-0.4.0-py2.py3-none-any.whl
    /tmp/convert-venv/bin/python models/notes/convert_basic_pitch.py \
        /tmp/bp/whl/basic_pitch/saved_models/icassp_2022/nmp.onnx

It checks the ONNX file's sha256, copies its initializers into a torch state dict (`nmp.pt`,
names as `arengine.kinds.notes.network.SHAPES`), and writes `reference.npz`: the original model's
note, onset and contour activations under onnxruntime for `reference.flac` (a FluidR3 rendering,
one 43,844-sample window), and basic-pitch's own note events for those activations;
`tests/kinds/notes/test_network.py` and `tests/postprocess/test_polyphonic.py` compare against them.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import onnx
import soundfile as sf
import torch
from onnx import numpy_helper

HERE = Path(__file__).resolve().parent
SHA256 = "2c3c1d144bfa61ad236e92e169c13535c880469a12a047d4e73451f2c059a0ec"
"""nmp.onnx of basic-pitch 0.4.0 (basic_pitch/saved_models/icassp_2022/nmp.onnx)."""

# Our name: (ONNX initializer, or the start of its name), as read from the graph: the CQT
# kernel convolved without a following `Neg` is the real part; the BN-folded convolutions are
# named after the Keras layers whose bias they carry.
SOURCES = {
    "cqt_real": "const_fold_opt__655",
    "cqt_imag": "const_fold_opt__664",
    "lowpass": "const_fold_opt__734",
    "cqt_scale": "model_1/cq_t2010v2_1/Sqrt;",
    "contour1.weight": "const_fold_opt__727",
    "contour1.bias": "model_1/re_lu_1/Relu;",
    "contour2.weight": "const_fold_opt__710",
    "contour2.bias": "model_1/contours-reduced/BiasAdd/ReadVariableOp;",
    "note1.weight": "const_fold_opt__738",
    "note1.bias": "model_1/conv2d_2/BiasAdd/ReadVariableOp;",
    "note2.weight": "const_fold_opt__702",
    "note2.bias": "model_1/conv2d_3/BiasAdd/ReadVariableOp;",
    "onset1.weight": "const_fold_opt__707",
    "onset1.bias": "model_1/re_lu_3/Relu;",
    "onset2.weight": "const_fold_opt__680",
    "onset2.bias": "model_1/conv2d_5/BiasAdd/ReadVariableOp;",
}
_BN_SCALE = (
    "model_1/batch_normalization/FusedBatchNormV3;model_1/batch_normalization/FusedBatchNormV3"
)
_BN_SHIFT = _BN_SCALE + "1"
_SHAPES = {
    "cqt_real": (36, 1, 256),
    "cqt_imag": (36, 1, 256),
    "lowpass": (1, 1, 256),
    "cqt_scale": (309,),
}


def weights(model: onnx.ModelProto) -> dict[str, torch.Tensor]:
    arrays = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def find(prefix: str) -> np.ndarray:
        matches = [name for name in arrays if name == prefix or name.startswith(prefix)]
        if len(matches) != 1:
            raise SystemExit(f"{prefix!r} matches {len(matches)} initializers")
        found: np.ndarray = arrays[matches[0]]
        return found

    state = {}
    for ours, theirs in SOURCES.items():
        array = find(theirs).astype(np.float32)
        state[ours] = torch.from_numpy(array.reshape(_SHAPES.get(ours, array.shape)).copy())
    state["norm"] = torch.tensor(
        [float(arrays[_BN_SCALE].item()), float(arrays[_BN_SHIFT].item())], dtype=torch.float32
    )
    return state


def reference(onnx_path: Path) -> dict[str, np.ndarray]:
    import onnxruntime

    audio, rate = sf.read(HERE / "reference.flac", dtype="float32")
    if rate != 22050 or audio.shape != (43844,):
        raise SystemExit(f"reference.flac must be 43844 mono samples at 22050 Hz: {audio.shape}")
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    note, onset, contour = session.run(
        ["StatefulPartitionedCall:1", "StatefulPartitionedCall:2", "StatefulPartitionedCall:0"],
        {"serving_default_input_2:0": audio.reshape(1, -1, 1)},
    )
    activations = {"note": note[0], "onset": onset[0], "contour": contour[0]}
    return activations | events(activations)


def events(activations: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """basic-pitch's own note creation on those activations (with and without the melodia trick,
    its `predict()` thresholds), where the `basic-pitch` package is importable (`--no-deps`)."""
    try:
        from basic_pitch.note_creation import output_to_notes_polyphonic
    except ImportError:
        print("basic_pitch is not importable: reference.npz gets no note events")
        return {}
    out = {}
    for melodia in (0, 1):
        notes = output_to_notes_polyphonic(
            activations["note"].copy(),
            activations["onset"].copy(),
            onset_thresh=0.5,
            frame_thresh=0.3,
            min_note_len=11,
            infer_onsets=True,
            max_freq=None,
            min_freq=None,
            melodia_trick=bool(melodia),
        )
        out[f"events_melodia{melodia}"] = np.array(
            [(s, e, p - 21, a) for s, e, p, a in notes], dtype=np.float64
        ).reshape(-1, 4)
    return out


def main() -> None:
    onnx_path = Path(sys.argv[1])
    digest = hashlib.sha256(onnx_path.read_bytes()).hexdigest()
    if digest != SHA256:
        raise SystemExit(f"{onnx_path} has sha256 {digest}, expected basic-pitch 0.4.0's {SHA256}")
    torch.save(weights(onnx.load(str(onnx_path))), HERE / "nmp.pt")
    np.savez_compressed(HERE / "reference.npz", allow_pickle=False, **reference(onnx_path))
    print(f"wrote {HERE / 'nmp.pt'} and {HERE / 'reference.npz'}")


if __name__ == "__main__":
    main()
