"""Job webhooks against a real receiver on 127.0.0.1: signed as the Standard Webhooks reference
verifies, written with the job's end, retried until the receiver answers, stopped by a 4xx, never
following a redirect nor reading a huge answer, and kept across a crash mid-attempt."""

from __future__ import annotations

import base64
import ipaddress
import json
import ssl
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from standardwebhooks.webhooks import Webhook

import arengine.jobs.webhooks as webhooks_module
from arengine.jobs.destinations import Allowlist, IPAddress, parse_url
from arengine.jobs.outbox import ORPHAN_AFTER_S, Outbox
from arengine.jobs.store import JobError, JobRecord, JobState, JobStore, new_job_id
from arengine.jobs.webhooks import (
    ATTEMPT_TIMEOUTS,
    CLOSE_WAIT_S,
    Attempt,
    Outcome,
    Policy,
    WebhookConfig,
    Webhooks,
    parse_secret,
    post,
)
from arengine.system.metrics import WEBHOOK_OUTCOMES, WEBHOOK_RESULTS, Metrics
from tests.conftest import wait_until
from tests.receiver import DRIP, HUGE, Receiver, receiving

SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
FAST = Policy(max_attempts=20, backoff_s=0.01, max_backoff_s=0.05, timeout_s=10)
LOOPBACK = Allowlist.parse("127.0.0.1")


class Sent:
    """A store, its outbox's senders and their metrics."""

    def __init__(self, folder: Path, policy: Policy, allow: Allowlist, **options: object) -> None:
        self.store = JobStore.open(folder)
        self.metrics = Metrics(CollectorRegistry())
        config = WebhookConfig(parse_secret(SECRET), allow, policy, "here:8000")
        self.webhooks = Webhooks(Outbox.open(folder), config, self.metrics, **options)  # type: ignore[arg-type]
        self.outbox = self.webhooks.outbox
        self.store.on_webhook = self.webhooks.notify  # as the server wires them

    def job(self, url: str) -> str:
        record = JobRecord(
            id=new_job_id(),
            owner=None,
            model="speech",
            overrides={},
            stream=None,
            filename=None,
            state=JobState.QUEUED,
            done_s=0.0,
            duration_s=None,
            error=None,
            created=time.time(),
            finished=None,
            result=None,
        )
        self.outbox.subscribe(record.id, url)
        assert self.store.add(record, 100)
        return record.id

    def finish(self, job_id: str, error: JobError | None = None) -> None:
        claimed = self.store.claim_next()
        assert claimed is not None and claimed.id == job_id
        if error is None:
            assert self.store.finish(job_id, result=f"{job_id}.json", duration_s=1.0)
        else:
            assert self.store.finish(job_id, error=error)

    def count(self, name: str, label: str, value: str) -> float:
        sample = self.metrics.registry.get_sample_value(f"{name}_total", {label: value})
        return sample or 0.0

    def outcome(self, outcome: Outcome) -> float:
        return self.count("arengine_webhook_deliveries", "outcome", outcome.value)

    def attempts(self, result: Attempt) -> float:
        return self.count("arengine_webhook_attempts", "result", result.value)

    def settled(self, outcome: Outcome, count: int = 1) -> bool:
        return wait_until(lambda: self.outcome(outcome) >= count and self.outbox.depth() == 0)


@contextmanager
def sending(
    folder: Path,
    policy: Policy = FAST,
    allow: Allowlist = LOOPBACK,
    start: bool = True,
    **options: object,
) -> Iterator[Sent]:
    sent = Sent(folder, policy, allow, **options)
    if start:
        sent.webhooks.start()
    try:
        yield sent
    finally:
        if start:
            sent.webhooks.close()
        else:
            sent.outbox.close()
        sent.store.close()


def _verified(received: object) -> dict[str, object]:
    """The body, once the Standard Webhooks reference code has verified its signature."""
    body: bytes = received.body  # type: ignore[attr-defined]
    verified: dict[str, object] = Webhook(SECRET).verify(body, received.headers)  # type: ignore[attr-defined]
    return verified


def test_a_job_s_end_is_posted_once_signed_as_the_reference_verifies(tmp_path: Path) -> None:
    with receiving() as receiver, sending(tmp_path) as sent:
        done = sent.job(receiver.url)
        sent.finish(done)
        assert sent.settled(Outcome.DELIVERED)
        failed = sent.job(receiver.url)
        sent.finish(failed, JobError("corrupt_audio", "the audio cannot be decoded"))
        assert sent.settled(Outcome.DELIVERED, 2)
        cancelled = sent.job(receiver.url)
        sent.store.remove(cancelled)
        assert sent.settled(Outcome.DELIVERED, 3)
        # A done job removed later (DELETE, retention) is not announced again.
        sent.store.remove(done)
        sent.store.expire(time.time() + 10, 1 << 30)
        assert sent.outbox.depth() == 0
    bodies = [_verified(received) for received in receiver.received]
    assert [(b["id"], b["state"], b["type"]) for b in bodies] == [
        (done, "done", "job.done"),
        (failed, "failed", "job.failed"),
        (cancelled, "cancelled", "job.cancelled"),
    ]
    assert bodies[0]["error"] is None and bodies[0]["model"] == "speech"
    assert bodies[1]["error"] == {"code": "corrupt_audio", "message": "the audio cannot be decoded"}
    assert all(str(b["finished"]).endswith("+00:00") for b in bodies)
    headers = receiver.received[0].headers
    assert (
        headers["webhook-id"].startswith("msg_") and headers["content-type"] == "application/json"
    )
    assert headers["host"] == f"127.0.0.1:{receiver.port}"
    assert receiver.received[0].path == "/hook"
    assert len({r.headers["webhook-id"] for r in receiver.received}) == 3
    assert sent.attempts(Attempt.SUCCESS) == 3


def test_a_job_that_ends_here_wakes_a_sender_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Idle senders look for webhooks due once an hour here: the job's end wakes one (before,
    a webhook waited for their next look, up to `POLL_S`)."""
    monkeypatch.setattr(webhooks_module, "POLL_S", 3600.0)
    with receiving() as receiver, sending(tmp_path) as sent:
        time.sleep(0.5)  # the senders' first look is over: they wait
        for count in (1, 2, 3):
            job = sent.job(receiver.url)
            if count == 3:
                sent.store.remove(job)  # a cancel wakes them too
            else:
                sent.finish(job)
            assert receiver.wait_for(count, 20)
            assert sent.settled(Outcome.DELIVERED, count)
            time.sleep(0.5)  # back to waiting
    assert len({received.headers["webhook-id"] for received in receiver.received}) == 3


def test_a_tampered_body_fails_the_reference_verification(tmp_path: Path) -> None:
    with receiving() as receiver, sending(tmp_path) as sent:
        sent.finish(sent.job(receiver.url))
        assert sent.settled(Outcome.DELIVERED)
    received = receiver.received[0]
    with pytest.raises(Exception, match="signature"):
        Webhook(SECRET).verify(received.body.replace(b"done", b"fail"), received.headers)


def test_a_receiver_down_then_back_gets_the_webhook_once_back(tmp_path: Path) -> None:
    with receiving() as probe:
        port = probe.port
    down = Receiver(port=port)
    with sending(tmp_path) as sent:
        sent.finish(sent.job(down.url))
        # Refused connections, again and again, each counted, the webhook still waiting.
        assert wait_until(lambda: sent.attempts(Attempt.ERROR) >= 3)
        assert sent.outbox.depth() == 1 and sent.outcome(Outcome.DELIVERED) == 0
        # Back, answering 503, 429 and 408 first (each retried), then 200.
        with receiving(Receiver(port=port, script=[503, 429, 408])) as back:
            assert sent.settled(Outcome.DELIVERED)
    assert [r.headers["webhook-id"] for r in back.received] == [
        back.received[0].headers["webhook-id"]
    ] * 4
    for received in back.received:
        _verified(received)
    assert sent.attempts(Attempt.SERVER_ERROR) == 1 and sent.attempts(Attempt.CLIENT_ERROR) == 2


def test_a_410_stops_the_retries(tmp_path: Path) -> None:
    with receiving(Receiver(script=[410])) as receiver, sending(tmp_path) as sent:
        sent.finish(sent.job(receiver.url))
        assert sent.settled(Outcome.REJECTED)
        sent.webhooks.notify()
    assert len(receiver.received) == 1
    assert sent.outcome(Outcome.DELIVERED) == 0


def test_a_redirect_is_not_followed(tmp_path: Path) -> None:
    policy = Policy(max_attempts=2, backoff_s=0.01, max_backoff_s=0.05, timeout_s=10)
    with receiving(Receiver(script=[307, 302])) as receiver, sending(tmp_path, policy) as sent:
        sent.finish(sent.job(receiver.url))
        assert sent.settled(Outcome.EXHAUSTED)
    assert [r.path for r in receiver.received] == ["/hook", "/hook"]
    assert sent.attempts(Attempt.REDIRECT) == 2


def test_a_huge_answer_is_not_read(tmp_path: Path) -> None:
    """The receiver would stream a GiB: the sender reads a few KiB and hangs up."""
    with receiving(Receiver(script=[HUGE])) as receiver, sending(tmp_path) as sent:
        sent.finish(sent.job(receiver.url))
        assert sent.settled(Outcome.DELIVERED)
        assert receiver.gave_up_streaming.wait(60)


def test_an_answer_dripped_a_byte_at_a_time_is_cut_off(tmp_path: Path) -> None:
    """Each byte comes within the read timeout, the whole never: the attempt's deadline ends
    it, and the webhook is retried. A byte comes every 50 ms, within a tenth of the read
    timeout; the deadline is 1.5 s."""
    policy = Policy(max_attempts=20, backoff_s=0.01, max_backoff_s=0.05, timeout_s=0.5)
    with receiving(Receiver(script=[DRIP])) as receiver, sending(tmp_path, policy) as sent:
        sent.finish(sent.job(receiver.url))
        assert sent.settled(Outcome.DELIVERED)
        assert receiver.gave_up_streaming.wait(60)
    assert len(receiver.received) == 2 and sent.attempts(Attempt.ERROR) == 1


def test_every_attempt_failing_gives_the_webhook_up(tmp_path: Path) -> None:
    policy = Policy(max_attempts=3, backoff_s=0.01, max_backoff_s=0.05, timeout_s=10)
    with receiving(Receiver(script=[500] * 10)) as receiver, sending(tmp_path, policy) as sent:
        sent.finish(sent.job(receiver.url))
        assert sent.settled(Outcome.EXHAUSTED)
    assert len(receiver.received) == 3


def test_a_name_rebound_to_an_internal_address_is_refused_at_delivery(tmp_path: Path) -> None:
    """Checked public at creation, the name now resolves to loopback: nothing is sent."""

    def rebound(host: str, port: int) -> list[IPAddress]:
        return [ipaddress.ip_address("127.0.0.1")]

    with (
        receiving() as receiver,
        sending(tmp_path, allow=Allowlist.parse(None), resolve=rebound) as sent,
    ):
        sent.finish(sent.job(f"http://hooks.example.com:{receiver.port}/hook"))
        assert sent.settled(Outcome.REFUSED)
    assert receiver.received == []


def test_an_attempt_cut_off_by_a_crash_counts_as_failed_and_is_retried_once(tmp_path: Path) -> None:
    """A process killed mid-attempt left it marked in flight: the next start retries it, and
    the attempt is numbered after the lost one."""
    with receiving() as receiver:
        with sending(tmp_path, start=False) as crashed:
            crashed.finish(crashed.job(receiver.url))
            taken = crashed.outbox.claim("here:8000", time.time(), FAST.retry_in, 60)
            assert taken is not None and taken.attempt == 1
        # While the attempt is marked, no other sender takes it.
        with sending(tmp_path, start=False) as other:
            assert other.outbox.claim("there:8000", time.time() + 1, FAST.retry_in, 60) is None
        with sending(tmp_path) as restarted:
            assert restarted.settled(Outcome.DELIVERED)
        assert len(receiver.received) == 1
        assert receiver.received[0].headers["webhook-id"] == taken.id


def test_a_subscription_left_by_a_failed_creation_is_removed_later(tmp_path: Path) -> None:
    with sending(tmp_path, start=False) as sent:
        sent.outbox.subscribe("orphan-of-a-crash", "http://127.0.0.1:9/")
        with sent.outbox.engine.begin() as db:
            db.exec_driver_sql(
                "UPDATE webhook_subscriptions SET created = ?", (time.time() - ORPHAN_AFTER_S - 1,)
            )
        sent.outbox.subscribe("being-created-now", "http://127.0.0.1:9/")
        sent.outbox.recover("here:8000")
        with sent.outbox.engine.connect() as db:
            rows = db.exec_driver_sql("SELECT job_id FROM webhook_subscriptions").all()
    assert rows == [("being-created-now",)]


def test_the_outbox_gauges_and_the_label_values(tmp_path: Path) -> None:
    assert {o.value for o in Outcome} == set(WEBHOOK_OUTCOMES)
    assert {a.value for a in Attempt} == set(WEBHOOK_RESULTS)
    with sending(tmp_path, start=False) as sent:
        sent.metrics.watch_webhooks(sent.outbox)
        sent.finish(sent.job("http://127.0.0.1:9/"))
        registry = sent.metrics.registry
        assert registry.get_sample_value("arengine_webhook_outbox_depth") == 1
        assert registry.get_sample_value("arengine_webhook_outbox_oldest_age_seconds") >= 0  # type: ignore[operator]
        with sent.outbox.engine.connect() as db:
            body = json.loads(db.exec_driver_sql("SELECT body FROM webhook_outbox").scalar_one())
        assert body["state"] == "done"


def test_the_backoff_doubles_with_jitter_up_to_its_cap() -> None:
    policy = Policy(backoff_s=10, max_backoff_s=3600)
    for attempt, full in [(1, 10), (2, 20), (5, 160), (12, 3600), (99, 3600)]:
        delays = [policy.retry_in(attempt) for _ in range(50)]
        assert all(full / 2 <= d <= full for d in delays)
        assert len(set(delays)) > 1
    # The default policy keeps trying for hours.
    total = sum(min(10 * 2.0 ** (n - 1), 3600) for n in range(1, Policy().max_attempts))
    assert total / 2 > 3600


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for `localhost` (and its key), made by openssl."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    request = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    names = ["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"]
    subprocess.run(
        [*request, "-keyout", str(key), "-out", str(cert), *names],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_https_is_verified_against_the_url_s_host_at_the_checked_address(
    certificate: tuple[Path, Path],
) -> None:
    cert, key = certificate
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    trusting = ssl.create_default_context(cafile=str(cert))
    loopback = ipaddress.ip_address("127.0.0.1")
    with receiving(tls=server) as receiver:
        good = parse_url(f"https://localhost:{receiver.port}/hook")
        assert post(good, loopback, b"{}", {}, 10, trusting) == 200
        # The certificate names localhost, not the address connected to, nor another name.
        other = parse_url(f"https://hooks.example.com:{receiver.port}/hook")
        with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
            post(other, loopback, b"{}", {}, 10, trusting)
        # Not trusted by the system's CAs.
        with pytest.raises(ssl.SSLCertVerificationError):
            post(good, loopback, b"{}", {}, 10)
    assert [r.headers["host"] for r in receiver.received] == [f"localhost:{receiver.port}"]


def test_a_shutdown_does_not_wait_for_a_slow_receiver_and_the_attempt_is_retried(
    tmp_path: Path,
) -> None:
    """A receiver that never finishes its answer: the senders stop without waiting for it (the
    attempt is left in flight, as a crash leaves it), and the next start retries it. The
    attempt's deadline (3 s) is past `CLOSE_WAIT_S` (2 s)."""
    assert ATTEMPT_TIMEOUTS * 1.0 > CLOSE_WAIT_S
    policy = Policy(max_attempts=20, backoff_s=0.01, max_backoff_s=0.05, timeout_s=1.0)
    with receiving(Receiver(script=[DRIP])) as receiver:
        first = Sent(tmp_path, policy, LOOPBACK)
        first.webhooks.start()
        first.finish(first.job(receiver.url))
        assert receiver.wait_for(1)
        first.webhooks.close()  # returns before the attempt's deadline
        assert first.outbox.depth() == 1
        with sending(tmp_path) as restarted:
            assert restarted.settled(Outcome.DELIVERED)
        first.store.close()
        assert receiver.gave_up_streaming.wait(60)  # the cut-off attempt hung up in the end
    assert len(receiver.received) == 2
    assert receiver.received[0].headers["webhook-id"] == receiver.received[1].headers["webhook-id"]
