"""Logs as one JSON object per line, so that a log pipeline needs no parsing rules.

Structured fields travel in `extra={"fields": {...}}` and become keys of the object.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "message", **fields}` on one line.

    Example: `logging.getLogger("arengine").info("started", extra={"fields": {"threads": 4}})`
    writes `{"time": "2025-01-01T12:00:00.000+00:00", "level": "INFO", "logger": "arengine",
    "message": "started", "threads": 4}`.
    """

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(getattr(record, "fields", {}))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


QUIET = ("alembic",)
"""Libraries whose INFO lines say nothing to an operator, kept to WARNING: Alembic says which
dialect it found and each plugin it sets up (when it is first imported), at every start of every
replica; a migration that changed something is logged once by `arengine.db.migrate`."""


def configure(level: str) -> None:
    """Send every `logging` record (except uvicorn's own, which it formats) to stderr as JSON;
    `QUIET` libraries from WARNING up, unless `level` is debug."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler])
    if logging.getLogger().level > logging.DEBUG:
        for name in QUIET:
            logging.getLogger(name).setLevel(logging.WARNING)
