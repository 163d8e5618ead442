"""A live stream's source: the name of the microphone or camera it comes from (`?source=`).

The name goes into the stream's tags, its log line, its MQTT topics (`arengine/notify/`) and the
`arengine_live_*` metrics. It is a short slug, so that it is safe in every one of those places;
the metrics take the first `max_sources` names they see and count the others as `other`, so a
client inventing names cannot grow the series without bound.
"""

from __future__ import annotations

import re
import threading

from arengine.errors import ErrorCode, InvalidInput
from arengine_client.live import MAX_SOURCE_CHARS, SOURCE_NAME, SOURCE_RULE

DEFAULT_SOURCE = "default"
"""The source of a stream that names none."""

OTHER_SOURCE = "other"
"""The metrics' source label of the names past `max_sources`."""

_SOURCE = re.compile(SOURCE_NAME)


def source_name(value: str | None) -> str:
    """`value` checked as a source name, or `DEFAULT_SOURCE` when it is missing.

    >>> source_name("kitchen_mic-2"), source_name(None)
    ('kitchen_mic-2', 'default')
    """
    if value is None:
        return DEFAULT_SOURCE
    if not _SOURCE.fullmatch(value):
        raise InvalidInput(
            f"source must be {SOURCE_RULE}; got {value[: MAX_SOURCE_CHARS + 1]!r}",
            code=ErrorCode.INVALID_SOURCE,
        )
    return value


class SourceLabels:
    """The metrics' label of each source: its name for the first `limit` names, else `other`.

    >>> labels = SourceLabels(1)
    >>> labels.of("hall"), labels.of("yard"), labels.of("hall")
    ('hall', 'other', 'hall')
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._names: set[str] = set()
        self._lock = threading.Lock()

    def of(self, source: str) -> str:
        with self._lock:
            if source in self._names:
                return source
            if len(self._names) < self._limit and source != OTHER_SOURCE:
                self._names.add(source)
                return source
        return OTHER_SOURCE
