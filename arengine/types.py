"""The values that pass between the stages and out of the engine, and their one JSON form.

Declared once in the client distribution (`arengine_client.types`), since a client reads the same
values from the server's answers; imported from here by the server's modules, as before.
"""

from arengine_client.types import (
    AudioInfo,
    Extra,
    Result,
    Stage,
    Tag,
    Timings,
    audio_dict,
    audio_of,
    result_dict,
    result_of,
    tag_dict,
    tag_of,
    timings_dict,
    timings_of,
)

__all__ = [
    "AudioInfo",
    "Extra",
    "Result",
    "Stage",
    "Tag",
    "Timings",
    "audio_dict",
    "audio_of",
    "result_dict",
    "result_of",
    "tag_dict",
    "tag_of",
    "timings_dict",
    "timings_of",
]
