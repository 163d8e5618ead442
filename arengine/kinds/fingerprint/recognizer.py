"""The `fingerprint` kind: find the recordings of a reference library inside long audio.

Landmark pairs of spectral peaks (Wang 2003, as in audfprint): audio at 11,025 Hz, a 512-point
STFT every 256 samples (23.2 ms), peaks that are the maximum of their neighbourhood (±12 bins,
±8 frames) above a level floor, and each peak (the anchor) paired with the nearest few peaks up
to 63 frames after it and 31 bins above or below. A pair hashes to `(f1, f2 - f1, dt)` in 21 bits,
stored with the anchor's frame number (a whole number, never wrapped on long audio).

The library is the model folder's SQLite file or the database's (`library.py`). Each segment's
hashes are looked up at once, so a reference added or removed (through any replica) is seen by
the next segment, without a restart. A segment keeps the hashes whose anchor lies in its own
frames; its pre-roll and lookahead give its first and last anchors the same peaks and partners as
the whole recording has, so a boundary never splits or changes a match. `infer` returns rows of
(reference, offset difference, frame, partner's frame) for the matches, one (-1, 0, frame, frame)
per hash of the recording and a closing (-2, 0, last frame, last frame); `tagger.py` groups them
into occurrences.

Out of scope: speed-changed (or pitch-shifted) broadcasts. A recording played a few percent fast
moves every peak's bin and every pair's time difference, so its hashes do not match: measured,
found up to 0.5% off speed, lost from 1% with the pitch moved and 2% with it kept
(`loadtests/fingerprint.py`, BENCHMARKS.md "Known recordings").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from arengine.audio.segments import Segment, SegmentPlan
from arengine.kinds.base import Overrides, Recognizer
from arengine.kinds.fingerprint.landmarks import (
    HOP,
    LOOKAHEAD,
    PREROLL_FRAMES,
    SAMPLE_RATE,
    matches,
    pair_hashes,
    peaks,
    spectrogram_db,
)
from arengine.kinds.fingerprint.library import Library
from arengine.kinds.fingerprint.tagger import END, HASH, FingerprintParams, FingerprintTagger


class FingerprintRecognizer(Recognizer):
    """Segments -> landmark hashes -> library lookup -> occurrences (its tagger)."""

    kind = "fingerprint"
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
    ) -> None:
        self.name = name
        self.library = library if isinstance(library, Library) else Library(library)
        self.plan = SegmentPlan(
            hop=HOP,
            context=0,
            segment_frames=max(1, round(segment_s * SAMPLE_RATE / HOP)),
            preroll_frames=PREROLL_FRAMES,
            lookahead=LOOKAHEAD,
        )
        self._params = params or FingerprintParams()

    def features(self, segment: Segment) -> Tensor:
        found = peaks(spectrogram_db(segment.samples))
        skip = segment.skip_frames
        hashes = pair_hashes(found, skip, skip + segment.frames)
        hashes[:, 1] += segment.first_frame - skip
        return torch.from_numpy(hashes)

    def infer(self, features: Tensor, segment: Segment) -> np.ndarray:
        hashes = features.numpy()
        found = matches(hashes, self.library.lookup(hashes[:, 0]))
        frames = hashes[:, 1]
        own = np.stack([np.full(len(hashes), HASH), np.zeros_like(frames), frames, frames], axis=1)
        last = segment.first_frame + segment.frames - 1
        end = np.array([[END, 0, last, last]], dtype=np.int64)
        return np.concatenate([found, own.astype(np.int64), end])

    def tagger(self, overrides: Overrides) -> FingerprintTagger:
        params = self._params.with_overrides(overrides)
        return FingerprintTagger(params, self.library.reference, SAMPLE_RATE, HOP)

    def warm_up(self) -> None:
        samples = np.zeros(self.plan.segment_samples + LOOKAHEAD, dtype=np.float32)
        segment = Segment(0, 0, 0, self.plan.segment_frames, samples)
        self.infer(self.features(segment), segment)
