"""What the engine reports while it works, without knowing who listens (metrics, tests).

The engine never imports prometheus_client: the HTTP layer passes an observer down instead.
"""

from __future__ import annotations

from typing import Protocol

from arengine.types import Stage


class StageObserver(Protocol):
    """Receives one call per timed piece of work; called from engine threads, must be quick.

    `Metrics` is the server's observer; tests pass recorders of their own.
    """

    def observe_stage(self, model: str, stage: Stage, seconds: float) -> None:
        """`stage` took `seconds` for `model`."""

    def observe_queue_wait(self, model: str, seconds: float) -> None:
        """A decoded segment waited `seconds` before an engine thread started its inference."""


class NullObserver:
    """The default: observes nothing."""

    def observe_stage(self, model: str, stage: Stage, seconds: float) -> None:
        pass

    def observe_queue_wait(self, model: str, seconds: float) -> None:
        pass
