"""What the engine reports while it works, without knowing who listens (metrics, tests).

The engine never imports prometheus_client: the HTTP layer passes an observer down instead.
"""

from __future__ import annotations

from typing import Protocol


class StageObserver(Protocol):
    """Receives one call per timed piece of work; called from engine threads, must be quick.

    >>> class Printer:
    ...     def observe_stage(self, model: str, stage: str, seconds: float) -> None: print(stage)
    ...     def observe_queue_wait(self, model: str, seconds: float) -> None: print(seconds)
    """

    def observe_stage(self, model: str, stage: str, seconds: float) -> None:
        """`stage` (validation, features, inference, postprocess) took `seconds` for `model`."""

    def observe_queue_wait(self, model: str, seconds: float) -> None:
        """A decoded segment waited `seconds` before an engine thread started its inference."""


class NullObserver:
    """The default: observes nothing."""

    def observe_stage(self, model: str, stage: str, seconds: float) -> None:
        pass

    def observe_queue_wait(self, model: str, seconds: float) -> None:
        pass
