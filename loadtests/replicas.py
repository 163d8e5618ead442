"""Several replicas on one PostgreSQL and one shared directory: job throughput with 1, 2 and 3
replicas against the single SQLite server, and every job done exactly once while a random
replica is killed (`kill -9`) every few seconds.

    python -m loadtests.replicas --jobs 200 --long-jobs 3 --kill-every-s 20

Each replica is a real `arengine serve` on 127.0.0.1 with one engine thread, `--models MODEL`
(`--model`, speech by default), the same `ARENGINE_DATABASE_URL` (a PostgreSQL started here in
a temporary directory, with `initdb` and `pg_ctl`, as the tests' fixture does) and the same
`--data-dir`.

1. Throughput (`--phases throughput`): `--jobs` jobs of `--job-minutes` sent at once, timed from
   the first upload to the last job done, on one server with its embedded SQLite store, then on
   1, 2 and 3 (`--replicas`) replicas sharing the PostgreSQL; with the database's share of the
   replicas' busy time (wall time x replicas, one job at a time each), seen from both sides:
   the replicas' time in statements (`arengine_db_query_seconds`, SQLite's too), and
   PostgreSQL's own `active_time` (pg_stat_database: statements executing).
2. Kills (`--phases kills`): `--jobs` short jobs and `--long-jobs` jobs of `--long-minutes`,
   sent while a random replica is killed every `--kill-every-s` and started again under a new
   name (as a Kubernetes pod would be), so the others take its jobs over after `--job-lease-s`.
   Checked: every acknowledged job (202) is done exactly once (one "done" record in all the
   replicas' logs), its tags (read as soon as it is done) equal to a direct recognition's
   (`POST /v1/recognize` of the same file); after the retention time (`--retention-s`) nothing
   is left in the data directory nor in the database's job tables, but the spool files of
   uploads a kill cut (listed: the sweep takes them after an hour, as it cannot tell them from
   another replica's upload still arriving).

Prints Markdown tables; exits 1 when a check fails. Real servers on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from arengine.http.upload_dir import SPOOLED
from arengine.jobs.store import SWEEP_GRACE_S
from loadtests.cluster import (
    Postgres,
    Replica,
    Sent,
    Tags,
    direct_tags,
    replicas,
    send_all,
    wait_done,
    wait_forgotten,
)
from loadtests.recordings import write_recording

DONE = re.compile(r"^job (\S+): done, \d+ tags$")
"""The log line a replica writes once its finish of a job is recorded (arengine/jobs/runner.py)."""
STATISTICS_S = 11.0
"""Longer than PostgreSQL takes to report an idle backend's statistics (PGSTAT_IDLE_INTERVAL)."""


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
        "--models", args.model, "--engine-threads", "1", "--data-dir", str(data),
        "--max-queued-jobs", str(queue), "--job-lease-s", str(args.job_lease_s),
        "--job-retention-s", str(retention_s),
    ]  # fmt: skip


@dataclass(frozen=True)
class Throughput:
    label: str
    replicas: int
    jobs: int
    seconds: float
    statements_s: float
    """The replicas' own time in statements (`arengine_db_query_seconds`), the batch's."""
    database_s: float | None
    """PostgreSQL's active time over the batch (None: SQLite, in the server's process)."""

    def row(self) -> str:
        per_minute = self.jobs / self.seconds * 60
        cells = [self.label, self.replicas, self.jobs, f"{self.seconds:.1f}", f"{per_minute:.1f}"]
        shares = [self._share(self.statements_s), self._share(self.database_s)]
        return "| " + " | ".join(map(str, [*cells, *shares])) + " |"

    def _share(self, seconds: float | None) -> str:
        """Per job, and as a part of the replicas' busy time (one job at a time each)."""
        if seconds is None:
            return "-"
        busy = self.seconds * self.replicas
        return f"{seconds / self.jobs * 1000:.1f} ms ({seconds / busy:.1%})"


def statement_seconds(group: Sequence[Replica]) -> float:
    """The replicas' time in the database's statements so far, from their /metrics."""
    total = 0.0
    for replica in group:
        text = httpx.get(f"{replica.url}/metrics", timeout=30).text
        for line in text.splitlines():
            if line.startswith("arengine_db_query_seconds_sum"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def timed_batch(group: Sequence[Replica], files: Sequence[Path], model: str) -> tuple[float, float]:
    """Seconds from the first upload to the last job done, and of them the replicas' in the
    database's statements (the tool's own polls of the job list included)."""
    statements = statement_seconds(group)
    begin = time.monotonic()
    sent = send_all(group, files, model=model)
    ended, _ = wait_done(group, sent.jobs, 3600)
    failed = [job_id for job_id, job in ended.items() if job["state"] != "done"]
    if failed:
        raise RuntimeError(f"jobs failed: {failed[:5]}")
    return time.monotonic() - begin, statement_seconds(group) - statements


def throughput(args: argparse.Namespace, folder: Path, files: list[Path]) -> list[Throughput]:
    rows = []
    sqlite = folder / "sqlite"
    logs = folder / "logs-sqlite"
    logs.mkdir()
    with replicas(1, server_flags(sqlite, args, 7 * 86400), {}, logs) as group:
        seconds, statements = timed_batch(group, files, args.model)
        rows.append(Throughput("one server, SQLite", 1, len(files), seconds, statements, None))
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
                seconds, statements = timed_batch(group, files, args.model)
                time.sleep(STATISTICS_S)
                active = database.active_s() - before
                rows.append(
                    Throughput("PostgreSQL", count, len(files), seconds, statements, active)
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
    flags = server_flags(data, args, args.retention_s)
    try:
        with replicas(args.replicas, flags, env, logs) as group:
            direct = {path: direct_tags(group[0].url, path, args.model) for path in {*short, *long}}
            killer = Killer(group, args.kill_every_s, args.seed)
            killer.start()
            jobs: dict[str, Path] = {}
            with ThreadPoolExecutor(1) as sender:
                sending = sender.submit(send_all, group, files, jobs, args.model)
                ended, tags = wait_done(
                    group, jobs, args.timeout_s, fetch=True, sending=lambda: not sending.done()
                )
                sent = sending.result()
            killer.stopping.set()
            killer.join()
            outcome = Outcome(sent, ended, tags, killer.kills)
            return report_kills(group, database, data, outcome, direct, logs, args.retention_s)
    finally:
        database.stop()


@dataclass(frozen=True)
class Outcome:
    """What the kills phase saw: the jobs sent, how each ended, their tags, the kills made."""

    sent: Sent
    ended: dict[str, Any]
    tags: dict[str, Tags | None]
    kills: int


def report_kills(
    group: Sequence[Replica],
    database: Postgres,
    data: Path,
    outcome: Outcome,
    direct: Mapping[Path, Tags],
    logs: Path,
    retention_s: float,
) -> bool:
    sent, killed = outcome.sent, outcome.kills
    records = done_records(sorted(logs.glob("replica-*.log")))
    not_done = [i for i in sent.jobs if outcome.ended[i]["state"] != "done"]
    twice = [i for i in sent.jobs if records[i] > 1]
    unlogged = [i for i in sent.jobs if records[i] == 0]
    gone = [i for i in sent.jobs if i not in not_done and outcome.tags.get(i) is None]
    different = [
        i for i, path in sent.jobs.items() if outcome.tags.get(i) not in (None, direct[path])
    ]
    lines = [
        f"{len(sent.jobs)} jobs acknowledged, {sent.unanswered} uploads unanswered, {killed} kills",
        f"not done: {len(not_done)}; done more than once: {len(twice)}",
        f"tags unlike a direct recognition's: {len(different)}; result gone unread: {len(gone)}",
        f"done, with no log record (a kill between the finish and its line): {len(unlogged)}",
    ]
    lines += [f"  not done: {i} {outcome.ended[i]}" for i in not_done[:5]]
    print("\n" + "\n".join(lines))
    wait_forgotten(group, retention_s + 3 * 60)
    left, rows = leftover_files(data), database.job_rows()
    # An upload cut by a kill leaves its spool file, which no replica may tell from another's
    # upload still arriving on a shared directory: the sweep takes it after SWEEP_GRACE_S.
    spools = [name for name in left if SPOOLED.match(Path(name).name)]
    files = [name for name in left if name not in spools]
    print(f"after retention: {len(files)} files left {files[:5]}, rows left {rows}")
    print(f"spools of uploads cut by a kill, for the sweep after {SWEEP_GRACE_S:.0f} s: {spools}")
    return not (not_done or twice or gone or different or files or any(rows.values()))


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
    parser.add_argument(
        "--model",
        default="speech",
        help="the model every job asks for (a slower one, `events`, keeps jobs running across "
        "more kills)",
    )
    parser.add_argument("--kill-every-s", type=float, default=20.0)
    parser.add_argument("--job-lease-s", type=float, default=10.0)
    parser.add_argument("--timeout-s", type=float, default=3 * 3600, help="kills phase, to done")
    parser.add_argument(
        "--retention-s", type=float, default=120.0,
        help="kills phase: job_retention_s, then waited for (60 at least)",
    )  # fmt: skip
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
            "| store | replicas | jobs | s to all done | jobs a minute | statements per job "
            "(share), the replicas' view | PostgreSQL's active time per job (share) |"
        )
        print("|---|---|---|---|---|---|---|")
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
