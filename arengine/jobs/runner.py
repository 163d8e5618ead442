"""The job runner: a few threads that take queued jobs from the store, oldest first, and run
each on the engine's shared pool, as a recognition request would be run.

At most `max_running_jobs` run at once, and the pool serves the least-served request first, so a
running job never takes the engine from a short interactive request. A job's progress goes to
its row about once a second, and each segment's scores to its score log as soon as they are
inferred (`arengine/jobs/scores.py`); its result is written to a file, then its row marked done.
A job cut off by a shutdown or a crash keeps its `running` row: the next start queues it again
(`JobStore.recover`), and it goes on from its kept scores: only the segments whose inference was
in flight (one call per engine thread: one segment, or one batch of a batching model) are
inferred again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace

from arengine.engine.request import EngineRequest
from arengine.errors import ArengineError, ErrorCode
from arengine.jobs.scores import ModelPlan, ScoreLog
from arengine.jobs.store import (
    JobError,
    JobRecord,
    JobState,
    JobStore,
    storage_full,
    write_durably,
)
from arengine.service.engine import Engine
from arengine.types import Result, Tag, result_dict

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 1.0
"""How often a running job's progress is written to its row."""
_IDLE_POLL_S = 0.5
"""How often an idle runner looks again while the models load or the server stops."""


RETENTION_EVERY_S = 60.0
"""How often ended jobs past the retention time or the disk budget are looked for."""


@dataclass(frozen=True, slots=True)
class Retention:
    """How long ended jobs are kept, and the disk budget of the store's files."""

    seconds: float
    max_bytes: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a job ended: its result file's name and the recording's duration, or its error."""

    error: JobError | None
    result: str | None = None
    duration_s: float | None = None
    finished: float = 0.0
    """Unix time."""


@dataclass(frozen=True, slots=True)
class Replica:
    """This server among those sharing the store: its name, and how long a running job's
    server may be silent before the job is queued again for another."""

    name: str
    lease_s: float


class JobRunner:
    """`threads` runners over `store`, on `engine`.

    Example::

        retention, replica = Retention(86400, 1 << 30), Replica("host:8000", 30)
        runner = JobRunner(JobStore.open(Path("data")), engine, 1, retention, replica)
        runner.start()   # queues again what a previous process left running
        runner.notify()  # after committing a queued job
        runner.close()
    """

    def __init__(
        self,
        store: JobStore,
        engine: Engine,
        threads: int,
        retention: Retention,
        replica: Replica,
        on_take_over: Callable[[int], None] | None = None,
    ) -> None:
        self.store = store
        self._on_take_over = on_take_over
        """Told how many jobs each take-over queued again (the metrics' counter)."""
        self._engine = engine
        self._retention = retention
        self._replica = replica
        self._condition = threading.Condition()
        self._running: dict[str, EngineRequest] = {}
        self._tags: dict[str, list[Tag]] = {}
        """The tags final so far of each job running here (for `GET /v1/jobs/{id}/events`)."""
        self._closing = False
        self._full = False
        """Whether the store's files passed the budget at the last look (warned once)."""
        self._no_room = False
        """Whether the data directory's disk was full at the last write (logged once)."""
        self._unrecorded: dict[str, Outcome] = {}
        """Jobs that ended here while the store's disk was full: recorded once it has room,
        shown meanwhile (`current`)."""
        self._threads = [
            threading.Thread(target=self._work, name=f"arengine-jobs-{i}", daemon=True)
            for i in range(threads)
        ]
        self._threads.append(
            threading.Thread(target=self._look_after, name="arengine-jobs-upkeep", daemon=True)
        )

    def start(self) -> None:
        """Recover what a previous process left, then start the runner threads."""
        again = self.store.recover(self._replica.name)
        if again:
            log.info("%d job(s) left running by a previous process queued again", len(again))
        for thread in self._threads:
            thread.start()

    def notify(self) -> None:
        """A job was queued: wake a runner."""
        with self._condition:
            self._condition.notify()

    def cancel(self, job_id: str) -> None:
        """Stop a job's engine work if it runs, and remove it with its files."""
        self.store.remove(job_id)
        with self._condition:
            job = self._running.get(job_id)
        if job is not None:
            job.cancel()

    def tags(self, job_id: str, start: int) -> list[Tag]:
        """The tags after the `start` first that job `job_id`, running here, has made final; a
        job resumed after a restart gives its tags again from the first, in the same order."""
        with self._condition:
            return self._tags.get(job_id, [])[start:]

    def current(self, record: JobRecord) -> JobRecord:
        """`record` as this server knows it: an end the store could not record yet (its disk is
        full) is the job's state meanwhile."""
        with self._condition:
            outcome = self._unrecorded.get(record.id)
        if outcome is None or record.state is not JobState.RUNNING:
            return record
        return replace(
            record,
            state=JobState.DONE if outcome.error is None else JobState.FAILED,
            error=outcome.error,
            result=outcome.result,
            duration_s=outcome.duration_s or record.duration_s,
            finished=outcome.finished,
        )

    def close(self) -> None:
        """Stop taking jobs and let the threads end; running jobs keep their `running` rows."""
        with self._condition:
            self._closing = True
            jobs = list(self._running.values())
            self._condition.notify_all()
        for job in jobs:
            job.cancel()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=10)
        self.store.close()

    def expire(self) -> bool:
        """Remove the ended jobs past the retention time, then those already read past the disk
        budget; whether the store's files are within the budget after."""
        retention = self._retention
        removed = self.store.expire(time.time() - retention.seconds, retention.max_bytes)
        for job_id in removed:
            log.info("job %s: removed (past its retention time or the disk budget)", job_id)
        full = self.store.size() > retention.max_bytes
        if full and not self._full:
            log.warning(
                "the job store's files pass the disk budget (job_storage_bytes, %d bytes) with "
                "only jobs queued, running or not yet read: new jobs are refused (507 "
                "job_storage_full) until some are read, deleted or past their retention time",
                retention.max_bytes,
            )
        self._full = full
        return not full

    def within_budget(self) -> bool:
        """Whether the store's files are within the disk budget, once what the budget may
        remove is removed: a new job is refused while they are not."""
        return self.store.size() <= self._retention.max_bytes or self.expire()

    def take_over(self) -> None:
        """Queue again the running jobs of replicas that fell silent (stopped or stuck)."""
        silent_since = time.time() - self._replica.lease_s
        again = self.store.take_over(silent_since)
        for job_id in again:
            log.info("job %s: its server stopped reporting; queued again", job_id)
        if again:
            if self._on_take_over is not None:
                self._on_take_over(len(again))
            self.notify()

    def look_after(self) -> None:
        """One round of upkeep: record the ends a full disk held back, and take over silent
        replicas' jobs. A full disk is logged once, not each round with a traceback."""
        try:
            self._record_held_back()
            self.take_over()
        except Exception as error:
            self._store_failed(error, "looking after the job store failed; retrying")

    def _look_after(self) -> None:
        """Every few seconds, `look_after`; every minute, expire."""
        tick = min(self._replica.lease_s / 3, RETENTION_EVERY_S)
        expired = 0.0
        while True:
            self.look_after()
            if time.monotonic() - expired >= RETENTION_EVERY_S:
                expired = time.monotonic()
                try:
                    self.expire()
                except Exception as error:
                    self._store_failed(error, "expiring jobs failed; retrying")
            with self._condition:
                if self._closing or self._condition.wait_for(lambda: self._closing, tick):
                    return

    def _store_failed(self, error: Exception, message: str) -> None:
        """Log a failure of the store: a full disk once (until a write succeeds again), any
        other fault with its traceback."""
        if not storage_full(error):
            log.exception(message)
        elif not self._no_room:
            self._no_room = True
            log.error(
                "the data directory %s is full (%s): jobs fail with insufficient_storage, and "
                "their ends are recorded once there is room",
                self.store.folder,
                error,
            )

    def _room_again(self) -> None:
        if self._no_room:
            self._no_room = False
            log.info("the data directory %s has room again", self.store.folder)

    def _record(self, job_id: str, outcome: Outcome) -> bool | None:
        """Record how job `job_id` ended; False when it is no longer this server's (removed,
        or taken over), None when the disk is full (held back, recorded by the upkeep)."""
        error, result = outcome.error, outcome.result
        try:
            ours = self.store.finish(
                job_id,
                error=error,
                result=result,
                duration_s=outcome.duration_s,
                runner=self._replica.name,
                finished=outcome.finished,
            )
        except Exception as failure:
            if not storage_full(failure):
                raise
            with self._condition:
                self._unrecorded[job_id] = outcome
            self._store_failed(failure, "")
            return None
        with self._condition:
            self._unrecorded.pop(job_id, None)
        self._room_again()
        if ours and error is None:
            # Its result and scores are all a done job needs: the recording is not kept.
            self.store.upload_path(job_id).unlink(missing_ok=True)
        elif ours:
            self.store.scores_path(job_id).unlink(missing_ok=True)
        return ours

    def _record_held_back(self) -> None:
        with self._condition:
            held = list(self._unrecorded.items())
        for job_id, outcome in held:
            if self._record(job_id, outcome) is None:
                return  # still full
            log.info("job %s: its end is recorded", job_id)

    def _stopping(self) -> bool:
        return self._closing or self._engine.stopping

    def _work(self) -> None:
        while True:
            with self._condition:
                record = None
                while record is None:
                    if self._closing:
                        return
                    record = self._claim()
                    if record is None:
                        self._condition.wait(_IDLE_POLL_S)
            try:
                self._run(record)
            except Exception as error:  # the store failed: the row stays running, run again
                self._store_failed(error, f"job {record.id}: the job store failed")

    def _claim(self) -> JobRecord | None:
        """The next queued job once the models are loaded; a store fault is logged and retried
        rather than ending the thread."""
        if not self._engine.ready:
            return None
        try:
            claimed = self.store.claim_next(self._replica.name)
        except Exception as error:
            self._store_failed(error, "the job store failed; retrying")
            return None
        if claimed is not None:
            self._room_again()
        return claimed

    def _run(self, record: JobRecord) -> None:
        log.info("job %s: running %s", record.id, record.model)
        try:
            result = self._recognize(record)
            path = self.store.result_path(record.id)
            write_durably(path, json.dumps(result_dict(result)).encode())
        except ArengineError as error:
            self._failed(record, JobError(error.code.value, error.message))
            return
        except Exception as error:
            self._failed(record, _unexpected(record, error))
            return
        outcome = Outcome(None, path.name, result.audio.duration_s, time.time())
        recorded = self._record(record.id, outcome)
        if recorded:
            log.info("job %s: done, %d tags", record.id, len(result.tags))
            self.expire()  # its files may have passed the disk budget
        elif recorded is None:
            log.info("job %s: done; recorded once there is room", record.id)
        elif self.store.get(record.id) is None:  # removed while it ran
            path.unlink(missing_ok=True)

    def _recognize(self, record: JobRecord) -> Result:
        engine = self._engine
        overrides = dict(record.overrides)
        recognizers = engine.check(record.model, overrides, record.gate)
        upload = self.store.upload_path(record.id)
        plan = tuple(ModelPlan.of(recognizer) for recognizer in recognizers)
        scores = ScoreLog.open(self.store.scores_path(record.id), plan)
        try:
            _log_resumed(record.id, scores)
            tags: list[Tag] = []
            with self._condition:
                self._tags[record.id] = tags

            def hear(final: list[Tag]) -> None:  # on an engine thread
                with self._condition:
                    tags.extend(final)

            job = engine.recognize(
                upload,
                recognizers,
                overrides,
                record.id,
                audio_stream=record.stream,
                name=record.filename,
                keeper=scores,
                on_tags=hear,
                gate=record.gate,
            )
            with self._condition:
                self._running[record.id] = job
            stopped = False
            try:
                while True:
                    try:
                        return job.future.result(timeout=PROGRESS_EVERY_S)
                    except FutureTimeout:
                        try:
                            ours = self.store.progress(record.id, *job.progress, self._replica.name)
                        except BaseException:  # a full disk, say: the job stops with it
                            job.cancel()
                            raise
                        if not ours and not stopped:
                            # Removed (perhaps through another replica), or taken over.
                            stopped = True
                            log.info(
                                "job %s: no longer this server's (removed or taken over); stopped",
                                record.id,
                            )
                            job.cancel()
            finally:
                with self._condition:
                    self._running.pop(record.id, None)
        finally:
            scores.close()
            with self._condition:
                self._tags.pop(record.id, None)

    def _failed(self, record: JobRecord, error: JobError) -> None:
        if self._stopping():
            # Cut off by the shutdown, not failed: the row stays running and the next start
            # runs the job again.
            log.info("job %s: stopped by the shutdown; it runs again at the next start", record.id)
            return
        recorded = self._record(record.id, Outcome(error, finished=time.time()))
        if recorded is not False:
            later = "" if recorded else " (recorded once there is room)"
            log.info("job %s: failed, %s: %s%s", record.id, error.code, error.message, later)


def _unexpected(record: JobRecord, error: Exception) -> JobError:
    """A job's error for an exception that is no `ArengineError`: a full disk (its files or the
    database) or an unwritable file is `insufficient_storage`, anything else a fault logged."""
    if storage_full(error) or isinstance(error, OSError):
        log.error("job %s: its files could not be written: %s", record.id, error)
        reason = error.strerror if isinstance(error, OSError) else None
        return JobError(
            ErrorCode.INSUFFICIENT_STORAGE.value,
            f"the data directory is full or unwritable ({reason or error}): the job's files "
            "could not be written; submit it again once there is room",
        )
    log.exception("job %s: unexpected error", record.id, exc_info=error)
    message = f"an unexpected error; the server log has it under job {record.id}"
    return JobError(ErrorCode.INTERNAL_ERROR.value, message)


def _log_resumed(job_id: str, scores: ScoreLog) -> None:
    kept = [
        f"{len(offsets)} segments of {model.name}"
        for model, offsets in zip(scores.plan, scores.offsets, strict=True)
        if offsets
    ]
    if kept:
        log.info("job %s: resumed from its checkpoint: %s kept", job_id, ", ".join(kept))
