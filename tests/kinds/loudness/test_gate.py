"""A loudness model as a gate (`arengine/kinds/loudness/gate.py`): which segments it skips, read
from each segment alone, and the silence scores that stand in for them."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from arengine.audio.segments import Segment, SegmentPlan
from arengine.kinds.base import Overrides, Recognizer
from arengine.kinds.loudness.gate import LoudnessGate, loud, threshold_dbfs
from arengine.kinds.loudness.recognizer import LoudnessRecognizer
from arengine.kinds.loudness.tagger import LoudnessParams
from arengine.postprocess import Tagger
from tests.kinds.loudness.room import RATE, noise

SEGMENT = RATE  # one second


class Counting(Recognizer):
    """Scores each frame with the segment's peak (plus its first frame when `positional`);
    counts its inferences."""

    kind = "counting"

    def __init__(self, rate: int = RATE) -> None:
        self.name = "counting"
        self.sample_rate = rate
        self.labels = ("x",)
        self.plan = SegmentPlan(hop=rate // 10, context=0, segment_frames=10, preroll_frames=0)
        self.inferred: list[int] = []

    def features(self, segment: Segment) -> torch.Tensor:
        return torch.from_numpy(segment.samples)

    def infer(self, features: torch.Tensor, segment: Segment) -> np.ndarray:
        self.inferred.append(segment.index)
        peak = float(features.abs().max()) if len(features) else 0.0
        where = segment.first_frame if self.positional else 0
        return np.full(segment.frames, peak + where, np.float32)

    def tagger(self, overrides: Overrides) -> Tagger:
        raise NotImplementedError

    def warm_up(self) -> None:
        pass


class Positional(Counting):
    """`Counting` whose scores also say where the segment is."""

    positional = True


def _segment(index: int, samples: np.ndarray) -> Segment:
    return Segment(index, index * 10, 0, 10, samples.astype(np.float32))


def _gate(params: LoudnessParams | None = None) -> LoudnessRecognizer:
    return LoudnessRecognizer(RATE, 30, params=params)


def test_the_threshold_is_the_lowest_level_the_trigger_could_call_loud() -> None:
    assert threshold_dbfs(_gate()) == -55.0  # the floor -70 plus rise_db 15
    params = LoudnessParams(rise_db=30, background_floor_dbfs=-50)
    assert threshold_dbfs(_gate(params)) == -20.0
    absolute = LoudnessParams(absolute_dbfs=-40, rise_db=60)
    assert threshold_dbfs(_gate(absolute)) == -40.0, "an absolute level under floor + rise"


@pytest.mark.parametrize(
    ("dbfs", "expected"), [(-80.0, False), (-60.0, False), (-50.0, True), (-20.0, True)]
)
def test_a_segment_is_loud_when_a_window_reaches_the_threshold(dbfs: float, expected: bool) -> None:
    assert loud(noise(1.0, dbfs), 800, -55.0) is expected


def test_one_loud_window_anywhere_makes_the_segment_loud() -> None:
    quiet = noise(1.0, -80)
    quiet[-800:] = noise(0.05, -30)
    assert loud(quiet, 800, -55.0)
    assert not loud(np.zeros(0, np.float32), 800, -55.0)
    assert loud(noise(0.01, -30), 800, -55.0), "shorter than a window: read as one"


def test_a_loud_segment_is_inferred_a_quiet_one_stands_in_as_silence() -> None:
    model = Counting()
    gate = LoudnessGate(_gate(), [model])
    assert gate.stand_in(0, _segment(0, noise(1.0, -30))) is None
    quiet = gate.stand_in(0, _segment(3, noise(1.0, -65)))
    assert quiet is not None
    assert quiet.tolist() == [0.0] * 10, "its scores for zeros (a shape's, made once)"
    assert model.inferred == [3]


def test_silence_is_inferred_once_per_shape_and_each_caller_gets_its_own_copy() -> None:
    model = Counting()
    gate = LoudnessGate(_gate(), [model])
    first = gate.stand_in(0, _segment(1, noise(1.0, -80)))
    again = gate.stand_in(0, _segment(2, noise(1.0, -80, seed=5)))
    assert first is not None and again is not None
    first[:] = 99
    assert again.tolist() == [0.0] * 10
    assert model.inferred == [1], "the second segment of that shape reused the first's"
    shorter = gate.stand_in(0, _segment(4, noise(0.5, -80)))
    assert shorter is not None and model.inferred == [1, 4], "a new shape: inferred once"


def test_a_positional_model_gets_the_silence_of_each_segment_where_it_is() -> None:
    model = Positional()
    gate = LoudnessGate(_gate(), [model])
    scores = [gate.stand_in(0, _segment(i, noise(1.0, -80))) for i in (1, 2)]
    assert [s.tolist()[0] for s in scores if s is not None] == [10.0, 20.0]
    assert model.inferred == [1, 2]


def test_the_window_is_the_gates_length_at_each_models_rate() -> None:
    """A 50-ms burst at 8 kHz is one whole window of the model's rate: loud for both."""
    slow, fast = Counting(rate=8000), Counting()
    gate = LoudnessGate(_gate(), [slow, fast])
    burst = np.zeros(8000, np.float32)
    burst[4000:4400] = 0.1
    assert gate.stand_in(0, _segment(0, burst)) is None
    assert gate.stand_in(1, _segment(0, np.repeat(burst, 2))) is None
    assert gate._windows == (400, 800)


@dataclass
class _Decisions:
    model: Counting = field(default_factory=Counting)

    def run(self, order: list[int], segments: list[Segment]) -> dict[int, bool]:
        gate = LoudnessGate(_gate(), [self.model])
        with ThreadPoolExecutor(4) as pool:
            answers = pool.map(lambda i: (i, gate.stand_in(0, segments[i]) is None), order)
            return dict(answers)


def test_the_decisions_do_not_depend_on_the_order_segments_come_in() -> None:
    levels = [-80, -30, -65, -54, -56, -20, -90, -40]
    segments = [_segment(i, noise(1.0, level, seed=i)) for i, level in enumerate(levels)]
    forward = _Decisions().run(list(range(len(levels))), segments)
    shuffled = list(range(len(levels)))
    random.Random(3).shuffle(shuffled)
    assert _Decisions().run(shuffled, segments) == forward
    assert [forward[i] for i in range(len(levels))] == [level >= -55 for level in levels]
