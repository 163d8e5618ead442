"""A job's webhook through a receiver outage of real length and a `kill -9`, with the server's
default retry schedule (`webhook_backoff_s` 10 s doubling, jittered, 12 attempts).

    python -m loadtests.webhook_outage --down-s 300 --kill-after-s 120

A real `arengine serve` (`--models speech`, its default webhook settings but for the allowed
host 127.0.0.1) takes a job whose `callback_url` names a receiver that is down; `--kill-after-s`
later the server is killed with SIGKILL and started again on the same data directory; the
receiver comes up `--down-s` after the job was created. Printed: each failed attempt's time (the
server's counter, read once a second), the kill, the receiver's start, the delivery, and after
`--settle-s` more whether it came once and its signature verifies with the Standard Webhooks
reference code. Exits 1 when it did not arrive exactly once, verified. The tests hold the same
path with short backoffs (`tests/e2e/test_webhooks.py`); this is the issue's five minutes.
"""

from __future__ import annotations

import argparse
import base64
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx
from standardwebhooks.webhooks import Webhook

from tests.conftest import Server, start_server, stop_server
from tests.http.test_app import _wav
from tests.receiver import Receiver, receiving

SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
FLAGS = ("--models", "speech", "--webhook-allowed-hosts", "127.0.0.1")


def metric(server: Server, name: str) -> float:
    try:
        with server.client() as client:
            text = client.get("/metrics").text
    except httpx.TransportError:
        return 0.0
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(found[1]) if found else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--down-s", type=float, default=300.0, help="the receiver's outage")
    parser.add_argument("--kill-after-s", type=float, default=120.0, help="the kill -9")
    parser.add_argument("--settle-s", type=float, default=60.0, help="watched after delivery")
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    args = parser.parse_args()
    env = {"ARENGINE_WEBHOOK_SECRET": SECRET}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for name in ("first", "second"):
            (folder / name).mkdir()
        with receiving() as probe:
            port = probe.port  # free now: the receiver is down
        receiver = Receiver(port=port)
        server = start_server(folder / "first", *FLAGS, "--data-dir", str(folder / "data"), env=env)
        with server.client() as client:
            posted = client.post(
                "/v1/jobs",
                params={"callback_url": receiver.url},
                files={"file": ("a.wav", _wav(), "audio/wav")},
            )
        posted.raise_for_status()
        job_id, created = posted.json()["id"], time.monotonic()

        def at() -> str:
            return f"{time.monotonic() - created:7.1f} s"

        print(f"{at()}  job {job_id} created; the receiver is down")
        failed, killed, up = 'arengine_webhook_attempts_total{result="error"}', False, None
        seen = 0.0
        deadline = created + args.timeout_s
        try:
            while not receiver.received and time.monotonic() < deadline:
                count = metric(server, failed)
                if count > seen:
                    print(f"{at()}  attempt failed ({count:.0f} on this server)")
                    seen = count
                if not killed and time.monotonic() - created >= args.kill_after_s:
                    server.process.send_signal(signal.SIGKILL)
                    server.process.wait(timeout=60)
                    print(f"{at()}  server killed (SIGKILL)")
                    server = start_server(
                        folder / "second", *FLAGS, "--data-dir", str(folder / "data"), env=env
                    )
                    print(f"{at()}  server started again on the same data directory")
                    killed, seen = True, 0.0
                if up is None and time.monotonic() - created >= args.down_s:
                    up = receiving(receiver)
                    up.__enter__()
                    print(f"{at()}  receiver up")
                time.sleep(1.0)
            if receiver.received:
                print(f"{at()}  delivered")
                time.sleep(args.settle_s)
        finally:
            if up is not None:
                up.__exit__(None, None, None)
            stop_server(server)
    count = len(receiver.received)
    verified = False
    if count:
        body = Webhook(SECRET).verify(receiver.received[0].body, receiver.received[0].headers)
        verified = (body["id"], body["state"]) == (job_id, "done")
    print(f"deliveries: {count}; signature verified, job done: {verified}")
    return 0 if count == 1 and verified else 1


if __name__ == "__main__":
    sys.exit(main())
