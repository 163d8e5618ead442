"""Loudness tags: the trigger over a running background, alone and through the recognizer."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from arengine.audio.segments import Segmenter
from arengine.errors import InvalidInput
from arengine.kinds.loudness.fields import LEVEL_DBFS
from arengine.kinds.loudness.level import levels_dbfs
from arengine.kinds.loudness.recognizer import LoudnessRecognizer
from arengine.kinds.loudness.tagger import LoudnessParams, LoudnessTagger
from arengine.types import Tag
from tests.kinds.loudness.room import ALARM, RATE, SLAM, WINDOW, burst, noise, quiet_room


def _recognize(
    audio: np.ndarray, segment_s: float = 30.0, block: int = 16000, **overrides: float
) -> list[Tag]:
    recognizer = LoudnessRecognizer(RATE, segment_s=segment_s)
    tagger = recognizer.tagger(overrides)
    blocks = (audio[i : i + block] for i in range(0, len(audio), block))
    segmenter = Segmenter(blocks, recognizer.plan)
    tags: list[Tag] = []
    for segment in segmenter:
        tags += tagger.push(recognizer.infer(recognizer.features(segment), segment))
    assert segmenter.total_samples == len(audio)
    return tags + tagger.finish(len(audio))


def _bounds(tags: list[Tag]) -> list[tuple[float, float]]:
    return [(round(tag.start, 6), round(tag.end, 6)) for tag in tags]


@pytest.mark.parametrize(("segment_s", "block"), [(30.0, 16000), (0.5, 1234), (2.35, 4096)])
def test_a_door_slam_and_an_alarm_in_a_quiet_room_are_tagged_at_their_bounds(
    segment_s: float, block: int
) -> None:
    """The same tags whatever the cuts: 0.5-s segments are what a live stream gets."""
    tags = _recognize(quiet_room(), segment_s, block)
    assert _bounds(tags) == [SLAM, ALARM]
    assert {tag.label for tag in tags} == {"loud"}
    slam, alarm = tags
    # The score is the peak window level as a fraction of full scale.
    slam_peak = levels_dbfs(quiet_room()[round(SLAM[0] * RATE) :], WINDOW)[0]
    assert 20 * math.log10(slam.score) == pytest.approx(slam_peak, abs=1e-4)
    assert 20 * math.log10(alarm.score) == pytest.approx(-23.0, abs=0.2)  # 0.1 sine beeps
    # The tag also says that peak in dBFS, its own field (`loudness/fields.py`), to 0.01 dB.
    assert LEVEL_DBFS.at(slam) == round(slam_peak, 2)
    assert LEVEL_DBFS.at(alarm) == pytest.approx(20 * math.log10(alarm.score), abs=0.005)


def test_a_level_over_full_scale_is_said_as_full_scale() -> None:
    """A float file may hold samples over 1.0: the level stops at 0 dBFS, as the score at 1, so
    the field keeps to its declared bounds (`POST /v1/render` refuses more)."""
    tagger = LoudnessTagger(LoudnessParams(), sample_rate=RATE, hop=WINDOW)
    levels = np.concatenate([np.full(100, -60.0), np.full(10, 6.0), np.full(100, -60.0)])
    [tag] = tagger.push(levels) + tagger.finish(len(levels) * WINDOW)
    assert (tag.score, LEVEL_DBFS.at(tag)) == (1.0, 0.0)


def test_without_hold_the_alarm_is_a_tag_per_beep() -> None:
    tags = _recognize(quiet_room(), hold_ms=0)
    beeps = [(on, on + 0.25) for on in np.arange(ALARM[0], ALARM[1], 0.5)]
    assert _bounds(tags) == [SLAM, *beeps]


def test_hold_bridges_gaps_up_to_its_length_only() -> None:
    room = noise(6.0, -60)
    twice = burst(burst(room, 1.0, 0.5, -20), 1.8, 0.5, -20)  # 0.3 s apart
    assert _bounds(_recognize(twice, hold_ms=300)) == [(1.0, 2.3)]
    assert _bounds(_recognize(twice, hold_ms=250)) == [(1.0, 1.5), (1.8, 2.3)]


def test_a_background_that_rises_slowly_gives_no_tag() -> None:
    """From -60 to -40 dBFS over two minutes: the background follows. The same rise within a
    second (the control) is loud."""
    seconds = 150
    ramp = np.interp(np.arange(seconds * RATE) / RATE, [15, 135], [-60, -40])
    slow = noise(seconds, 0) * 10 ** (ramp / 20).astype(np.float32)
    assert _recognize(slow) == []
    fast = np.interp(np.arange(seconds * RATE) / RATE, [15, 16], [-60, -40])
    sudden = noise(seconds, 0) * 10 ** (fast / 20).astype(np.float32)
    tags = _recognize(sudden)
    assert tags and tags[0].start == pytest.approx(15.5, abs=0.3)


def test_a_sound_longer_than_the_background_allows_becomes_the_background() -> None:
    """The 20th percentile of 10 s: a noise that goes on for more than 8 s is the room now."""
    room = burst(noise(30.0, -60), 5.0, 20.0, -20)
    (tag,) = _recognize(room, background_s=10)
    assert tag.start == 5.0
    assert tag.end == pytest.approx(13.0, abs=0.2)


def test_min_duration_drops_short_tags() -> None:
    click = burst(noise(4.0, -60), 2.0, 0.05, -20)  # one 50-ms window
    assert _recognize(click) == []  # the default 100 ms
    assert _bounds(_recognize(click, min_duration_ms=50)) == [(2.0, 2.05)]
    long_enough = burst(noise(4.0, -60), 2.0, 0.1, -20)
    assert _bounds(_recognize(long_enough)) == [(2.0, 2.1)]


def test_an_absolute_level_tags_what_the_rise_does_not() -> None:
    """A loud room (-25 dBFS) and a sound at -15: 10 dB is under the default rise of 15."""
    room = burst(noise(20.0, -25), 12.0, 1.0, -15)
    assert _recognize(room) == []
    assert _bounds(_recognize(room, absolute_dbfs=-18)) == [(12.0, 13.0)]
    assert _bounds(_recognize(room, rise_db=8)) == [(12.0, 13.0)]
    # The absolute level alone: the room itself at -25 is loud from the start.
    assert _bounds(_recognize(room, rise_db=120, absolute_dbfs=-30)) == [(0.0, 20.0)]


def test_the_floor_keeps_a_near_silent_room_from_tagging_a_tick() -> None:
    silent = burst(noise(10.0, -100), 5.0, 0.2, -75)  # 25 dB over the room, under the floor
    assert _recognize(silent) == []
    assert _bounds(_recognize(silent, background_floor_dbfs=-95)) == [(5.0, 5.2)]


def test_a_recording_that_ends_loud_ends_its_tag_at_its_last_sample() -> None:
    audio = burst(noise(3.0, -60), 2.5, 0.5, -20)[: round(2.93 * RATE)]
    assert _bounds(_recognize(audio)) == [(2.5, 2.93)]


def _reference_backgrounds(levels: np.ndarray, width: int, step: int, rank: float) -> np.ndarray:
    """One window at a time, as the docstring says: the nearest-rank percentile of the last
    `width` levels at every multiple of `step`, held until the next."""
    out = np.empty(len(levels))
    for frame in range(len(levels)):
        point = frame // step * step
        history = np.sort(levels[max(0, point - width + 1) : point + 1])
        out[frame] = history[math.floor(rank * (len(history) - 1))]
    return out


@pytest.mark.parametrize("cuts", [[], [1, 2, 3, 50, 51, 300], list(range(7, 600, 13))])
@pytest.mark.parametrize("percentile", [0, 20, 50, 100])
def test_the_background_is_the_percentile_of_the_last_background_s(
    cuts: list[int], percentile: float
) -> None:
    """The vectorised evaluation against one written window by window, over any cut."""
    rng = np.random.default_rng(7)
    levels = rng.normal(-50, 6, 600)
    params = LoudnessParams(background_s=4.0, background_percentile=percentile)
    tagger = LoudnessTagger(params, sample_rate=RATE, hop=WINDOW)  # 80 windows, a step of 1
    tagger.step = 3  # the step a longer background would have; the rule is the same
    found = []
    for chunk in np.split(levels, cuts):
        found += tagger._backgrounds(chunk).tolist()
        tagger.seen += len(chunk)  # as `push` does
    assert found == _reference_backgrounds(levels, 80, 3, percentile / 100).tolist()


def test_an_infinite_level_keeps_its_place_in_the_history() -> None:
    """It was dropped from the history kept between pushes, which shifted every later window."""
    levels = np.random.default_rng(8).normal(-50, 6, 300)
    levels[[40, 41, 90]] = np.inf
    tagger = LoudnessTagger(LoudnessParams(background_s=4.0), sample_rate=RATE, hop=WINDOW)
    found = []
    for chunk in np.split(levels, range(10, 300, 10)):
        found += tagger._backgrounds(chunk).tolist()
        tagger.seen += len(chunk)
    assert found == _reference_backgrounds(levels, 80, 1, 0.2).tolist()


def test_a_nan_sample_makes_its_window_silent() -> None:
    audio = np.full(1600, 0.1, np.float32)
    audio[900] = np.nan
    assert levels_dbfs(audio, 800).tolist() == pytest.approx([-20, -120], abs=1e-4)


def test_tags_are_the_same_over_any_cut_of_the_levels() -> None:
    levels = levels_dbfs(quiet_room(), WINDOW)

    def tag(cuts: list[int]) -> list[Tag]:
        tagger = LoudnessTagger(LoudnessParams(), sample_rate=RATE, hop=WINDOW)
        tags: list[Tag] = []
        for chunk in np.split(levels, cuts):
            tags += tagger.push(chunk)
        return tags + tagger.finish(len(levels) * WINDOW)

    whole = tag([])
    assert len(whole) == 2
    for cuts in ([1], [100, 101, 102, 203], list(range(5, len(levels), 7))):
        assert tag(cuts) == whole


def test_the_parameters_are_bounded() -> None:
    defaults = LoudnessParams()
    with pytest.raises(InvalidInput, match="rise_db must be 0 < x <= 120"):
        defaults.with_overrides({"rise_db": 0})
    with pytest.raises(InvalidInput, match="background_s must be 1 <= x <= 600"):
        defaults.with_overrides({"background_s": 0.5})
    with pytest.raises(InvalidInput, match="absolute_dbfs must be -120 <= x <= 0"):
        dataclasses.replace(defaults, absolute_dbfs=3)
