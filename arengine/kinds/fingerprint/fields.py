"""The `fingerprint` kind's own tag fields: which reference a stretch matched, where in it, and
how fast and high the recording plays it."""

from __future__ import annotations

from arengine.kinds.fields import MAX_TIME_S, TagField

REFERENCE: TagField[str] = TagField(
    "reference",
    str,
    "Fingerprint models: the reference's id in the library.",
    bounds={"max_length": 64},
    csv=True,
    raven="Reference",
)
"""The library reference's id (the tag's label is its title)."""
REFERENCE_START: TagField[float] = TagField(
    "reference_start",
    float,
    "Fingerprint models: where in the reference the matched stretch begins, in seconds.",
    bounds={"ge": 0, "le": MAX_TIME_S},
    csv=True,
    raven="Reference Begin (s)",
)
REFERENCE_END: TagField[float] = TagField(
    "reference_end",
    float,
    "Fingerprint models: where in the reference the matched stretch ends, in seconds.",
    bounds={"ge": 0, "le": MAX_TIME_S},
    csv=True,
    raven="Reference End (s)",
)
SPEED: TagField[float] = TagField(
    "speed",
    float,
    "Fingerprint models: how many times as fast as the reference the recording plays it "
    "(1.05: 5% fast).",
    bounds={"gt": 0},
    csv=True,
)
PITCH: TagField[float] = TagField(
    "pitch",
    float,
    "Fingerprint models: how many times as high as the reference the recording plays it "
    "(1.0 when only the tempo changed).",
    bounds={"gt": 0},
    csv=True,
)
"""1.05 when played 5% fast by resampling, 1.0 when only the tempo changed."""

FIELDS = (REFERENCE, REFERENCE_START, REFERENCE_END, SPEED, PITCH)
