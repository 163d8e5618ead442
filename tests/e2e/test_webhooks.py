"""A job's webhook through real servers: the receiver is down, the server is killed with SIGKILL
between two attempts and started again, the receiver comes back: the webhook arrives once,
signed as the Standard Webhooks reference code verifies. Addresses not allowed are refused at the
job's creation."""

from __future__ import annotations

import base64
import re
import signal
from pathlib import Path

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from tests.conftest import start_server, stop_server, wait_until
from tests.http.test_app import _wav
from tests.receiver import Receiver, receiving

pytestmark = pytest.mark.slow

SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
FLAGS = (
    "--models",
    "speech",
    "--webhook-allowed-hosts",
    "127.0.0.1",
    "--webhook-backoff-s",
    "0.05",
    "--webhook-max-backoff-s",
    "0.2",
    "--webhook-max-attempts",
    "100",
    "--replica-name",
    "the-one",
)


def _metric(client: httpx.Client, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", client.get("/metrics").text, re.M)
    return float(found[1]) if found else 0.0


def test_a_webhook_outlasts_a_receiver_down_and_a_kill_9_and_arrives_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {"ARENGINE_WEBHOOK_SECRET": SECRET}
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
    with receiving() as probe:
        port = probe.port  # free now: the receiver is down
    receiver = Receiver(port=port)
    first = start_server(tmp_path / "first", *FLAGS, "--data-dir", str(data), env=env)
    try:
        with first.client() as client:
            # Only 127.0.0.1 is allowed: a name resolving to it, and other addresses, are not.
            for url in ("http://localhost:1/", "http://169.254.169.254/", "http://10.0.0.1/"):
                refused = client.post(
                    "/v1/jobs",
                    params={"callback_url": url},
                    files={"file": ("a.wav", _wav(), "audio/wav")},
                )
                assert refused.status_code == 422, refused.text
                assert refused.json()["error"]["code"] == "callback_url_refused"
            posted = client.post(
                "/v1/jobs",
                params={"callback_url": receiver.url},
                files={"file": ("a.wav", _wav(), "audio/wav")},
            )
            assert posted.status_code == 202, posted.text
            job_id = posted.json()["id"]
            failed = 'arengine_webhook_attempts_total{result="error"}'
            assert wait_until(lambda: _metric(client, failed) >= 2, 120)
            assert _metric(client, "arengine_webhook_outbox_depth") == 1
        first.process.send_signal(signal.SIGKILL)
        assert first.process.wait(timeout=60) == -signal.SIGKILL
    finally:
        if first.process.poll() is None:
            stop_server(first)
    assert "whsec_" not in first.log.read_text()  # never logged

    with receiving(receiver):
        second = start_server(tmp_path / "second", *FLAGS, "--data-dir", str(data), env=env)
        try:
            with second.client() as client:
                assert receiver.wait_for(1, 120)
                delivered = 'arengine_webhook_deliveries_total{outcome="delivered"}'
                assert wait_until(lambda: _metric(client, delivered) == 1, 60)
                assert _metric(client, "arengine_webhook_outbox_depth") == 0
                assert client.get(f"/v1/jobs/{job_id}").json()["state"] == "done"
        finally:
            stop_server(second)
    assert len(receiver.received) == 1
    body = Webhook(SECRET).verify(receiver.received[0].body, receiver.received[0].headers)
    assert (body["id"], body["state"]) == (job_id, "done")
