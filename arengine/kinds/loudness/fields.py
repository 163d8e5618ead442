"""The `loudness` kind's own tag field: the level a loud stretch rose to."""

from __future__ import annotations

from arengine.kinds.fields import TagField
from arengine.kinds.loudness.level import FLOOR_DBFS

LEVEL_DBFS: TagField[float] = TagField(
    "level_dbfs",
    float,
    "Loudness models: the loudest window's level in dBFS (0 is full scale), to 0.01 dB.",
    bounds={"ge": FLOOR_DBFS, "le": 0},
    csv=True,
    raven="Level (dBFS)",
)
"""The peak window level, the one the score is a fraction of full scale of: the score says it
only as `10 ** (dBFS / 20)`, which a spreadsheet user has to undo."""

FIELDS = (LEVEL_DBFS,)
