"""A mistyped port: the client says what it retries and gives up after a few refusals (it sat
silent for 12 minutes, through 30 retries, before "Connection refused")."""

from __future__ import annotations

import io
import logging
import socket
from pathlib import Path

import httpx
import pytest

from arengine.cli.runner import plan
from arengine.client import Client, RetryPolicy
from arengine.outputs.formats import get_format
from arengine_client.remote import Remote, recognize_remote
from tests.conftest import RecordingFactory


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # nothing listens on it now: connections are refused


def test_a_refused_connection_is_retried_twice_and_each_retry_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    retry = RetryPolicy(retries=30, backoff_s=0.0)
    with (
        caplog.at_level(logging.WARNING, "arengine.client"),
        Client(url, retry=retry) as client,
        pytest.raises(httpx.ConnectError),
    ):
        client.models()
    said = [r.getMessage() for r in caplog.records if r.name == "arengine.client"]
    assert len(said) == 2 and all("ConnectError" in line for line in said), said
    assert "retry 1 of at most 30" in said[0] and url in said[0]


def test_a_batch_says_at_once_what_it_retries(recording: RecordingFactory, tmp_path: Path) -> None:
    clip = recording("one.flac")
    stream = io.StringIO()
    remote = Remote(f"http://127.0.0.1:{_closed_port()}", None)
    work = plan([clip.path], get_format("json"), tmp_path)
    failures = recognize_remote(remote, work, "speech", get_format("json"), stream=stream)
    first = stream.getvalue().splitlines()[0]
    assert "retried up to 30 times on 503 or 502, a refused connection 2 times" in first
    assert len(failures) == 1
