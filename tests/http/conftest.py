"""In-process HTTP tests: the real app from `create_app`, driven by httpx's ASGI transport.

The lifespan runs, so the engine and the models are real; only the socket and uvicorn are left out
(the end-to-end tests in `tests/e2e/` have those).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from anyio.from_thread import BlockingPortal, start_blocking_portal
from fastapi import FastAPI
from torch import nn

from arengine.http.app import create_app
from arengine.models import DEFAULT_MODELS_DIR
from arengine.settings import Settings
from tests.conftest import wait_until
from tests.gate import loud_manifest

FAULTY_MANIFEST = loud_manifest("faulty")


class Faulty(nn.Module):
    """A classifier that breaks on its marker input: any window louder than silence."""

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if bool((features > -10.0).any()):
            raise RuntimeError("the marker input reached the model")
        return features.mean(dim=(1, 2)).unsqueeze(1)


class InProcessClient:
    """A synchronous client of an app running in-process on an event loop in another thread."""

    def __init__(self, app: FastAPI, portal: BlockingPortal) -> None:
        self.app = app
        self._portal = portal
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        self._client = httpx.AsyncClient(transport=transport, base_url="http://localhost")

    def request(self, method: str, url: str, **options: Any) -> httpx.Response:
        async def send() -> httpx.Response:
            return await self._client.request(method, url, **options)

        return self._portal.call(send)

    def get(self, url: str, **options: Any) -> httpx.Response:
        return self.request("GET", url, **options)

    def post(self, url: str, **options: Any) -> httpx.Response:
        return self.request("POST", url, **options)

    def close(self) -> None:
        self._portal.call(self._client.aclose)


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`speech`, the `faulty` classifier, and `strict`: speech with a manifest out of bounds."""
    folder = tmp_path_factory.mktemp("models")
    shutil.copytree(DEFAULT_MODELS_DIR / "speech", folder / "speech")
    (folder / "faulty").mkdir()
    torch.jit.save(torch.jit.script(Faulty()), str(folder / "faulty" / "model.pt"))
    (folder / "faulty" / "manifest.toml").write_text(FAULTY_MANIFEST)
    shutil.copytree(DEFAULT_MODELS_DIR / "speech", folder / "strict")
    manifest = folder / "strict" / "manifest.toml"
    text = manifest.read_text().replace('name = "speech"', 'name = "strict"')
    manifest.write_text(text.replace("[postprocess]\n", "[postprocess]\nthreshold = 7\n"))
    return folder


@pytest.fixture(scope="module")
def client(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessClient]:
    """The app in-process, models loaded; uploads spooled to a folder of its own."""
    uploads = tmp_path_factory.mktemp("uploads")
    settings = Settings(
        models_dir=models_dir, upload_dir=uploads, segment_s=4.0, max_upload_bytes=8 << 20
    )
    with serving(settings) as running:
        yield running


@contextmanager
def serving(settings: Settings) -> Iterator[InProcessClient]:
    """The app of `settings` in-process, once its models are loaded; stopped (lifespan
    shutdown) after."""
    app = create_app(settings)
    with ExitStack() as stack:
        portal = stack.enter_context(start_blocking_portal())
        stack.enter_context(portal.wrap_async_context_manager(app.router.lifespan_context(app)))
        running = InProcessClient(app, portal)
        stack.callback(running.close)
        assert wait_until(lambda: running.get("/readyz").status_code == 200)
        yield running
