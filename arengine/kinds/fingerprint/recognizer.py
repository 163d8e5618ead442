"""The `fingerprint` kind: find the recordings of a reference library inside long audio.

Triplets of spectral peaks on a log-frequency spectrogram (`landmarks.py`, as Panako does):
audio at 11,025 Hz, a 1024-point STFT every 256 samples (23.2 ms) folded into 36 bins an octave
from 110 Hz, peaks that are the maximum of their neighbourhood (a quarter octave, ±7 frames)
above a level floor, and each peak (the anchor) with pairs of its four nearest partners up to
60 frames after it. A triplet's hash holds what a speed change (tempo and pitch together, as a
resampling does), a tempo change and a pitch shift leave alone; each match says the speed and
pitch it was played at, and the tagger fits one line per occurrence (`matches.py`,
`tagger.py`): recordings played from 90% to 110% of the reference's speed are found, and the tag
says the factors.

The library is the model folder's SQLite file or the database's (`library.py`), held in memory
(`index.py`) where it fits. Each segment's hashes are looked up at once, after a check of the
library's version, so a reference added or removed (through any replica) is seen by the next
segment, without a restart. A segment keeps the triplets whose anchor lies in its own
frames; its pre-roll and lookahead give its first and last anchors the same peaks and partners as
the whole recording has, so a boundary never splits or changes a match. `infer` returns rows of
(reference, reference frame, frame, partner's frame, speed, pitch) for the matches, one (-1, 0,
frame, frame, 0, 0) per frame with an anchor of the recording, one (-3, bin in quarters, frame,
frame, 0, 0) per anchor, one (-4, bin in quarters, frame, frame, 0, 0) per weak peak (the maximum
of a smaller neighbourhood, `landmarks.WEAK_BINS`), and a closing (-2, 0, last frame, last frame,
0, 0); `tagger.py` groups them into occurrences, and places the edges of those that speech
thinned with the anchors and weak peaks and their reference's anchors (`reference_anchors`).

A library whose references were fingerprinted with another scheme (the landmark pairs before
triplets, or scheme 2's coarser triplet hashes) would match nothing, silently: it is refused
when the model loads, with the advice to index its recordings again (`check_scheme`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from arengine.audio.segments import Segment, SegmentPlan
from arengine.kinds.base import Overrides, Recognizer
from arengine.kinds.fingerprint.index import HashIndex
from arengine.kinds.fingerprint.landmarks import (
    BINS_PER_OCTAVE,
    FINE,
    HOP,
    LOOKAHEAD,
    PREROLL_FRAMES,
    SAMPLE_RATE,
    SCHEME,
    SCHEME_HASH,
    WEAK_BINS,
    WEAK_FRAMES,
    peaks,
    queried,
    spectrogram_db,
    triplets,
    unpack,
)
from arengine.kinds.fingerprint.library import Library, distinct
from arengine.kinds.fingerprint.matches import COLUMNS, matches
from arengine.kinds.fingerprint.tagger import (
    END,
    HASH,
    PEAK,
    WEAK,
    FingerprintParams,
    FingerprintTagger,
)

WEAK_QUERY = -1
"""A feature row's hash for a weak peak, not a query (hashes are never negative)."""
FINE_BITS = 16
"""A peak's bin in quarters below its frame in one integer (`unpack`'s width of it)."""
MEMORY_INDEX_MB = 1024
"""The most a model's library may take in memory (`index.HashIndex`; 16 bytes a row, about
2.2 MB an hour of reference audio, so some 450 hours); a larger one is looked up in the
database. A manifest's `[model] memory_index_mb` sets it (0: always the database)."""


class FingerprintRecognizer(Recognizer):
    """Segments -> landmark hashes -> library lookup -> occurrences (its tagger)."""

    kind = "fingerprint"
    positional = True
    """Its hashes and end marker carry the segment's frames in the recording."""
    _params: FingerprintParams
    sample_rate = SAMPLE_RATE
    labels: tuple[str, ...] = ()
    """The references' titles change while the model serves: `GET /v1/models` lists none."""

    def __init__(
        self,
        library: Path | Library,
        segment_s: float,
        name: str = "fingerprint",
        params: FingerprintParams | None = None,
        memory_index_mb: int = MEMORY_INDEX_MB,
    ) -> None:
        self.name = name
        self.library = library if isinstance(library, Library) else Library(library)
        check_scheme(self.library)
        self.index = HashIndex(self.library, memory_index_mb << 20)
        self.plan = SegmentPlan(
            hop=HOP,
            context=0,
            segment_frames=max(1, round(segment_s * SAMPLE_RATE / HOP)),
            preroll_frames=PREROLL_FRAMES,
            lookahead=LOOKAHEAD,
        )
        self._params = params or FingerprintParams()

    def features(self, segment: Segment) -> Tensor:
        """The queries of the segment's triplets, then one row (`WEAK_QUERY`, -1, frame, bin in
        quarters, 0) for each weak peak of its own frames (`landmarks.WEAK_BINS`)."""
        db = spectrogram_db(segment.samples)
        found = peaks(db)
        skip = segment.skip_frames
        rows = triplets(found, skip, skip + segment.frames)
        rows[:, 1] += segment.first_frame - skip
        weak = peaks(db, WEAK_BINS, WEAK_FRAMES)
        weak = weak[(weak[:, 0] >= skip) & (weak[:, 0] < skip + segment.frames)]
        query = queried(rows)
        extra = np.zeros((len(weak), query.shape[1]), dtype=np.int64)
        extra[:, 0], extra[:, 1] = WEAK_QUERY, -1
        extra[:, 2], extra[:, 3] = weak[:, 0] + segment.first_frame - skip, weak[:, 2]
        return torch.from_numpy(np.concatenate([query, extra]))

    def infer(self, features: Tensor, segment: Segment) -> np.ndarray:
        rows = features.numpy()
        query, weak = rows[rows[:, 0] != WEAK_QUERY], rows[rows[:, 0] == WEAK_QUERY]
        found = matches(query, self.index.lookup(query[:, 0]))
        frames = distinct(query[:, 2])  # one row an anchor's frame, as the matches are
        own = np.zeros((len(frames), COLUMNS), dtype=np.int64)
        own[:, 0], own[:, 2], own[:, 3] = HASH, frames, frames
        heard = distinct((query[:, 2] << FINE_BITS) | query[:, 3])  # each anchor once
        peaks = np.zeros((len(heard), COLUMNS), dtype=np.int64)
        peaks[:, 0], peaks[:, 1] = PEAK, heard & ((1 << FINE_BITS) - 1)
        peaks[:, 2] = peaks[:, 3] = heard >> FINE_BITS
        weaker = np.zeros((len(weak), COLUMNS), dtype=np.int64)
        weaker[:, 0], weaker[:, 1] = WEAK, weak[:, 3]
        weaker[:, 2] = weaker[:, 3] = weak[:, 2]
        last = segment.first_frame + segment.frames - 1
        end = np.array([[END, 0, last, last, 0, 0]], dtype=np.int64)
        return np.concatenate([found, own, peaks, weaker, end])

    def held_bytes(self) -> int:
        return self.index.held_bytes

    def tagger(self, overrides: Overrides) -> FingerprintTagger:
        params = self._params.with_overrides(overrides)
        anchors: dict[int, np.ndarray] = {}  # a request's: a reference's rows read once

        def heard(reference: int, pitch: float) -> np.ndarray:
            if reference not in anchors:
                anchors[reference] = reference_anchors(self.library, reference)
            found = anchors[reference].astype(np.float64)
            found[:, 1] += BINS_PER_OCTAVE * FINE * math.log2(pitch)
            return found

        return FingerprintTagger(params, self.library.reference, SAMPLE_RATE, HOP, heard)

    def warm_up(self) -> None:
        samples = np.zeros(self.plan.segment_samples + LOOKAHEAD, dtype=np.float32)
        segment = Segment(0, 0, 0, self.plan.segment_frames, samples)
        self.infer(self.features(segment), segment)


def reference_anchors(library: Library, reference: int) -> np.ndarray:
    """The `(n, 2)` (frame, bin in quarters) of a reference's anchors, by frame (none once it
    is removed)."""
    rows = library.rows_of(np.array([reference]))
    offsets = rows[rows[:, 0] >= 0, 2]  # not the scheme's marker
    frame, fine, _ = unpack(offsets)
    heard = distinct((frame << FINE_BITS) | fine)
    return np.stack([heard >> FINE_BITS, heard & ((1 << FINE_BITS) - 1)], axis=1)


def check_scheme(library: Library) -> None:
    """Refuse a library with a reference fingerprinted by another scheme (`ValueError`): its
    hashes would never match, and every occurrence would go unreported without a word."""
    marked = {int(ref) for _, ref, scheme in library.lookup(np.array([SCHEME_HASH])).tolist()
              if scheme == SCHEME}  # fmt: skip
    stale = [ref for ref in library.references() if ref.id not in marked]
    if stale:
        raise ValueError(
            f"the reference library {library.where} holds {len(stale)} reference(s) "
            f"fingerprinted by an older scheme (first: {stale[0].id} {stale[0].title!r}), "
            f"which this version cannot match (fingerprint scheme {SCHEME}: triplets that survive "
            "speed changes); index its recordings again: remove them (or move the library file "
            "away) and `arengine references add` each recording"
        )
