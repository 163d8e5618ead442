"""atheris fuzz target for the probe and decode path: any bytes give audio or an ArengineError.

Briefly in the test suite (tests/test_fuzz.py); longer by hand, with a corpus folder:

    .venv/bin/python tests/fuzz/decode_target.py -runs=200000 -max_len=65536 /tmp/corpus

A crash (any other exception, a hang, or a signal) is a bug: add the input as a regression test.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from pathlib import Path

import atheris

# Only the code under test is instrumented: the probe and decode path and the Python halves of
# its decoders. Instrumenting everything it imports (pydantic, httpx, numpy) took over a minute
# and 2 GB before the first input, for coverage feedback from code no input reaches.
with atheris.instrument_imports(include=["arengine.audio", "soundfile", "av"]):
    from arengine.audio.decode import decode
    from arengine.audio.segments import Segmenter, SegmentPlan
    from arengine.audio.validation import AudioLimits, probe
    from arengine.errors import ArengineError

LIMITS = AudioLimits(
    max_duration_s=60, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
)
PLAN = SegmentPlan(hop=512, context=64, segment_frames=64, preroll_frames=8)


@functools.cache
def scratch() -> Path:
    """Where each input is written to be probed: the suite's folder (`ARENGINE_FUZZ_SCRATCH`),
    else one made at the first input. Not at import: the suite's collection imports this module
    in every worker, and libFuzzer ends the process without Python's clean-up."""
    given = os.environ.get("ARENGINE_FUZZ_SCRATCH")
    return Path(given) if given else Path(tempfile.mkdtemp(prefix="arengine-fuzz-"))


def test_one_input(data: bytes) -> None:
    path = scratch() / "input"
    path.write_bytes(data)
    try:
        info = probe(path, LIMITS)
        max_frames = int(LIMITS.max_duration_s * info.sample_rate)
        for segment in Segmenter(decode(path, info, 16000, max_frames), PLAN):
            assert segment.samples.dtype.name == "float32"
    except ArengineError:
        pass


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
