"""The engine pool: a fixed set of threads serving every request, one task at a time.

The least-served request goes first: that is what keeps a 5-second clip from waiting behind the
hundreds of segments of a 2-hour recording, however much work the recording has queued. A task
is not taken back once running, so a clip that arrives while every thread holds a long task (a
heavy model's segment: seconds) waits for one to end; a job's run (`POST /v1/jobs`) therefore
holds at most `background_threads` threads at once, and the others stay free for requests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

from arengine.engine.observer import NullObserver, StageObserver
from arengine.engine.request import EngineRequest, RequestSpec, Task
from arengine.errors import ArengineError

log = logging.getLogger(__name__)

CLIP_MEMORY_S = 300.0
"""How long after a clip ended the first engine thread keeps taking one segment a call (beside
other requests), expecting more: a server that has served no clip for that long batches on
every thread, and its next clip may wait for one batch."""


class EnginePool:
    """`threads` workers; `submit` a request's spec, then wait on its `future`.

    Example, with a `RequestSpec` (see `Engine.recognize`)::

        pool = EnginePool(threads=2)
        tags = pool.submit(spec).future.result().tags
    """

    def __init__(
        self,
        threads: int,
        observer: StageObserver | None = None,
        background_threads: int | None = None,
    ) -> None:
        if threads < 1:
            raise ValueError(f"engine threads must be at least 1, got {threads}")
        self.threads = threads
        self.background_threads = min(threads, background_threads or max(1, threads - 1))
        """Threads the background jobs (`RequestSpec.background`) may hold at once, together."""
        self._background_busy = 0
        self._observer: StageObserver = observer or NullObserver()
        self._condition = threading.Condition()
        self._requests: deque[EngineRequest] = deque()
        self._clip_at = -CLIP_MEMORY_S
        """When the last clip (`EngineRequest.clip`) ended, `time.monotonic()`."""
        self._stopping = False
        self._busy = 0
        self._workers = [
            threading.Thread(target=self._work, args=(i,), name=f"arengine-engine-{i}", daemon=True)
            for i in range(threads)
        ]
        for worker in self._workers:
            worker.start()

    def submit(self, spec: RequestSpec) -> EngineRequest:
        """Queue a request; its tasks interleave with every other request's."""
        request = EngineRequest(spec, self.wake, self._observer, self._others)
        with self._condition:
            if self._stopping:
                raise RuntimeError("the engine pool is closed")
            self._requests.append(request)
            self._condition.notify_all()
        return request

    def wake(self) -> None:
        """A request may have new tasks: let idle workers look."""
        with self._condition:
            self._condition.notify_all()

    @property
    def busy(self) -> int:
        """Workers running a task right now."""
        return self._busy

    @property
    def active_requests(self) -> int:
        """Requests admitted and not finished."""
        with self._condition:
            return sum(not request.finished for request in self._requests)

    def _others(self) -> int:
        """The requests in flight less the one that asks."""
        return self.active_requests - 1

    @property
    def queued_segments(self) -> int:
        """Decoded segments waiting for inference, across the active requests."""
        with self._condition:
            return sum(
                request.queued_segments for request in self._requests if not request.finished
            )

    @property
    def held_segments(self) -> int:
        """Decoded segments not yet post-processed, across the active requests."""
        with self._condition:
            return sum(request.held_segments for request in self._requests if not request.finished)

    def abort_all(self, error: ArengineError) -> None:
        """End every active request with `error`; running tasks finish and are discarded."""
        with self._condition:
            requests = [request for request in self._requests if not request.finished]
        for request in requests:
            request.abort(error)

    def close(self) -> None:
        """Cancel what is queued, let running tasks end, join the threads."""
        with self._condition:
            self._stopping = True
            requests = list(self._requests)
            self._condition.notify_all()
        for request in requests:
            request.cancel()
        for worker in self._workers:
            worker.join()

    def _take(self, worker: int) -> tuple[Task, bool] | None:
        """The next task of the request with the least engine time so far, and whether it is a
        background one's (a job's run); caller holds the lock.

        Least attained service: a clip that has just arrived has had none, so its few tasks go
        before the next segment of a recording that has had seconds; requests that arrived together
        alternate. Background requests are skipped while they hold `background_threads` threads.
        Finished requests are dropped here.
        """
        if any(request.finished and request.clip for request in self._requests):
            self._clip_at = time.monotonic()
        self._requests = deque(request for request in self._requests if not request.finished)
        # A batch holds its thread ~4x longer than one segment. With several requests and clips
        # among the recent ones, the first thread takes one segment a call, so it stays back
        # within one segment's time for the next clip (behind batches on every thread, a clip
        # once waited 100 ms more at p99). Otherwise every thread batches: one call of 4 speech
        # segments costs 0.83x of 4 calls, so holding one thread of two back cost long recordings
        # ~8% of their CPU (docs/performance/threads.md).
        clips = time.monotonic() - self._clip_at < CLIP_MEMORY_S
        batching = len(self._requests) == 1 or worker > 0 or not clips
        background_full = self._background_busy >= self.background_threads
        for request in sorted(self._requests, key=lambda request: request.served_s):
            background = request.spec.background
            if background and background_full:
                continue
            task = request.take(batching=batching)
            if task is not None:
                return task, background
        return None

    def _work(self, worker: int) -> None:
        while True:
            with self._condition:
                while (taken := self._take(worker)) is None:
                    if self._stopping:
                        return
                    self._condition.wait()
                task, background = taken
                self._busy += 1
                self._background_busy += background
            try:
                task()
            finally:
                with self._condition:
                    self._busy -= 1
                    if background:
                        self._background_busy -= 1
                        self._condition.notify_all()  # a thread held back may take its task
