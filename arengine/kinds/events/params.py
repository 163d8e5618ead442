"""The `events` kind's post-processing parameters: the shared label tagger's, retuned."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from arengine.postprocess.labels import LabelParams
from arengine.postprocess.params import retuned


@dataclass(frozen=True, slots=True)
class EventParams(LabelParams):
    """Post-processing of sound events: a classifier's, over overlapping 0.975-s windows.

    A tag is a run of windows whose score reaches the class's threshold, scored by its peak.
    Chosen on the freedesktop sound theme, espeak speech and noise (models/events/README.md): at
    0.3 no class fires on pink, white or brown noise at -20 dBFS except the noise classes
    themselves. AudioSet's own frequent classes (speech, music, the room) fire on most
    recordings: they need more to report (leave speech to the speech model with `exclude=Speech`
    or `profile=ambient`). The background classes (noise, hum, rustle) describe the room, not an
    event: pink noise at -50 dBFS scores 0.41 on White noise and 0.33 on Noise
    (loadtests/events.py), -30 dBFS 0.92.
    """

    kind: ClassVar[str] = "events"

    threshold: float = retuned(LabelParams, "threshold", 0.3)
    hysteresis: float = retuned(LabelParams, "hysteresis", 0.3)
    """A started event lasts down to 0.21: one ring is one tag, not three."""
    merge_gap_ms: int = retuned(LabelParams, "merge_gap_ms", 500)
    """One window below the threshold does not split an event."""
    thresholds: Mapping[str, float] = retuned(
        LabelParams,
        "thresholds",
        {
            # An alarm clock's, a timer's or an appliance's beeps score 0.20-0.26 in the windows
            # over their onset, 0.33-0.59 only a window or two later: at 0.3 the tag started
            # 0.8-3.2 s late on 6 of 22 alarm clocks (loadtests/events.py). 0.19 admits the
            # score grid's 51/256; noise alone scores at most 0.043 on it (white, pink, brown
            # at -50 to -20 dBFS), and of Debian's 44 sounds only the beeps reach it.
            "Beep, bleep": 0.19,
            **dict.fromkeys(("Speech", "Music", "Silence", "Inside, small room"), 0.5),
            **dict.fromkeys(
                (
                    "Noise",
                    "White noise",
                    "Pink noise",
                    "Static",
                    "Environmental noise",
                    "Hum",
                    "Mains hum",
                    "Rustle",
                ),
                0.8,
            ),
        },
    )
