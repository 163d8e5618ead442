"""Several replicas on one PostgreSQL and one shared directory: job throughput with 1, 2 and 3
replicas against the single SQLite server, and every job done exactly once while a random
replica is killed (`kill -9`) every few seconds.

    python -m loadtests.replicas --jobs 200 --long-jobs 3 --kill-every-s 20

Each replica is a real `arengine serve` on 127.0.0.1 with one engine thread, `--models speech`,
the same `ARENGINE_DATABASE_URL` (a PostgreSQL started here in a temporary directory, with
`initdb` and `pg_ctl`, as the tests' fixture does) and the same `--data-dir`.

1. Throughput (`--phases throughput`): `--jobs` jobs of `--job-minutes` sent at once, timed from
   the first upload to the last job done, on one server with its embedded SQLite store, then on
   1, 2 and 3 (`--replicas`) replicas sharing the PostgreSQL; with the database's share of the
   replicas' time: PostgreSQL's own `active_time` (pg_stat_database: statements executing)
   over the replicas' busy time (wall time x replicas, one job at a time each).
2. Kills (`--phases kills`): `--jobs` short jobs and `--long-jobs` jobs of `--long-minutes`,
   sent while a random replica is killed every `--kill-every-s` and started again under a new
   name (as a Kubernetes pod would be), so the others take its jobs over after `--job-lease-s`.
   Checked: every acknowledged job (202) is done exactly once (one "done" record in all the
   replicas' logs), its tags equal to a direct recognition's (`POST /v1/recognize` of the same
   file); after the retention time (60 s, the least allowed) nothing is left in the data
   directory nor in the database's job tables.

Prints Markdown tables; exits 1 when a check fails. Real servers on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from loadtests.recordings import write_recording
from tests.postgres import PostgreSQL

RETENTION_S = 60.0
"""The least `job_retention_s` allows: the kills phase waits for it, then for the next sweep."""
DONE = re.compile(r"^job (\S+): done, \d+ tags$")
"""The log line a replica writes once its finish of a job is recorded (arengine/jobs/runner.py)."""
STATISTICS_S = 11.0
"""Longer than PostgreSQL takes to report an idle backend's statistics (PGSTAT_IDLE_INTERVAL)."""
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


def send_all(group: Sequence[Replica], files: Sequence[Path], workers: int = 4) -> Sent:
    """Each file as a job (`--models speech`), to the replicas in turn; a refused or lost upload
    is sent again to the next one (a lost one may have been stored: counted as unanswered)."""
    lock = threading.Lock()
    jobs: dict[str, Path] = {}
    unanswered = 0

    def send(number: int, path: Path) -> None:
        nonlocal unanswered
        for attempt in range(1000):
            url = group[(number + attempt) % len(group)].url
            try:
                with path.open("rb") as body:
                    response = httpx.post(
                        f"{url}/v1/jobs", params={"model": "speech"}, files={"file": body},
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

    with ThreadPoolExecutor(workers) as pool:
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


def wait_done(group: Sequence[Replica], ids: set[str], timeout_s: float) -> dict[str, Any]:
    """The jobs `ids` once each has ended (done or failed), by id."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        jobs = listed(group) or []
        ended = {job["id"]: job for job in jobs if job["state"] in {"done", "failed", "cancelled"}}
        if ids <= set(ended):
            return ended
        time.sleep(1.0)
    raise RuntimeError(f"jobs still running after {timeout_s:.0f} s")


def wait_forgotten(group: Sequence[Replica], timeout_s: float) -> None:
    """Until no job is listed any more (each removed past its retention), or `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if listed(group) == []:
            return
        time.sleep(5)


def result_tags(group: Sequence[Replica], job_id: str) -> list[dict[str, Any]]:
    for replica in group:
        try:
            response = httpx.get(f"{replica.url}/v1/jobs/{job_id}/result", timeout=120)
        except httpx.TransportError:
            continue
        response.raise_for_status()
        tags: list[dict[str, Any]] = response.json()["tags"]
        return tags
    raise RuntimeError("no replica answers")


def direct_tags(url: str, path: Path) -> list[dict[str, Any]]:
    with path.open("rb") as body:
        response = httpx.post(
            f"{url}/v1/recognize", params={"model": "speech"}, files={"file": body}, timeout=1200
        )
    response.raise_for_status()
    tags: list[dict[str, Any]] = response.json()["tags"]
    return tags


def done_records(logs: Sequence[Path]) -> Counter[str]:
    """How many times each job's finish was recorded, from every replica's JSON log lines."""
    counts: Counter[str] = Counter()
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                message = json.loads(line).get("message", "")
            except json.JSONDecodeError:  # a line cut by the kill
                continue
            if found := DONE.match(message):
                counts[found.group(1)] += 1
    return counts


def leftover_files(data: Path) -> list[str]:
    """Files of the jobs still in the data directory (uploads, results, kept scores)."""
    return sorted(
        str(path.relative_to(data))
        for folder in ("uploads", "results")
        for path in (data / folder).rglob("*")
        if path.is_file()
    )


def recordings(folder: Path, count: int, minutes: float, tag: str) -> list[Path]:
    made = []
    for seed in range(count):
        path = folder / f"{tag}-{seed}.wav"
        write_recording(path, minutes, 16000, 1, seed=seed)
        made.append(path)
    return made


def server_flags(data: Path, args: argparse.Namespace, retention_s: float) -> list[str]:
    queue = args.jobs + args.long_jobs + 16
    return [
        "--models", "speech", "--engine-threads", "1", "--data-dir", str(data),
        "--max-queued-jobs", str(queue), "--job-lease-s", str(args.job_lease_s),
        "--job-retention-s", str(retention_s),
    ]  # fmt: skip


@dataclass(frozen=True)
class Throughput:
    label: str
    replicas: int
    jobs: int
    seconds: float
    database_s: float | None

    def row(self) -> str:
        per_minute = self.jobs / self.seconds * 60
        if self.database_s is None:
            share = "-"
        else:
            per_job = self.database_s / self.jobs * 1000
            share = f"{per_job:.1f} ms ({self.database_s / (self.seconds * self.replicas):.1%})"
        cells = [self.label, self.replicas, self.jobs, f"{self.seconds:.1f}", f"{per_minute:.1f}"]
        return "| " + " | ".join(map(str, [*cells, share])) + " |"


def timed_batch(group: Sequence[Replica], files: Sequence[Path]) -> float:
    """Seconds from the first upload to the last job done."""
    begin = time.monotonic()
    sent = send_all(group, files)
    ended = wait_done(group, set(sent.jobs), 3600)
    failed = [job_id for job_id, job in ended.items() if job["state"] != "done"]
    if failed:
        raise RuntimeError(f"jobs failed: {failed[:5]}")
    return time.monotonic() - begin


def throughput(args: argparse.Namespace, folder: Path, files: list[Path]) -> list[Throughput]:
    rows = []
    sqlite = folder / "sqlite"
    logs = folder / "logs-sqlite"
    logs.mkdir()
    with replicas(1, server_flags(sqlite, args, 7 * 86400), {}, logs) as group:
        rows.append(
            Throughput("one server, SQLite", 1, len(files), timed_batch(group, files), None)
        )
    for count in range(1, args.replicas + 1):
        database = Postgres()
        database.start()
        env = {"ARENGINE_DATABASE_URL": database.url("arengine")}
        data, logs = folder / f"shared-{count}", folder / f"logs-{count}"
        logs.mkdir()
        try:
            with replicas(count, server_flags(data, args, 7 * 86400), env, logs) as group:
                # Each side of the batch, the start-up's and the batch's statistics reported:
                # a busy backend reports at most once a second, an idle one within 10 s.
                time.sleep(STATISTICS_S)
                before = database.active_s()
                seconds = timed_batch(group, files)
                time.sleep(STATISTICS_S)
                rows.append(
                    Throughput(
                        "PostgreSQL", count, len(files), seconds, database.active_s() - before
                    )
                )
        finally:
            database.stop()
    return rows


class Killer(threading.Thread):
    """Every `every_s`, SIGKILL a random replica and start it again under a new name."""

    def __init__(self, group: Sequence[Replica], every_s: float, seed: int) -> None:
        super().__init__(daemon=True)
        self.group, self.every_s, self.random = group, every_s, random.Random(seed)
        self.stopping = threading.Event()
        self.kills = 0

    def run(self) -> None:
        while not self.stopping.wait(self.every_s):
            replica = self.random.choice(self.group)
            replica.kill()
            self.kills += 1
            try:
                replica.start()
            except RuntimeError as error:  # reported; the other replicas go on
                print(f"kills: {error}", file=sys.stderr)


def kills(args: argparse.Namespace, folder: Path, short: list[Path], long: list[Path]) -> bool:
    """The kills phase; whether every check passed."""
    files = [short[i % len(short)] for i in range(args.jobs)]
    files += [long[i % len(long)] for i in range(args.long_jobs)]
    random.Random(args.seed).shuffle(files)
    database = Postgres()
    database.start()
    env = {"ARENGINE_DATABASE_URL": database.url("arengine")}
    data = folder / "shared-kills"
    logs = folder / "kills"
    logs.mkdir()
    flags = server_flags(data, args, RETENTION_S)
    try:
        with replicas(args.replicas, flags, env, logs) as group:
            direct = {path: direct_tags(group[0].url, path) for path in {*short, *long}}
            killer = Killer(group, args.kill_every_s, args.seed)
            killer.start()
            sent = send_all(group, files)
            ended = wait_done(group, set(sent.jobs), args.timeout_s)
            killer.stopping.set()
            killer.join()
            return report_kills(group, database, data, sent, ended, direct, killer.kills, logs)
    finally:
        database.stop()


def report_kills(
    group: Sequence[Replica],
    database: Postgres,
    data: Path,
    sent: Sent,
    ended: dict[str, Any],
    direct: dict[Path, list[dict[str, Any]]],
    killed: int,
    logs: Path,
) -> bool:
    records = done_records(sorted(logs.glob("replica-*.log")))
    not_done = [i for i in sent.jobs if ended[i]["state"] != "done"]
    twice = [i for i in sent.jobs if records[i] > 1]
    unlogged = [i for i in sent.jobs if records[i] == 0]
    different = [i for i, path in sent.jobs.items() if result_tags(group, i) != direct[path]]
    lines = [
        f"{len(sent.jobs)} jobs acknowledged, {sent.unanswered} uploads unanswered, {killed} kills",
        f"not done: {len(not_done)}; done more than once: {len(twice)}",
        f"tags unlike a direct recognition's: {len(different)}",
        f"done, with no log record (a kill between the finish and its line): {len(unlogged)}",
    ]
    print("\n" + "\n".join(lines))
    wait_forgotten(group, RETENTION_S + 3 * 60)
    files, rows = leftover_files(data), database.job_rows()
    print(f"after retention: {len(files)} files left {files[:5]}, rows left {rows}")
    return not (not_done or twice or different or files or any(rows.values()))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=200, help="short jobs")
    parser.add_argument("--job-minutes", type=float, default=1.0)
    parser.add_argument("--long-jobs", type=int, default=3, help="long jobs (kills phase)")
    parser.add_argument("--long-minutes", type=float, default=20.0)
    parser.add_argument("--recordings", type=int, default=4, help="distinct short recordings")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--kill-every-s", type=float, default=20.0)
    parser.add_argument("--job-lease-s", type=float, default=10.0)
    parser.add_argument("--timeout-s", type=float, default=3 * 3600, help="kills phase, to done")
    parser.add_argument("--phases", default="throughput,kills")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="arengine-replicas-"))
    short = recordings(folder, args.recordings, args.job_minutes, "short")
    phases = args.phases.split(",")
    ok = True
    if "throughput" in phases:
        files = [short[i % len(short)] for i in range(args.jobs)]
        rows = throughput(args, folder, files)
        print(f"\nload average at the end: {os.getloadavg()}")
        print(
            "| store | replicas | jobs | s to all done | jobs a minute | database per job (share) |"
        )
        print("|---|---|---|---|---|---|")
        for row in rows:
            print(row.row())
    if "kills" in phases:
        long = recordings(folder, 1, args.long_minutes, "long") if args.long_jobs else []
        ok = kills(args, folder, short, long)
        print(f"load average at the end: {os.getloadavg()}")
    print("checks passed" if ok else "CHECKS FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
