"""A job's callback: `POST /v1/jobs?callback_url=` checked against the SSRF guard before the body
is read, and committed to the webhook outbox before the job itself (`arengine/jobs/outbox.py`)."""

from __future__ import annotations

from anyio import to_thread
from fastapi import Request

from arengine.errors import ErrorCode, InvalidInput
from arengine.jobs.destinations import allowed_addresses, parse_url
from arengine.jobs.webhooks import Webhooks
from arengine.settings import Settings


async def checked_callback(request: Request, url: str | None) -> str | None:
    """The job's callback URL (`url`, else the server's `webhook_url`), or None; a 422
    `callback_url_refused` naming the rule when the guard refuses `url`."""
    settings: Settings = request.app.state.settings
    if url is None:
        return (
            settings.webhooks.webhook_url
        )  # the operator's: parsed at start, checked at each delivery
    webhooks = _webhooks(request)
    target = parse_url(url)
    await to_thread.run_sync(allowed_addresses, target, webhooks.allow)
    return url


async def subscribe(request: Request, job_id: str, url: str | None) -> None:
    """Commit `url` as job `job_id`'s callback (before the job's row: see the outbox)."""
    if url is not None:
        await to_thread.run_sync(_webhooks(request).outbox.subscribe, job_id, url)


async def unsubscribe(request: Request, job_id: str, url: str | None) -> None:
    """The job was not created after all."""
    if url is not None:
        await to_thread.run_sync(_webhooks(request).outbox.unsubscribe, job_id)


def _webhooks(request: Request) -> Webhooks:
    webhooks: Webhooks | None = getattr(request.app.state, "webhooks", None)
    if webhooks is None:
        raise InvalidInput(
            "webhooks are off on this server: it needs a webhook_secret "
            "(ARENGINE_WEBHOOK_SECRET or ARENGINE_WEBHOOK_SECRET_FILE)",
            code=ErrorCode.CALLBACK_URL_REFUSED,
        )
    return webhooks
