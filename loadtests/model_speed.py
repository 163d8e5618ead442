"""Speed of every model, and of one classifier in each weights format, on threads sharing it.

    python -m loadtests.model_speed --seconds 60

Loads the repository's models (as the server does, warm-up real-time factor included) and the
example classifier exported as `.pt`, `.pt2` and `.onnx` into a temporary folder, then runs
features and inference over `--seconds` of noise cut by each model's own segment plan, on one
thread and on every CPU, all sharing one model. Prints a Markdown table: x real time (audio
seconds per wall second) and the factor `GET /v1/models` reports (compute per audio second).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

from arengine.models.registry import DEFAULT_MODELS_DIR, LoadedModel, load_models
from arengine.models.runtimes import FORMATS
from arengine.segments import Segment, Segmenter
from arengine.threads import available_cpus


def x_real_time(loaded: LoadedModel, audio: np.ndarray, threads: int) -> float:
    recognizer = loaded.recognizer
    segments = list(Segmenter(iter([audio]), recognizer.plan))

    def work(part: list[Segment]) -> None:
        for segment in part:
            recognizer.infer(recognizer.features(segment), segment)

    workers = [threading.Thread(target=work, args=(segments[i::threads],)) for i in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return len(audio) / recognizer.sample_rate / (time.perf_counter() - started)


def example_formats(folder: Path) -> None:
    """The example classifier, trained once, exported in every format into `folder`."""
    path = DEFAULT_MODELS_DIR / "examples" / "tone_vs_noise.py"
    spec = importlib.util.spec_from_file_location("tone_vs_noise", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    sys.modules["tone_vs_noise"] = example
    spec.loader.exec_module(example)
    network = example.train(steps=50)
    for suffix in ("pt", "pt2", "onnx"):
        example.export(network, folder / suffix, f"tones-{suffix}", suffix)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    models, _ = load_models(DEFAULT_MODELS_DIR)
    with tempfile.TemporaryDirectory() as folder:
        example_formats(Path(folder))
        examples, failures = load_models(Path(folder))
        assert not failures, failures
    models |= examples
    cpus = available_cpus()
    header = f"x real time, 1 thread | x real time, {cpus} threads | warm-up RTF"
    print(f"| model | weights | {header} |")
    print("|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for name, loaded in sorted(models.items()):
        rate = loaded.recognizer.sample_rate
        audio = (0.1 * rng.standard_normal(int(args.seconds * rate))).astype(np.float32)
        one = x_real_time(loaded, audio, 1)
        many = x_real_time(loaded, audio, cpus)
        weights = FORMATS.get(loaded.manifest.weights.suffix, loaded.manifest.weights.name)
        print(f"| {name} | {weights} | {one:.1f} | {many:.1f} | {loaded.real_time_factor:.4f} |")


if __name__ == "__main__":
    main()
