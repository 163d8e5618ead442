"""Job webhooks: when a job with a `callback_url` ends, a POST of `{"type", "id", "state", ...}`
signed by the Standard Webhooks scheme (https://www.standardwebhooks.com), from the durable
outbox (`arengine/jobs/outbox.py`), retried with exponential backoff and jitter.

A 2xx ends a webhook; a 4xx other than 408 and 429 stops it (the receiver refused it); anything
else (a connection refused, a timeout, a 5xx, a 3xx: redirects are never followed) is retried
until `max_attempts`. Each attempt checks the URL's resolved addresses again
(`arengine/jobs/destinations.py`) and connects to one that passed; it reads no more than
`MAX_RESPONSE_BYTES` of the answer.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import http.client
import logging
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from sqlalchemy import Engine

from arengine import __version__
from arengine.errors import ArengineError
from arengine.jobs.destinations import (
    Allowlist,
    IPAddress,
    Resolver,
    Target,
    allowed_addresses,
    lookup,
    parse_url,
)
from arengine.jobs.outbox import Delivery, Outbox
from arengine.settings import Settings

log = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 4096
"""Bytes of a receiver's answer read (for the log); the rest is never read."""
ATTEMPT_TIMEOUTS = 3
"""An attempt's whole deadline, in `webhook_timeout_s`: connecting, sending and the answer."""
CLOSE_WAIT_S = 2.0
"""How long a shutdown waits for the attempts in flight."""
SENDERS = 4
"""Webhooks sent at once: a receiver that answers slowly holds one sender, not the others."""
POLL_S = 1.0
"""How often an idle sender looks for webhooks due: those of jobs that ended on other replicas
(one that ends in this process wakes a sender at once, `JobStore.on_webhook`)."""
SECRET_PREFIX = "whsec_"


class Outcome(StrEnum):
    """How a webhook ended (the `outcome` label of `arengine_webhook_deliveries_total`)."""

    DELIVERED = "delivered"
    """A 2xx."""
    REJECTED = "rejected"
    """A 4xx other than 408 and 429: the receiver will not take it."""
    REFUSED = "refused"
    """Its host now resolves to an address the guard refuses."""
    EXHAUSTED = "exhausted"
    """Every attempt failed."""


class Attempt(StrEnum):
    """How one attempt went (the `result` label of `arengine_webhook_attempts_total`)."""

    SUCCESS = "2xx"
    REDIRECT = "3xx"
    CLIENT_ERROR = "4xx"
    SERVER_ERROR = "5xx"
    ERROR = "error"
    """No answer: not resolved, refused, reset, timed out."""


class WebhookObserver(Protocol):
    """What the webhooks report (`Metrics` provides it)."""

    def observe_webhook_attempt(self, result: str) -> None: ...
    def observe_webhook_outcome(self, outcome: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Policy:
    """Retries and timeouts (from the `webhook_*` settings)."""

    max_attempts: int = 12
    backoff_s: float = 10.0
    max_backoff_s: float = 3600.0
    timeout_s: float = 10.0

    def retry_in(self, attempt: int) -> float:
        """Seconds after attempt `attempt` (1-based) fails before the next: doubling from
        `backoff_s`, capped, less a random part of up to half so that receivers coming back
        are not hit by every sender at once.

        >>> 5.0 <= Policy(backoff_s=10).retry_in(1) <= 10.0
        True
        """
        delay = min(self.backoff_s * 2.0 ** min(attempt - 1, 60), self.max_backoff_s)
        return delay / 2 + random.uniform(0, delay / 2)

    @classmethod
    def of(cls, settings: Settings) -> Policy:
        return cls(
            settings.webhooks.webhook_max_attempts,
            settings.webhooks.webhook_backoff_s,
            settings.webhooks.webhook_max_backoff_s,
            settings.webhooks.webhook_timeout_s,
        )


def read_secret(settings: Settings) -> bytes | None:
    """The signing key from `webhook_secret` or `webhook_secret_file` (None: webhooks off); a
    `ValueError` that never quotes the secret when it is malformed."""
    if (
        settings.webhooks.webhook_secret is not None
        and settings.webhooks.webhook_secret_file is not None
    ):
        raise ValueError("set webhook_secret or webhook_secret_file, not both")
    if settings.webhooks.webhook_secret is not None:
        return parse_secret(settings.webhooks.webhook_secret.get_secret_value())
    if settings.webhooks.webhook_secret_file is not None:
        return parse_secret(Path(settings.webhooks.webhook_secret_file).read_text().strip())
    return None


def parse_secret(text: str) -> bytes:
    """The key of a Standard Webhooks secret, `whsec_` and base64 of 24 to 64 bytes.

    >>> parse_secret("whsec_" + base64.b64encode(bytes(32)).decode()) == bytes(32)
    True
    """
    encoded = text.removeprefix(SECRET_PREFIX)
    encoded += "=" * (-len(encoded) % 4)  # unpadded, as the reference implementation takes it
    try:
        key = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise ValueError("the webhook secret is not whsec_ followed by base64") from None
    if not 24 <= len(key) <= 64:
        raise ValueError(f"the webhook secret holds {len(key)} bytes: give 24 to 64 random bytes")
    return key


def sign(key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header: `v1,` and the base64 HMAC-SHA256 of `id.timestamp.body`.

    >>> sign(bytes(32), "msg_1", 1700000000, b"{}")[:3]
    'v1,'
    """
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(key: bytes, message_id: str, body: bytes, now: float) -> dict[str, str]:
    """The headers of one attempt: signed again with its own timestamp."""
    timestamp = int(now)
    return {
        "content-type": "application/json",
        "user-agent": f"arengine/{__version__}",
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(key, message_id, timestamp, body),
    }


class _PinnedHTTPS(http.client.HTTPSConnection):
    """HTTPS to an address already checked, the certificate checked against the URL's host."""

    def __init__(
        self, target: Target, address: IPAddress, timeout: float, tls: ssl.SSLContext
    ) -> None:
        super().__init__(str(address), target.port, timeout=timeout)
        self._server_name = target.host
        self._tls = tls

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._tls.wrap_socket(sock, server_hostname=self._server_name)


def post(
    target: Target,
    address: IPAddress,
    body: bytes,
    head: dict[str, str],
    timeout: float,
    tls: ssl.SSLContext | None = None,
) -> int:
    """POST `body` to `target` at `address` (connect and read each within `timeout`; https
    checked by `tls`, by default the system's CAs, against the URL's host); the answer's
    status, its body read up to `MAX_RESPONSE_BYTES` and no further."""
    connection: http.client.HTTPConnection
    if target.scheme == "https":
        connection = _PinnedHTTPS(target, address, timeout, tls or ssl.create_default_context())
    else:
        connection = http.client.HTTPConnection(str(address), target.port, timeout=timeout)
    # Each read waits at most `timeout`, but a receiver dripping a byte at a time would hold a
    # sender for ever: past the whole attempt's deadline its connection is shut.
    deadline = threading.Timer(ATTEMPT_TIMEOUTS * timeout, _hang_up, (connection,))
    deadline.start()
    try:
        head = {**head, "host": target.host_header, "connection": "close"}
        connection.request("POST", target.path, body, head)
        response = connection.getresponse()
        response.read(MAX_RESPONSE_BYTES)
        return response.status
    finally:
        deadline.cancel()
        connection.close()


def _hang_up(connection: http.client.HTTPConnection) -> None:
    sock = connection.sock
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked read, which close would not


def classify(status: int) -> Attempt:
    return {2: Attempt.SUCCESS, 3: Attempt.REDIRECT, 4: Attempt.CLIENT_ERROR}.get(
        status // 100, Attempt.SERVER_ERROR
    )


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    """What the sender needs: the key, the guard's allowlist, the retry policy, its name."""

    key: bytes
    allow: Allowlist
    policy: Policy
    sender: str


class Webhooks:
    """`SENDERS` threads delivering the outbox's webhooks.

    Example::

        webhooks = Webhooks(Outbox.open(Path("data")), config, metrics)
        webhooks.start()   # attempts a previous process left in flight count as failed
        webhooks.close()
    """

    def __init__(
        self,
        outbox: Outbox,
        config: WebhookConfig,
        observer: WebhookObserver,
        resolve: Resolver = lookup,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.outbox = outbox
        self.allow = config.allow
        self._config = config
        self._observer = observer
        self._resolve = resolve
        self._clock = clock
        self._condition = threading.Condition()
        self._closing = False
        self._woken = False
        self._threads = [
            threading.Thread(target=self._work, name=f"arengine-webhooks-{i}", daemon=True)
            for i in range(SENDERS)
        ]

    def start(self) -> None:
        cut = self.outbox.recover(self._config.sender)
        if cut:
            log.info("%d webhook attempt(s) cut off by a stop count as failed; retried", cut)
        for thread in self._threads:
            thread.start()

    def notify(self) -> None:
        """A webhook may be due: wake a sender (or, all being busy, the next to be idle)."""
        with self._condition:
            self._woken = True
            self._condition.notify()

    def close(self) -> None:
        """Stop within `CLOSE_WAIT_S`: an attempt still in flight then is left to the process's
        exit, and counts as failed at the next start, as after a crash (so a slow receiver
        never holds a shutdown for its timeouts)."""
        with self._condition:
            self._closing = True
            self._condition.notify_all()
        deadline = time.monotonic() + CLOSE_WAIT_S
        for thread in self._threads:
            thread.join(timeout=max(deadline - time.monotonic(), 0.0))
        if not any(thread.is_alive() for thread in self._threads):
            self.outbox.close()

    def _work(self) -> None:
        while True:
            try:
                delivery = self._claim()
                if delivery is not None:
                    self.deliver(delivery)
                    continue
            except Exception:
                if self._closing:
                    return
                log.exception("the webhook outbox failed; retrying")
            with self._condition:
                self._condition.wait_for(lambda: self._closing or self._woken, self._idle())
                self._woken = False
                if self._closing:
                    return

    def _claim(self) -> Delivery | None:
        if self._closing:
            return None
        policy = self._config.policy
        stale_s = 4 * policy.timeout_s + 60  # longer than any attempt a live replica makes
        while True:
            delivery = self.outbox.claim(
                self._config.sender, self._clock(), policy.retry_in, stale_s
            )
            if delivery is None or delivery.attempt <= policy.max_attempts:
                return delivery
            # Its last attempt was cut off by a stop: it is as spent as one that failed.
            self._end(delivery, Outcome.EXHAUSTED, "every attempt failed")

    def _idle(self) -> float:
        due = self.outbox.next_due()
        return POLL_S if due is None else min(max(due - self._clock(), 0.01), POLL_S)

    def deliver(self, delivery: Delivery) -> Outcome | None:
        """Make the attempt `delivery`; how the webhook ended, or None when it is retried."""
        config = self._config
        try:
            target = parse_url(delivery.url)
            addresses = allowed_addresses(target, config.allow, self._resolve)
        except ArengineError as error:
            return self._end(delivery, Outcome.REFUSED, error.message)
        except (OSError, UnicodeError) as error:
            return self._failed(delivery, Attempt.ERROR, f"not resolved ({error})")
        head = headers(config.key, delivery.id, delivery.body, self._clock())
        try:
            status = post(target, addresses[0], delivery.body, head, config.policy.timeout_s)
        except (OSError, http.client.HTTPException) as error:
            return self._failed(delivery, Attempt.ERROR, f"{type(error).__name__}: {error}")
        result = classify(status)
        if result is Attempt.SUCCESS:
            self._observer.observe_webhook_attempt(result.value)
            return self._end(delivery, Outcome.DELIVERED, f"answered {status}")
        if result is Attempt.CLIENT_ERROR and status not in (408, 429):
            self._observer.observe_webhook_attempt(result.value)
            return self._end(delivery, Outcome.REJECTED, f"answered {status}")
        return self._failed(delivery, result, f"answered {status}")

    def _failed(self, delivery: Delivery, result: Attempt, why: str) -> Outcome | None:
        self._observer.observe_webhook_attempt(result.value)
        if delivery.attempt >= self._config.policy.max_attempts:
            return self._end(delivery, Outcome.EXHAUSTED, f"attempt {delivery.attempt}: {why}")
        log.info(
            "webhook %s of job %s: attempt %d failed (%s); retried",
            delivery.id,
            delivery.job_id,
            delivery.attempt,
            why,
        )
        self.outbox.release(delivery)
        return None

    def _end(self, delivery: Delivery, outcome: Outcome, why: str) -> Outcome:
        self.outbox.remove(delivery.id)
        self._observer.observe_webhook_outcome(outcome.value)
        level = logging.INFO if outcome is Outcome.DELIVERED else logging.WARNING
        log.log(
            level,
            "webhook %s of job %s: %s after %d attempt(s), %s",
            delivery.id,
            delivery.job_id,
            outcome.value,
            delivery.attempt,
            why,
        )
        return outcome


def start_webhooks(
    settings: Settings, engine: Engine, observer: WebhookObserver, sender: str
) -> Webhooks | None:
    """The webhook senders over the job store's database `engine`, started; None when the
    server has no webhook secret (then `callback_url` is refused)."""
    key = read_secret(settings)
    if key is None:
        return None
    if settings.webhooks.webhook_url is not None:
        try:
            parse_url(settings.webhooks.webhook_url)
        except ArengineError as error:
            raise ValueError(f"webhook_url: {error.message}") from None
    allow = Allowlist.parse(settings.webhooks.webhook_allowed_hosts)
    config = WebhookConfig(key, allow, Policy.of(settings), sender)
    webhooks = Webhooks(Outbox(engine), config, observer)
    webhooks.start()
    return webhooks
