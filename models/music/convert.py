"""Convert musicnn's MTT_musicnn TF1 checkpoint to `musicnn_mtt.pth`, and record reference outputs.

Run once, in a throwaway environment (TensorFlow is never a dependency of arengine):

    python3 -m venv /tmp/tf-venv
    /tmp/tf-venv/bin/pip install tensorflow-cpu tf_keras librosa soundfile torch==2.13.0
    pip download musicnn==0.1.0 --no-deps -d /tmp/musicnn
    unzip /tmp/musicnn/*.whl -d /tmp/musicnn
    TF_USE_LEGACY_KERAS=1 PYTHONPATH=/tmp/musicnn:. /tmp/tf-venv/bin/python \\
        models/music/convert.py /tmp/musicnn/musicnn models/music

It writes, into the output folder:
- `musicnn_mtt.pth`: the checkpoint's variables as a torch state dict for
  `arengine.kinds.music.network` (tensors re-laid out from TensorFlow's `(time, freq, in, out)`
  kernels);
- `reference.npz`: for `reference.flac`, musicnn's own input patches (librosa log-mel, float16)
  and the taggram of musicnn's own TF graph (`models.define_model`, restored from the checkpoint),
  which `tests/test_music.py` compares with the torch network.

musicnn 0.1.0 (ISC) pins numpy < 1.17, so it is unpacked rather than installed; its `models.py`
needs `tf.compat.v1.layers`, which TensorFlow 2.16+ keeps only with tf_keras
(`TF_USE_LEGACY_KERAS=1`). librosa >= 0.10 pads centred frames with zeros, as arengine does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

CHECKPOINT = "MTT_musicnn/"
"""The checkpoint prefix: its files are `MTT_musicnn/.index` and `.data-00000-of-00001`."""
FRONT = ["conv2d", "conv2d_1", "conv2d_2", "conv2d_3", "conv2d_4"]


def _bn(reader: Any, tf_name: str, ours: str) -> dict[str, np.ndarray]:
    return {
        f"{ours}.weight": reader.get_tensor(f"{tf_name}/gamma"),
        f"{ours}.bias": reader.get_tensor(f"{tf_name}/beta"),
        f"{ours}.running_mean": reader.get_tensor(f"{tf_name}/moving_mean"),
        f"{ours}.running_var": reader.get_tensor(f"{tf_name}/moving_variance"),
    }


def state_dict(reader: Any) -> dict[str, np.ndarray]:
    """The torch names of `arengine.kinds.music.recognizer.Musicnn` -> arrays laid out for torch.

    Variables are named by creation order in musicnn's `build_musicnn`: the input batch norm,
    then each front-end conv and its batch norm, the three mid-end ones, and the back end.
    """
    state = _bn(reader, "batch_normalization", "input_norm")
    for i, name in enumerate(FRONT):
        kernel = reader.get_tensor(f"{name}/kernel")  # (time, freq, 1, filters)
        state[f"front.{i}.weight"] = kernel.transpose(3, 2, 0, 1)
        state[f"front.{i}.bias"] = reader.get_tensor(f"{name}/bias")
        state |= _bn(reader, f"batch_normalization_{i + 1}", f"front_norms.{i}")
    for i in range(3):
        kernel = reader.get_tensor(f"conv2d_{i + 5}/kernel")  # (7, channels, 1, 64)
        state[f"mid.{i}.weight"] = kernel[:, :, 0, :].transpose(2, 1, 0)
        state[f"mid.{i}.bias"] = reader.get_tensor(f"conv2d_{i + 5}/bias")
        state |= _bn(reader, f"batch_normalization_{i + 6}", f"mid_norms.{i}")
    state |= _bn(reader, "batch_normalization_9", "pool_norm")
    state["dense.weight"] = reader.get_tensor("dense/kernel").T
    state["dense.bias"] = reader.get_tensor("dense/bias")
    state |= _bn(reader, "batch_normalization_10", "dense_norm")
    state["out.weight"] = reader.get_tensor("dense_1/kernel").T
    state["out.bias"] = reader.get_tensor("dense_1/bias")
    return {key: np.ascontiguousarray(value, dtype=np.float32) for key, value in state.items()}


def reference(package: Path, clip: Path) -> tuple[np.ndarray, np.ndarray]:
    """musicnn's own input patches for `clip` and its own graph's taggram (sigmoid outputs)."""
    import tensorflow as tf
    from musicnn import configuration as config
    from musicnn import models
    from musicnn.extractor import batch_data

    tf.compat.v1.disable_eager_execution()
    batch, _ = batch_data(str(clip), 187, 187)  # 3-s patches, no overlap: musicnn's defaults
    tf.compat.v1.reset_default_graph()
    x = tf.compat.v1.placeholder(tf.float32, [None, 187, config.N_MELS])
    is_training = tf.compat.v1.placeholder(tf.bool)
    logits = models.define_model(x, is_training, "MTT_musicnn", 50)[0]
    with tf.compat.v1.Session() as session:
        # No try/except here (musicnn's extractor swallows a failed restore).
        tf.compat.v1.train.Saver().restore(session, f"{package}/{CHECKPOINT}")
        taggram = session.run(tf.nn.sigmoid(logits), {x: batch, is_training: False})
    return batch, taggram


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package", type=Path, help="the unpacked musicnn package folder")
    parser.add_argument("out", type=Path, help="models/music")
    args = parser.parse_args()
    sys.path.insert(0, str(args.package.parent))
    import tensorflow as tf
    import torch

    reader = tf.compat.v1.train.NewCheckpointReader(f"{args.package}/{CHECKPOINT}")
    state = {key: torch.from_numpy(value) for key, value in state_dict(reader).items()}
    torch.save(state, args.out / "musicnn_mtt.pth")
    batch, taggram = reference(args.package, args.out / "reference.flac")
    np.savez_compressed(args.out / "reference.npz", patches=batch, taggram=taggram)
    print(f"wrote {len(state)} tensors; reference taggram {taggram.shape}")


if __name__ == "__main__":
    main()
