"""The fingerprint tagger on rows of matches: one tag per occurrence, whatever the pushes."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from arengine.kinds.fingerprint.fields import REFERENCE, REFERENCE_END, REFERENCE_START, SPEED
from arengine.kinds.fingerprint.library import Reference
from arengine.kinds.fingerprint.tagger import (
    END,
    FACTOR,
    HASH,
    PEAK,
    WEAK,
    FingerprintParams,
    FingerprintTagger,
)
from arengine.types import Tag

RATE, HOP = 11025, 256
FRAME_S = HOP / RATE
LIBRARY = {
    1: Reference(1, "ident", 20.0, {}, 0.0, 20.0),
    2: Reference(2, "promo", 20.0, {}, 0.0, 20.0),
    3: Reference(3, "held", 20.0, {}, 1.0, 18.0),  # a silent first second, a held last note
}


def _match(reference: int, difference: int, frame: int, reach: int) -> list[int]:
    """A match of the reference's frame `frame - difference`, at its own speed and pitch."""
    return [reference, frame - difference, frame, reach, FACTOR, FACTOR]


def _occurrence(reference: int, at: int, ref_first: int, frames: int) -> np.ndarray:
    """A match every 4th frame of `frames` from recording frame `at`, reference frame
    `ref_first`, and one hash of the recording at every frame."""
    rows = [_match(reference, at - ref_first, f, f + 10) for f in range(at, at + frames, 4)]
    rows += [[HASH, 0, f, f, 0, 0] for f in range(at, at + frames)]
    return np.array(rows, dtype=np.int64)


def _tags(
    rows: np.ndarray, pushes: int, anchors: Callable[[int, float], np.ndarray] | None = None,
    **params: float,
) -> list[Tag]:  # fmt: skip
    tagger = FingerprintTagger(FingerprintParams(**params), LIBRARY.get, RATE, HOP, anchors)  # type: ignore[arg-type]
    rows = rows[np.argsort(rows[:, 2], kind="stable")]
    tags: list[Tag] = []
    for part in np.array_split(rows, pushes):
        end = np.array([[END, 0, int(part[-1, 2]), int(part[-1, 2]), 0, 0]]) if len(part) else part
        tags += tagger.push(np.concatenate([part, end]))
    return tags + tagger.finish(0)


def test_one_occurrence_is_one_tag_however_it_is_pushed() -> None:
    rows = _occurrence(1, 1000, 200, 400)
    tags = [_tags(rows, pushes) for pushes in (1, 3, 17)]
    assert tags[0] == tags[1] == tags[2]
    [tag] = tags[0]
    assert (tag.label, REFERENCE.of(tag)) == ("ident", "1")
    assert abs(tag.start - 1000 * FRAME_S) < 0.01
    assert abs(REFERENCE_START.at(tag) - 200 * FRAME_S) < 0.01
    assert abs(tag.score - 0.25) < 0.01  # every 4th hash matched


def test_repeats_and_back_to_back_references_stay_apart() -> None:
    rows = np.concatenate(
        [
            _occurrence(1, 100, 0, 300),
            _occurrence(2, 400, 0, 300),  # straight after
            _occurrence(1, 700, 0, 300),  # the first again
        ]
    )
    tags = _tags(rows, 5)
    assert [(t.label, round(t.start / FRAME_S)) for t in tags] == [
        ("ident", 100),
        ("promo", 400),
        ("ident", 700),
    ]


def test_too_few_matches_and_removed_references_give_no_tag() -> None:
    assert _tags(_occurrence(1, 100, 0, 40), 1) == []  # 10 matches, 30 needed
    assert _tags(_occurrence(1, 100, 0, 40), 1, min_hits=5) != []
    assert _tags(_occurrence(4, 100, 0, 400), 2) == []  # not in the library (removed)


def test_a_repeat_inside_the_reference_is_not_a_second_occurrence() -> None:
    """A chorus: the same recording stretch also matches the reference 100 frames later,
    more weakly (every 8th frame); only the true alignment is reported."""
    true = _occurrence(1, 1000, 0, 400)
    echo = np.array([_match(1, 1000 - 100, f, f + 10) for f in range(1100, 1300, 8)])
    [tag] = _tags(np.concatenate([true, echo]), 4)
    assert REFERENCE_START.of(tag) == 0.0


def test_an_occurrence_that_starts_near_the_reference_start_is_extended_to_it() -> None:
    """The first match 0.3 s after the reference's start: the tag starts where it does."""
    [tag] = _tags(_occurrence(1, 1000, 13, 400), 1)
    assert REFERENCE_START.of(tag) == 0.0
    assert abs(tag.start - (1000 - 13) * FRAME_S) < 0.01


def test_an_occurrence_matched_to_the_last_landmark_plays_to_the_reference_end() -> None:
    """Nothing to match after the last peak (a held note): the tag ends where the reference
    does; one that stops 1.5 s before the last landmark is an excerpt and ends where it stops."""
    first, last = round(1.0 / FRAME_S), round(18.0 / FRAME_S) - 10  # matches reach 10 frames on
    [whole] = _tags(_occurrence(3, 1000 + first, first, last - first), 1)
    assert (REFERENCE_START.of(whole), REFERENCE_END.of(whole)) == (0.0, 20.0)
    assert abs(whole.end - whole.start - 20.0) < 0.01
    cut = round(1.5 / FRAME_S)
    [excerpt] = _tags(_occurrence(3, 1000 + first, first, last - first - cut), 1)
    assert abs(REFERENCE_END.at(excerpt) - 16.5) < 0.05


def _stray(reference: int, difference: int, frames: range) -> np.ndarray:
    """Lone matches on an occurrence's line (chance collisions in the music around it), with
    the recording's hashes they stand among."""
    rows = [_match(reference, difference, f, f + 10) for f in frames]
    rows += [[HASH, 0, f, f, 0, 0] for f in range(frames.start, frames.stop)]
    return np.array(rows, dtype=np.int64)


def test_lone_matches_on_the_line_around_an_occurrence_do_not_stretch_it() -> None:
    """An excerpt of the reference's frames 300-600, played from frame 1000, with a chance
    match on its line every 1.5 s (65 frames) for 6 s before it and 4.5 s after it (each within
    `max_gap_s` of the next): the tag starts and ends where the excerpt does."""
    difference = 1000 - 300
    rows = np.concatenate(
        [
            _stray(1, difference, range(1000 - 4 * 65, 1000, 65)),
            _occurrence(1, 1000, 300, 300),
            _stray(1, difference, range(1300 + 65, 1300 + 4 * 65, 65)),
        ]
    )
    for pushes in (1, 7):
        [tag] = _tags(rows, pushes)
        assert abs(tag.start - 1000 * FRAME_S) < 0.1, tag
        assert abs(tag.end - 1300 * FRAME_S) < 0.5, tag
        assert abs(REFERENCE_START.at(tag) - 300 * FRAME_S) < 0.1, tag


def test_an_occurrence_thinned_by_talk_over_stays_one_tag_to_its_ends() -> None:
    """Its middle matched sparsely (one match in 40 frames for 3 s), as under a presenter: one
    tag from its first to its last match, not cut where it thins."""
    thin = range(1200, 1330, 40)
    rows = np.concatenate(
        [
            _occurrence(1, 1000, 0, 200),
            _stray(1, 1000, thin),
            _occurrence(1, 1330, 330, 200),
        ]
    )
    [tag] = _tags(rows, 5)
    assert abs(tag.start - 1000 * FRAME_S) < 0.1 and abs(tag.end - 1540 * FRAME_S) < 0.1, tag


def test_a_triplet_half_in_the_music_around_an_occurrence_does_not_stretch_it() -> None:
    """A clean excerpt (a match every 4th frame, 0.09 s) of the reference's frames 300-600 from
    frame 1000, with two matches on its line that are one chance peak in the music around it
    and two of its own: one whose anchor lies 0.7 s before the excerpt (its partners inside it),
    one whose last partner lies 0.8 s after it. The tag starts and ends where the excerpt does
    (the broadcast hour's play 6 started 0.84 s early so)."""
    difference = 1000 - 300
    rows = np.concatenate(
        [
            _occurrence(1, 1000, 300, 300),
            np.array([_match(1, difference, 970, 1015), _match(1, difference, 1290, 1335)]),
        ]
    )
    for pushes in (1, 4):
        [tag] = _tags(rows, pushes)
        assert abs(tag.start - 1000 * FRAME_S) < 0.1, tag
        assert abs(tag.end - 1306 * FRAME_S) < 0.1, tag
        assert abs(REFERENCE_START.at(tag) - 300 * FRAME_S) < 0.1, tag


def test_a_thinly_matched_occurrence_keeps_its_sparse_first_and_last_matches() -> None:
    """Under talk a match every 12th frame (0.28 s), 0.7 s from the first match to the next and
    0.5 s from the one before the last to the last: the tag still runs from the first match to
    the last partner (the window stays `DENSE_S` wide for a thin run: its gaps are its own)."""
    rows = np.concatenate(
        [
            _stray(1, 1000, range(1000, 1001)),
            _stray(1, 1000, range(1030, 1400, 12)),
            _stray(1, 1000, range(1412, 1413)),
        ]
    )
    [tag] = _tags(rows, 3, min_hits=10)
    assert abs(tag.start - 1000 * FRAME_S) < 0.05, tag
    assert abs(tag.end - 1423 * FRAME_S) < 0.05, tag


def test_matches_a_few_frames_off_the_line_do_not_stretch_an_occurrence() -> None:
    """A burst of matches 6 frames (0.14 s) off the line of the 20-s excerpt that follows it
    2 s later: its run is taken into the excerpt's (within `absorb`'s tolerance) but the tag
    starts where the excerpt does (the held-out hour's play 36 started 3.26 s early so)."""
    difference = 1000 - 300
    burst = [_match(1, difference - 6, f, f + 10) for f in range(900, 950, 6)]
    rows = np.concatenate([_occurrence(1, 1000, 300, 860), np.array(burst)])
    for pushes in (1, 4):
        [tag] = _tags(rows, pushes)
        assert abs(tag.start - 1000 * FRAME_S) < 0.1, tag
        assert abs(REFERENCE_START.at(tag) - 300 * FRAME_S) < 0.1, tag
        assert abs(SPEED.at(tag) - 1.0) < 0.01, tag


ANCHORS = np.array([[frame, 200 + frame % 7 * 10] for frame in range(0, 861, 5)])
"""Reference 1's anchors: (frame, bin in quarters), one every 5 frames."""


def _heard(reference: int, pitch: float) -> np.ndarray:
    assert (reference, pitch) == (1, 1.0)
    return ANCHORS.astype(np.float64)


def _peaks(ref_from: int, ref_to: int, shift: int) -> np.ndarray:
    """PEAK rows of the recording where reference 1's anchors from `ref_from` to `ref_to` are
    heard, played `shift` frames later than in the reference."""
    kept = ANCHORS[(ANCHORS[:, 0] >= ref_from) & (ANCHORS[:, 0] < ref_to)]
    return np.array([[PEAK, fine, frame + shift, frame + shift, 0, 0] for frame, fine in kept])


def _thin(every: int) -> np.ndarray:
    """Reference 1's frames 300-699 played from frame 1000, a match every `every` frames (speech
    over it leaves one triplet in eight matched), and one hash of the recording at every frame."""
    rows = [_match(1, 700, f, f + 10) for f in range(1000, 1400, every)]
    rows += [[HASH, 0, f, f, 0, 0] for f in range(1000, 1400)]
    return np.array(rows, dtype=np.int64)


def test_a_thinly_matched_occurrence_reaches_as_far_as_its_reference_s_peaks_are_heard() -> None:
    """Speech over its first 40 and last 30 frames left no triplet matched, but the music's
    peaks are there: the tag starts and ends with them, and no further (the peaks of other
    music around it, at random, do not line up with the reference's)."""
    rng = np.random.default_rng(5)
    around = [[PEAK, int(rng.integers(0, 800)), f, f, 0, 0] for f in range(800, 1600, 3)]
    heard = np.concatenate([_peaks(260, 740, 700), np.array(around)])
    rows = np.concatenate([_thin(8), heard])
    plain = _tags(rows, 3)
    for pushes in (1, 3):
        [tag] = _tags(rows, pushes, anchors=_heard)
        assert abs(tag.start - 960 * FRAME_S) < 0.01, (tag, plain)
        assert abs(REFERENCE_START.at(tag) - 260 * FRAME_S) < 0.01
        assert abs(tag.end - 1436 * FRAME_S) < 0.03  # the last peak heard, at reference 735
    [before] = plain  # without the reference's anchors: its matched bounds
    assert abs(before.start - 1000 * FRAME_S) < 0.01 and before.end < 1415 * FRAME_S


def test_a_densely_matched_occurrence_keeps_its_matched_bounds() -> None:
    """Matched every other frame (clean or coded): its edges are where its matches are, even
    where the reference's peaks are heard beyond them (a phrase repeated by the music around)."""
    rows = np.concatenate([_thin(2), _peaks(200, 800, 700)])
    [tag] = _tags(rows, 2, anchors=_heard)
    assert abs(tag.start - 1000 * FRAME_S) < 0.01
    assert tag.end < 1412 * FRAME_S


def test_an_edge_goes_on_past_onsets_the_speech_hid_while_the_music_is_heard_beyond() -> None:
    """Two onsets the voice hid (reference frames 275 and 280), and the reference's peaks heard
    again for a second before them: the play began there (the edge used to stop at the gap)."""
    gap = np.concatenate([_peaks(285, 700, 700), _peaks(200, 275, 700)])
    for pushes in (1, 3):
        [tag] = _tags(np.concatenate([_thin(8), gap]), pushes, anchors=_heard)
        assert abs(tag.start - 900 * FRAME_S) < 0.01, tag
        assert abs(REFERENCE_START.at(tag) - 200 * FRAME_S) < 0.01


def test_an_edge_crosses_onsets_where_the_voice_leaves_the_music_only_weak_peaks() -> None:
    """Over the play, 6 onsets in 10 have a peak, 3 a weak peak only, 1 neither; before its
    first match (reference frames 200-295) one onset in four has a peak and the others a weak
    one: as the play's own stretch sounds under the voice, and not as chance does (a weak peak
    alone at about a third of the onsets, a peak at a tenth), so the tag starts at frame 200."""
    inside = _peaks(300, 700, 700)
    kind = np.arange(len(inside)) % 10
    head = _peaks(200, 300, 700)[::-1]  # outwards from the first match
    strong = np.arange(len(head)) % 4 == 3
    rows = np.concatenate([inside[kind < 6], inside[(kind >= 6) & (kind < 9)], head])
    rows[len(inside[kind < 6]) : len(rows) - len(head), 0] = WEAK
    rows[len(rows) - len(head) :][~strong, 0] = WEAK
    for pushes in (1, 3):
        [tag] = _tags(np.concatenate([_thin(8), rows]), pushes, anchors=_heard)
        assert abs(tag.start - 900 * FRAME_S) < 0.01, tag


def test_an_edge_is_not_moved_by_chance_peaks_beyond_onsets_not_heard() -> None:
    """Beyond the last onset heard, one onset in six lines up with a peak of the music around
    (reference frames 270 and 240) and about a third with a weak one, as the music's own peaks
    do by chance: outweighed by the onsets missed around them, so the edge stays where the
    reference stops being heard (its own share inside: about 0.7)."""
    inside = _peaks(285, 700, 700)
    inside = inside[np.arange(len(inside)) % 10 < 7]  # 7 onsets heard in 10 over the play
    inside = np.concatenate([inside, _peaks(285, 290, 700)])  # the first one heard
    chance = np.concatenate([_peaks(270, 275, 700), _peaks(240, 245, 700)])
    weak = np.concatenate([_peaks(f, f + 5, 700) for f in (280, 265, 255, 245, 230)])
    weak[:, 0] = WEAK
    rows = np.concatenate([_thin(8), inside, chance, weak])
    [tag] = _tags(rows, 2, anchors=_heard)
    assert abs(tag.start - 985 * FRAME_S) < 0.01, tag


def test_an_end_goes_past_edge_s_while_its_reference_is_heard_well_beyond() -> None:
    """A long sentence over a play's last 3 s: no triplet matched after reference frame 699,
    but every peak of reference frames 700-830 is heard (frames 1400-1530, up to 128 frames past
    the last match's partner, more than `EDGE_S`'s 108): the tag ends with them, pushed whole or
    in pieces."""
    rows = np.concatenate([_thin(8), _peaks(260, 835, 700)])
    for pushes in (1, 3, 17):
        [tag] = _tags(rows, pushes, anchors=_heard)
        assert abs(tag.end - 1531 * FRAME_S) < 0.03, (pushes, tag)
        assert abs(REFERENCE_END.at(tag) - 831 * FRAME_S) < 0.03


def test_a_run_waits_for_the_recording_read_as_far_as_its_edge_may_reach() -> None:
    """The run ends (no match for `max_gap_s`) with a segment read to frame 1525, and the peaks
    of its last onsets come with the next segment: its tag waits for them."""
    rows = np.concatenate([_thin(8), _peaks(260, 835, 700)])
    rows = rows[np.argsort(rows[:, 2], kind="stable")]
    tagger = FingerprintTagger(FingerprintParams(), LIBRARY.get, RATE, HOP, _heard)
    tags: list[Tag] = []
    for part in (rows[rows[:, 2] <= 1525], rows[rows[:, 2] > 1525]):
        end = np.array([[END, 0, int(part[-1, 2]), int(part[-1, 2]), 0, 0]])
        tags += tagger.push(np.concatenate([part, end]))
        assert not tags  # the first segment ended the run, and its tag waits
    [tag] = tags + tagger.finish(0)
    assert abs(tag.end - 1531 * FRAME_S) < 0.03, tag


def test_a_densely_matched_run_does_not_wait_for_edges_it_never_moves() -> None:
    """Matched every other frame: its tag comes with the segment that ends it."""
    rows = np.concatenate([_thin(2), _peaks(260, 835, 700)])
    rows = rows[np.argsort(rows[:, 2], kind="stable")]
    tagger = FingerprintTagger(FingerprintParams(), LIBRARY.get, RATE, HOP, _heard)
    part = rows[rows[:, 2] <= 1540]  # 142 frames past the last match: past `max_gap_s`
    [tag] = tagger.push(np.concatenate([part, [[END, 0, 1540, 1540, 0, 0]]]))
    assert tag.end < 1412 * FRAME_S


def test_an_edge_goes_past_edge_s_only_on_more_evidence_than_one_onset() -> None:
    """Heard up to reference frame 815 (frame 1515): the last onset, 5 frames past `EDGE_S`
    from the last match's partner, is one onset, what the music around a play lines up with by
    chance; the edge stays at the onset before it."""
    rows = np.concatenate([_thin(8), _peaks(260, 820, 700)])
    [tag] = _tags(rows, 2, anchors=_heard)
    assert abs(tag.end - 1511 * FRAME_S) < 0.03, tag


def test_a_reference_removed_while_the_request_runs_has_no_anchors_and_its_tag_its_bounds() -> None:
    """Its title read, then its anchors gone (removed in between): the tag keeps its matched
    bounds (no anchor to place inside them or beyond; this raised and failed the request)."""

    def removed(reference: int, pitch: float) -> np.ndarray:
        return np.zeros((0, 2))

    for every in (8, 2):  # thin (its edges looked for) and dense
        rows = np.concatenate([_thin(every), _peaks(200, 800, 700)])
        [tag] = _tags(rows, 2, anchors=removed)
        assert abs(tag.start - 1000 * FRAME_S) < 0.01, tag


def test_a_line_whose_reference_is_not_heard_over_it_is_no_tag() -> None:
    """Matches on one line of a reference whose own peaks the recording mostly lacks there:
    a chance line of similar music (a few of its notes repeat the reference's), not a play."""
    rows = np.concatenate([_thin(4), _peaks(300, 700, 700)[::3]])  # a third of the onsets heard
    assert _tags(rows, 2, anchors=_heard) == []
    [tag] = _tags(rows, 2, anchors=_heard, min_heard=0.3)
    assert abs(tag.start - 1000 * FRAME_S) < 0.01
    [heard] = _tags(np.concatenate([_thin(4), _peaks(300, 700, 700)]), 2, anchors=_heard)
    assert heard.start == tag.start
