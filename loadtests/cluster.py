"""What loadtests/replicas.py runs its replicas with: a PostgreSQL of its own (the tests'
fixture, durable), `arengine serve` processes started again after a kill, and a client that
sends jobs to them in turn and waits for them, reading each result as soon as it is done.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from tests.postgres import PostgreSQL

KEPT_TABLES = re.compile(r"alembic|reference|fingerprint|hash|librar")
"""Tables that outlive every job (the schema's version, fingerprint libraries)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Postgres(PostgreSQL):
    """The tests' PostgreSQL (tests/postgres.py: initdb and pg_ctl in a temporary folder, run as
    `nobody` when this process is root), but durable as a real one is (fsync on), since the
    database's share of the time is measured; its jobs in the database `arengine`."""

    def start(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w",
                  "-t", "60", "start")  # fmt: skip
        self.query("CREATE DATABASE arengine", "postgres")

    def query(self, sql: str, database: str = "arengine") -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url(database), autocommit=True) as connection:
            cursor = connection.execute(sql.encode())
            return [] if cursor.description is None else list(cursor.fetchall())

    def active_s(self) -> float:
        """Seconds the database's sessions spent executing statements, as far as its backends
        have reported them (a busy one at most once a second, an idle one within 10 s)."""
        rows = self.query("SELECT active_time FROM pg_stat_database WHERE datname = 'arengine'")
        return float(rows[0][0] or 0.0) / 1000

    def job_rows(self) -> dict[str, int]:
        """Rows of every table but those that outlive the jobs."""
        tables = self.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        )
        names = [name for (name,) in tables if not KEPT_TABLES.search(name)]
        return {name: self.query(f'SELECT count(*) FROM "{name}"')[0][0] for name in names}


@dataclass
class Replica:
    """One `arengine serve`, started again (under a new name) after each kill; its log lines
    appended to one file across its lives."""

    index: int
    flags: list[str]
    env: dict[str, str]
    log: Path
    port: int = field(default_factory=free_port)
    lives: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.lives += 1
        name = ["--replica-name", f"r{self.index}-{self.lives}"]
        command = [sys.executable, "-m", "arengine", "serve", "--port", str(self.port)]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [*command, "--log-level", "info", *name, *self.flags],
                env={**os.environ, **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 180
        while not ready(self.url):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"replica {self.index} did not become ready: see {self.log}")
            time.sleep(0.1)

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=120)
            self.process = None


def ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


@contextmanager
def replicas(
    count: int, flags: list[str], env: dict[str, str], logs: Path
) -> Iterator[list[Replica]]:
    started = [Replica(i, flags, env, logs / f"replica-{i}.log") for i in range(count)]
    try:
        for replica in started:
            replica.start()
        yield started
    finally:
        for replica in started:
            replica.stop()


@dataclass(frozen=True)
class Sent:
    """The jobs acknowledged (id to its recording) and the uploads that got no answer."""

    jobs: dict[str, Path]
    unanswered: int


def send_all(
    group: Sequence[Replica],
    files: Sequence[Path],
    jobs: dict[str, Path] | None = None,
    model: str = "speech",
) -> Sent:
    """Each file as a job of `model`, four at a time, to the replicas in turn; a
    refused or lost upload is sent again to the next one (a lost one may have been stored:
    counted as unanswered). Each acknowledged job is added to `jobs` as it comes."""
    lock = threading.Lock()
    jobs = {} if jobs is None else jobs
    unanswered = 0

    def send(number: int, path: Path) -> None:
        nonlocal unanswered
        for attempt in range(1000):
            url = group[(number + attempt) % len(group)].url
            try:
                with path.open("rb") as body:
                    response = httpx.post(
                        f"{url}/v1/jobs", params={"model": model}, files={"file": body},
                        timeout=600,
                    )  # fmt: skip
            except httpx.TransportError:
                with lock:
                    unanswered += 1
                time.sleep(0.2)
                continue
            if response.status_code == 202:
                with lock:
                    jobs[response.json()["id"]] = path
                return
            if response.status_code not in (502, 503):
                raise RuntimeError(f"POST /v1/jobs: {response.status_code} {response.text}")
            time.sleep(float(response.headers.get("retry-after", "1")))
        raise RuntimeError(f"{path} was never accepted")

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(send, range(len(files)), files))
    return Sent(jobs, unanswered)


def listed(group: Sequence[Replica]) -> list[dict[str, Any]] | None:
    """Every job, from the first replica that answers."""
    for replica in group:
        try:
            response = httpx.get(f"{replica.url}/v1/jobs", timeout=30)
        except httpx.TransportError:
            continue
        if response.status_code == 200:
            jobs: list[dict[str, Any]] = response.json()["jobs"]
            return jobs
    return None


Tags = list[dict[str, Any]]


def wait_done(
    group: Sequence[Replica],
    ids: dict[str, Path],
    timeout_s: float,
    fetch: bool = False,
    sending: Callable[[], bool] = lambda: False,
) -> tuple[dict[str, Any], dict[str, Tags | None]]:
    """The jobs `ids` (while `sending`, more may come) once each has ended (done or failed),
    by id; with `fetch`, each done job's tags, read as soon as it is seen done, as a client
    would before the retention time removes it (None: it was gone)."""
    deadline = time.monotonic() + timeout_s
    tags: dict[str, Tags | None] = {}
    # Every job seen ended, kept: one that ended early may be gone from the list (its retention
    # over) before the last one ends.
    ended: dict[str, Any] = {}
    while time.monotonic() < deadline:
        more = sending()
        known = set(ids.copy())  # one step under the GIL, while the senders add to it
        jobs = listed(group) or []
        ended |= {job["id"]: job for job in jobs if job["state"] in {"done", "failed", "cancelled"}}
        for job_id in known & set(ended) - set(tags) if fetch else ():
            if ended[job_id]["state"] == "done":
                tags[job_id] = result_tags(group, job_id)
        if not more and known <= set(ended):
            return ended, tags
        time.sleep(1.0)
    raise RuntimeError(f"jobs still running after {timeout_s:.0f} s")


def wait_forgotten(group: Sequence[Replica], timeout_s: float) -> None:
    """Until no job is listed any more (each removed past its retention), or `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if listed(group) == []:
            return
        time.sleep(5)


def result_tags(group: Sequence[Replica], job_id: str) -> Tags | None:
    """A done job's tags from the first replica that answers; None when it is gone (404)."""
    for replica in group:
        try:
            response = httpx.get(f"{replica.url}/v1/jobs/{job_id}/result", timeout=120)
        except httpx.TransportError:
            continue
        if response.status_code == 404:
            return None
        response.raise_for_status()
        tags: Tags = response.json()["tags"]
        return tags
    raise RuntimeError("no replica answers")


def direct_tags(url: str, path: Path, model: str = "speech") -> list[dict[str, Any]]:
    with path.open("rb") as body:
        response = httpx.post(
            f"{url}/v1/recognize", params={"model": model}, files={"file": body}, timeout=1200
        )
    response.raise_for_status()
    tags: list[dict[str, Any]] = response.json()["tags"]
    return tags
