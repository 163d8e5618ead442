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
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from arengine.engine.engine import Engine
from arengine.engine.job import Job
from arengine.errors import ArengineError, ErrorCode
from arengine.jobs.scores import ModelPlan, ScoreLog
from arengine.jobs.store import JobError, JobRecord, JobStore, write_durably
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
    ) -> None:
        self.store = store
        self._engine = engine
        self._retention = retention
        self._replica = replica
        self._condition = threading.Condition()
        self._running: dict[str, Job] = {}
        self._tags: dict[str, list[Tag]] = {}
        """The tags final so far of each job running here (for `GET /v1/jobs/{id}/events`)."""
        self._closing = False
        self._full = False
        """Whether the store's files passed the budget at the last look (warned once)."""
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
            self.notify()

    def _look_after(self) -> None:
        """Every few seconds, take over silent replicas' jobs; every minute, expire."""
        tick = min(self._replica.lease_s / 3, RETENTION_EVERY_S)
        expired = 0.0
        while True:
            try:
                self.take_over()
                if time.monotonic() - expired >= RETENTION_EVERY_S:
                    expired = time.monotonic()
                    self.expire()
            except Exception:
                log.exception("looking after the job store failed; retrying")
            with self._condition:
                if self._closing or self._condition.wait_for(lambda: self._closing, tick):
                    return

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
            except Exception:  # the store failed: the row stays running, run again at restart
                log.exception("job %s: the job store failed", record.id)

    def _claim(self) -> JobRecord | None:
        """The next queued job once the models are loaded; a store fault is logged and retried
        rather than ending the thread."""
        if not self._engine.ready:
            return None
        try:
            return self.store.claim_next(self._replica.name)
        except Exception:
            log.exception("the job store failed; retrying")
            return None

    def _run(self, record: JobRecord) -> None:
        log.info("job %s: running %s", record.id, record.model)
        try:
            result = self._recognize(record)
            path = self.store.result_path(record.id)
            write_durably(path, json.dumps(result_dict(result)).encode())
        except ArengineError as error:
            self._failed(record, JobError(error.code.value, error.message))
            return
        except OSError as error:
            log.error("job %s: its result could not be stored: %s", record.id, error)
            message = f"the result could not be stored ({error.strerror or error})"
            self._failed(record, JobError(ErrorCode.INSUFFICIENT_STORAGE.value, message))
            return
        except Exception:
            log.exception("job %s: unexpected error", record.id)
            message = f"an unexpected error; the server log has it under job {record.id}"
            self._failed(record, JobError(ErrorCode.INTERNAL_ERROR.value, message))
            return
        duration = result.audio.duration_s
        name = self._replica.name
        if self.store.finish(record.id, result=path.name, duration_s=duration, runner=name):
            log.info("job %s: done, %d tags", record.id, len(result.tags))
            # Its result and scores are all a done job needs: the recording is not kept.
            self.store.upload_path(record.id).unlink(missing_ok=True)
            self.expire()  # its files may have passed the disk budget
        elif self.store.get(record.id) is None:  # removed while it ran
            path.unlink(missing_ok=True)

    def _recognize(self, record: JobRecord) -> Result:
        engine = self._engine
        overrides = dict(record.overrides)
        recognizers = engine.check(record.model, overrides)
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
                stream=record.stream,
                name=record.filename,
                keeper=scores,
                on_tags=hear,
            )
            with self._condition:
                self._running[record.id] = job
            try:
                while True:
                    try:
                        return job.future.result(timeout=PROGRESS_EVERY_S)
                    except FutureTimeout:
                        if not self.store.progress(record.id, *job.progress, self._replica.name):
                            # Removed (perhaps through another replica), or taken over.
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
        if self.store.finish(record.id, error=error, runner=self._replica.name):
            self.store.scores_path(record.id).unlink(missing_ok=True)
            log.info("job %s: failed, %s: %s", record.id, error.code, error.message)


def _log_resumed(job_id: str, scores: ScoreLog) -> None:
    kept = [
        f"{len(offsets)} segments of {model.name}"
        for model, offsets in zip(scores.plan, scores.offsets, strict=True)
        if offsets
    ]
    if kept:
        log.info("job %s: resumed from its checkpoint: %s kept", job_id, ", ".join(kept))
