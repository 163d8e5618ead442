"""The controls of label models: hysteresis, per-label values, filters, groups, profiles, ids.

The vocabulary is AudioSet's (the events model's class map and ontology), where names contain
commas and one class (Dog) stands above others (Bark, Howl, Whimper (dog)...).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from arengine.errors import InvalidInput
from arengine.kinds.events.fields import LABEL_ID
from arengine.kinds.events.params import EventParams
from arengine.kinds.events.recognizer import read_class_map
from arengine.models import DEFAULT_MODELS_DIR
from arengine.postprocess.labels import LabelParams, LabelTagger
from arengine.postprocess.vocabulary import Ontology, Vocabulary, split_list, split_values
from arengine.types import Tag

FOLDER = DEFAULT_MODELS_DIR / "events"
NAMES, IDS = read_class_map(FOLDER / "yamnet_class_map.csv")
AUDIOSET = Vocabulary(
    NAMES,
    IDS,
    groups={"glass": ("Glass", "Shatter")},
    profiles={"safety": {"labels": ["glass", "Screaming"], "group": ["glass"], "threshold": 0.3}},
    ontology=Ontology.read(FOLDER / "ontology.json"),
)


PLAIN = EventParams(threshold=0.5, hysteresis=0.0, merge_gap_ms=0, thresholds={})
"""The controls alone: one threshold, no hysteresis, gap or per-label value (not the events
kind's tuned defaults)."""


def _scores(frames: int, **runs: tuple[int, int, float]) -> np.ndarray:
    """Scores of zero but for runs `Name=(first, last, value)` (`Whimper_dog`: "Whimper (dog)")."""
    scores = np.zeros((frames, len(NAMES)))
    for name, (first, last, value) in runs.items():
        scores[first:last, NAMES.index(name.replace("_dog", " (dog)"))] = value
    return scores


def _tags(
    scores: np.ndarray, overrides: dict[str, float | str], chunks: list[int] | None = None
) -> list[Tag]:
    params = PLAIN.for_request(overrides, AUDIOSET)
    tagger = LabelTagger(
        NAMES, params, 100, 10, 20, ids=IDS, peak=True, vocabulary=AUDIOSET, id_field=LABEL_ID.name
    )
    tags, at = [], 0
    for size in chunks or [len(scores)]:
        tags += tagger.push(scores[at : at + size])
        at += size
    return tags + tagger.finish(len(scores) * 10 + 10)


def test_lists_split_on_semicolons_never_inside_audioset_names() -> None:
    assert split_list("Child speech, kid speaking; Inside, small room") == (
        "Child speech, kid speaking",
        "Inside, small room",
    )
    assert split_values("thresholds", "Bee, wasp, etc.:0.2;/m/09x0r:0.9") == {
        "Bee, wasp, etc.": 0.2,
        "/m/09x0r": 0.9,
    }
    with pytest.raises(InvalidInput, match=r"label:value items separated by ';'"):
        split_values("thresholds", "Glass=0.2")
    for twice in ("Glass:0.2;Glass:0.3", "Glass:0.2; glass :0.2"):
        with pytest.raises(InvalidInput, match="more than once"):
            split_values("thresholds", twice)


def test_a_tag_is_scored_by_its_peak_and_carries_the_audioset_id() -> None:
    scores = _scores(10, Glass=(2, 6, 0.6))
    scores[3, NAMES.index("Glass")] = 0.9
    (tag,) = _tags(scores, {})
    assert (tag.label, LABEL_ID.of(tag), tag.score, tag.start, tag.end) == (
        "Glass",
        "/m/039jq",
        0.9,
        0.2,
        0.7,
    )


def test_hysteresis_keeps_one_event_through_a_dip() -> None:
    scores = _scores(12, Siren=(1, 10, 0.7))
    scores[5, NAMES.index("Siren")] = 0.4  # under the threshold (0.5), over 0.5 x (1 - 0.3)
    assert len(_tags(scores, {})) == 2
    assert [(t.start, t.end) for t in _tags(scores, {"hysteresis": 0.3})] == [(0.1, 1.1)]


def test_per_label_thresholds_by_name_or_id_durations_and_gaps() -> None:
    scores = _scores(30, Speech=(0, 2, 0.6), Glass=(5, 7, 0.3))
    scores[10:12, NAMES.index("Glass")] = 0.3
    assert _tags(scores, {"thresholds": "/m/039jq:0.25"})[1].label == "Glass"
    merged = _tags(scores, {"thresholds": "Glass:0.25", "merge_gaps_ms": "Glass:300"})
    assert [(t.label, t.start, t.end) for t in merged] == [
        ("Speech", 0.0, 0.3),
        ("Glass", 0.5, 1.3),
    ]
    longer = _tags(scores, {"thresholds": "Glass:0.25", "min_durations_ms": "Speech:500"})
    assert [t.label for t in longer] == ["Glass", "Glass"]


def test_filters_take_names_ids_and_ontology_classes() -> None:
    scores = _scores(10, Speech=(0, 4, 0.9), Conversation=(0, 4, 0.9), Bark=(5, 8, 0.8))
    assert [t.label for t in _tags(scores, {"exclude": "Speech"})] == ["Bark"]
    assert [t.label for t in _tags(scores, {"labels": "Dog"})] == ["Bark"]
    assert [t.label for t in _tags(scores, {"labels": "/m/01h8n0"})] == ["Conversation"]


def test_a_group_reports_its_members_as_one_label() -> None:
    scores = _scores(12, Bark=(0, 3, 0.8), Howl=(2, 6, 0.7), Whimper_dog=(6, 8, 0.9))
    (dog,) = _tags(scores, {"group": "dog"})
    assert (dog.label, LABEL_ID.of(dog), dog.start, dog.end, dog.score) == (
        "Dog",
        "/m/0bt9lr",
        0.0,
        0.9,
        0.9,
    )
    scores = _scores(6, Glass=(0, 2, 0.6), Shatter=(1, 3, 0.7), Screaming=(0, 3, 0.2))
    assert [(t.label, t.score) for t in _tags(scores, {"group": "glass"})] == [("glass", 0.7)]


def test_a_profile_sets_values_the_query_overrides() -> None:
    scores = _scores(6, Glass=(0, 2, 0.4), Screaming=(3, 5, 0.35), Bark=(0, 5, 0.9))
    assert [t.label for t in _tags(scores, {"profile": "safety"})] == ["glass", "Screaming"]
    assert [t.label for t in _tags(scores, {"profile": "safety", "threshold": 0.38})] == ["glass"]


def test_unknown_names_and_profiles_are_refused_with_the_syntax() -> None:
    with pytest.raises(InvalidInput, match=r"unknown label 'Glass,Shatter'.*separate several"):
        _tags(_scores(2), {"labels": "Glass,Shatter"})
    with pytest.raises(InvalidInput, match="unknown profile 'x'; accepted: safety"):
        _tags(_scores(2), {"profile": "x"})
    with pytest.raises(InvalidInput, match="must be 0 <= x < 1"):
        LabelParams().with_overrides({"thresholds": "a:2"})


@pytest.mark.parametrize("seed", range(4))
def test_any_chunking_gives_the_same_events(seed: int) -> None:
    rng = np.random.default_rng(seed)
    scores = np.clip(rng.normal(0.3, 0.2, (200, len(NAMES))), 0, 1)
    overrides: dict[str, float | str] = {
        "hysteresis": 0.3,
        "group": "Dog;glass",
        "exclude": "Speech",
        "merge_gaps_ms": "Dog:30",
        "min_durations_ms": "Glass:40",
    }
    whole = _tags(scores, overrides)
    pick = random.Random(seed)
    chunks = [pick.randint(1, 30) for _ in range(200)]
    assert _tags(scores, overrides, chunks) == whole
    assert [t.start for t in whole] == sorted(t.start for t in whole)
    # One run is one tag: a label's tags start one after another, each run once.
    for label in {t.label for t in whole}:
        starts = [t.start for t in whole if t.label == label]
        assert starts == sorted(set(starts))


def test_centred_windows_time_an_event_by_their_middles() -> None:
    scores = _scores(10, Glass=(3, 6, 0.9), Bark=(0, 2, 0.9))
    params = PLAIN
    tagger = LabelTagger(NAMES, params, 100, 10, 30, ids=IDS, vocabulary=AUDIOSET, centred=True)
    tags = tagger.push(scores) + tagger.finish(100)
    # Windows of 0.3 s every 0.1 s: a run starts at its first window's centre (the recording's
    # first window keeps its start) and ends with its last window's middle 0.1 s.
    assert [(t.label, t.start, t.end) for t in tags] == [("Bark", 0.0, 0.3), ("Glass", 0.45, 0.7)]
