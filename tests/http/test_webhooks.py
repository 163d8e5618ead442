"""`POST /v1/jobs?callback_url=` in-process: refused with a 422 naming the rule when it aims at an
internal address (or a name resolving to one) unless `webhook_allowed_hosts` allows it; accepted,
the job's end reaches a real receiver on 127.0.0.1, signed as the reference code verifies."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError
from standardwebhooks.webhooks import Webhook

import arengine.jobs.webhooks as webhooks_module
from arengine.settings import Settings
from tests.conftest import wait_until
from tests.http.conftest import InProcessClient, serving
from tests.http.test_app import _wav
from tests.receiver import receiving

SECRET = "whsec_" + base64.b64encode(bytes(range(24))).decode()
FAST = {"webhook_backoff_s": 0.01, "webhook_max_backoff_s": 0.05}


@contextmanager
def _serving(models_dir: Path, data_dir: Path, **options: Any) -> Iterator[InProcessClient]:
    settings = Settings(
        models_dir=models_dir, data_dir=data_dir, segment_s=4.0, engine_threads=1, **options
    )
    with serving(settings) as running:
        yield running


@pytest.fixture(scope="module")
def public_only(
    models_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[InProcessClient]:
    """The default guard: public hosts only."""
    with _serving(models_dir, tmp_path_factory.mktemp("data"), webhook_secret=SECRET) as client:
        yield client


def _post(client: InProcessClient, callback: str, **params: str) -> httpx.Response:
    return client.post(
        "/v1/jobs",
        params={"callback_url": callback, **params},
        files={"file": ("a.wav", _wav(), "audio/wav")},
    )


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("http://127.0.0.1:8080/hook", "127.0.0.1, a loopback address"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254, a cloud metadata address"),
        ("http://10.0.0.1/hook", "10.0.0.1, a private address"),
        ("http://[::1]/hook", "::1, a loopback address"),
        ("http://localhost:8080/hook", "a loopback address"),
        ("ftp://example.com/hook", "http:// or https://"),
    ],
)
def test_a_callback_at_an_internal_address_is_refused_when_the_job_is_created(
    public_only: InProcessClient, url: str, rule: str
) -> None:
    response = _post(public_only, url)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "callback_url_refused"
    assert rule in error["message"]
    assert public_only.get("/v1/jobs").json()["jobs"] == []


def test_allowed_loopback_gets_the_job_s_end_signed(
    models_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Idle senders look once an hour: the server wakes one when a job ends.
    monkeypatch.setattr(webhooks_module, "POLL_S", 3600.0)
    options = {"webhook_secret": SECRET, "webhook_allowed_hosts": "127.0.0.1,localhost", **FAST}
    with receiving() as receiver, _serving(models_dir, tmp_path, **options) as client:
        for url in (receiver.url, f"http://localhost:{receiver.port}/hook"):
            response = _post(client, url)
            assert response.status_code == 202, response.text
            job = response.json()
            assert job["parameters"] == {}  # the callback is not a post-processing override
        assert receiver.wait_for(2, 30)
        metrics = client.get("/metrics").text
        assert 'arengine_webhook_deliveries_total{outcome="delivered"}' in metrics
        assert wait_until(
            lambda: "arengine_webhook_outbox_depth 0.0" in client.get("/metrics").text
        )
    states = [Webhook(SECRET).verify(r.body, r.headers)["state"] for r in receiver.received]
    assert states == ["done", "done"]


def test_the_server_s_default_webhook_url_serves_jobs_without_one(
    models_dir: Path, tmp_path: Path
) -> None:
    with receiving() as receiver:
        options = {
            "webhook_secret": SECRET,
            "webhook_allowed_hosts": "127.0.0.1",
            "webhook_url": receiver.url,
            **FAST,
        }
        with _serving(models_dir, tmp_path, **options) as client:
            response = client.post("/v1/jobs", files={"file": ("a.wav", _wav(), "audio/wav")})
            assert response.status_code == 202, response.text
            assert receiver.wait_for(1)
    assert (
        Webhook(SECRET).verify(receiver.received[0].body, receiver.received[0].headers)["id"]
        == (response.json()["id"])
    )


def test_without_a_secret_a_callback_is_refused(models_dir: Path, tmp_path: Path) -> None:
    with _serving(models_dir, tmp_path) as client:
        response = _post(client, "https://hooks.example.com/")
    assert response.status_code == 422
    assert "webhook_secret" in response.json()["error"]["message"]


def test_a_default_webhook_url_needs_a_secret() -> None:
    with pytest.raises(ValidationError, match="webhook_url needs a secret"):
        Settings(webhook_url="https://hooks.example.com/")


def test_the_secret_is_never_shown() -> None:
    settings = Settings(webhook_secret=SECRET)
    assert SECRET not in repr(settings) and SECRET not in str(settings.model_dump())
