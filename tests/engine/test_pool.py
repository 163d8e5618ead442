"""The engine pool on its own: which job's task goes next, the background share, closing.

The requests are fakes that hand out tasks from a list (the pool knows a request only by
`take`, `served_s`, `finished`, `cancel` and `abort`), so each test sets exactly the state it
checks and nothing depends on a model's speed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from arengine.engine import pool as pool_module
from arengine.engine.pool import EnginePool
from arengine.errors import ArengineError, Cancelled, StageFailed
from tests.conftest import wait_until


@dataclass
class FakeSpec:
    name: str
    tasks: int
    background: bool = False
    served_s: float = 0.0
    gate: threading.Event | None = None
    """Set: each task waits for it (a task that holds its thread)."""
    clip: bool = False
    """A recording of one segment or less (`EngineRequest.clip`)."""


@dataclass
class FakeRequest:
    """Hands out `spec.tasks` tasks; each records its name and batching flag in `log`."""

    spec: FakeSpec
    wake: Callable[[], None]
    log: list[tuple[str, bool]]
    served_s: float = 0.0
    handed: int = 0
    done: int = 0
    running: int = 0
    peak: int = 0
    error: ArengineError | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def finished(self) -> bool:
        return self.error is not None or self.done == self.spec.tasks

    @property
    def clip(self) -> bool:
        return self.spec.clip

    def take(self, batching: bool) -> Callable[[], None] | None:
        if self.finished or self.handed == self.spec.tasks:
            return None
        self.handed += 1
        self.log.append((self.spec.name, batching))
        return self._run

    def _run(self) -> None:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        if self.spec.gate is not None:
            self.spec.gate.wait(10)
        with self.lock:
            self.running -= 1
            self.done += 1
            self.served_s += 1.0

    def cancel(self) -> None:
        self.abort(Cancelled("the pool is closing"))

    def abort(self, error: ArengineError) -> None:
        self.error = error


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch) -> list[FakeRequest]:
    """Every request the pool creates, in submission order; they share one log."""
    made: list[FakeRequest] = []
    log: list[tuple[str, bool]] = []

    def make(
        spec: FakeSpec, wake: Callable[[], None], observer: object, others: object = None
    ) -> FakeRequest:
        request = FakeRequest(spec, wake, log, served_s=spec.served_s)
        made.append(request)
        return request

    monkeypatch.setattr(pool_module, "EngineRequest", make)
    return made


def test_the_least_served_request_goes_first(requests: list[FakeRequest]) -> None:
    gate = threading.Event()
    pool = EnginePool(threads=1)
    try:
        pool.submit(FakeSpec("blocker", 1, gate=gate))  # type: ignore[arg-type]
        assert wait_until(lambda: pool.busy == 1)
        pool.submit(FakeSpec("long", 3, served_s=100.0))  # type: ignore[arg-type]
        pool.submit(FakeSpec("clip", 2))  # type: ignore[arg-type]
        gate.set()
        assert wait_until(lambda: all(request.finished for request in requests))
    finally:
        pool.close()
    names = [name for name, _ in requests[0].log]
    # The clip has had no engine time: both its tasks go before the recording's next one.
    assert names == ["blocker", "clip", "clip", "long", "long", "long"]


def test_background_requests_hold_at_most_their_share_of_threads(
    requests: list[FakeRequest],
) -> None:
    gate = threading.Event()
    pool = EnginePool(threads=3, background_threads=1)
    try:
        pool.submit(FakeSpec("job", 4, background=True, gate=gate))  # type: ignore[arg-type]
        pool.submit(FakeSpec("clip", 2, gate=gate))  # type: ignore[arg-type]
        assert wait_until(lambda: pool.busy == 3)  # the job's one thread and the clip's two
        assert requests[0].running == 1 and requests[1].running == 2
        gate.set()
        assert wait_until(lambda: all(request.finished for request in requests))
    finally:
        pool.close()
    assert requests[0].peak == 1
    assert pool.background_threads == 1


def _alone_then_beside(pool: EnginePool, requests: list[FakeRequest]) -> list[tuple[str, bool]]:
    """ "a" (2 tasks) alone, then "b" (1 task) beside it on one thread: the tasks' batching."""
    gate = threading.Event()
    pool.submit(FakeSpec("a", 2, gate=gate))  # type: ignore[arg-type]
    assert wait_until(lambda: pool.busy == 1)
    pool.submit(FakeSpec("b", 1))  # type: ignore[arg-type]
    gate.set()
    assert wait_until(lambda: all(request.finished for request in requests))
    return requests[0].log[-3:]  # the requests share one log


def test_after_a_clip_the_first_thread_never_batches_beside_another_request(
    requests: list[FakeRequest],
) -> None:
    pool = EnginePool(threads=1)
    try:
        pool.submit(FakeSpec("clip", 1, clip=True))  # type: ignore[arg-type]
        assert wait_until(lambda: requests[0].finished)
        log = _alone_then_beside(pool, requests)
    finally:
        pool.close()
    # "a" alone: batched. Then two requests, and worker 0 keeps the next clip's place free of
    # batches; "b" (no engine time yet) goes first. Then "a" alone again.
    assert log == [("a", True), ("b", False), ("a", True)]


def test_without_a_recent_clip_every_thread_batches(
    requests: list[FakeRequest], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Long recordings only (or the last clip longer ago than `CLIP_MEMORY_S`): holding the
    first thread to one segment a call would only cost CPU (one call of 4 speech segments is
    0.83x of 4 calls)."""
    pool = EnginePool(threads=1)
    try:
        assert _alone_then_beside(pool, requests) == [("a", True), ("b", True), ("a", True)]
        pool.submit(FakeSpec("long", 1))  # type: ignore[arg-type]
        assert wait_until(lambda: requests[-1].finished)
        assert _alone_then_beside(pool, requests) == [("a", True), ("b", True), ("a", True)]
        monkeypatch.setattr(pool_module, "CLIP_MEMORY_S", 0.0)  # a clip forgotten at once
        pool.submit(FakeSpec("clip", 1, clip=True))  # type: ignore[arg-type]
        assert wait_until(lambda: requests[-1].finished)
        assert _alone_then_beside(pool, requests) == [("a", True), ("b", True), ("a", True)]
    finally:
        pool.close()


def test_closing_cancels_what_is_queued_and_refuses_new_requests(
    requests: list[FakeRequest],
) -> None:
    gate = threading.Event()
    pool = EnginePool(threads=1)
    pool.submit(FakeSpec("running", 1, gate=gate))  # type: ignore[arg-type]
    assert wait_until(lambda: pool.busy == 1)
    pool.submit(FakeSpec("queued", 5))  # type: ignore[arg-type]
    closing = threading.Thread(target=pool.close)
    closing.start()
    assert wait_until(lambda: isinstance(requests[1].error, Cancelled))
    gate.set()  # the running task ends; close joins the threads
    closing.join(10)
    assert not closing.is_alive()
    assert requests[1].handed == 0
    assert requests[0].done == 1
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(FakeSpec("late", 1))  # type: ignore[arg-type]


def test_abort_all_ends_only_the_active_requests(requests: list[FakeRequest]) -> None:
    pool = EnginePool(threads=1)
    gate = threading.Event()
    try:
        pool.submit(FakeSpec("done", 1))  # type: ignore[arg-type]
        assert wait_until(lambda: requests[0].finished)
        pool.submit(FakeSpec("active", 3, gate=gate))  # type: ignore[arg-type]
        assert wait_until(lambda: pool.busy == 1)
        assert pool.active_requests == 1
        pool.abort_all(StageFailed("inference", "r1", RuntimeError("the model went away")))
        assert requests[0].error is None
        assert isinstance(requests[1].error, StageFailed)
        gate.set()
        assert wait_until(lambda: pool.busy == 0)
        assert requests[1].handed == 1  # nothing more was taken from the aborted request
    finally:
        pool.close()


def test_a_pool_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        EnginePool(threads=0)
