"""API keys in-process: one credential per request, for users' keys and administrators' alike."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from arengine.errors import ErrorCode, Unauthorized
from arengine.http.auth import KEY_SUBPROTOCOL, credential
from arengine.settings import Settings
from tests.http.conftest import InProcessClient, serving

USER = ("Authorization", "Bearer user-key-1")
ADMIN = ("Authorization", "Bearer admin-key-1")
REFERENCES = "/v1/models/speech/references"


@pytest.fixture(scope="module")
def admins_only(models_dir: Path) -> Iterator[InProcessClient]:
    """Administrator keys without users' keys: no API key middleware, only the admin check."""
    with serving(Settings(models_dir=models_dir, admin_keys="admin-key-1")) as running:
        yield running


@pytest.fixture(scope="module")
def keyed(models_dir: Path) -> Iterator[InProcessClient]:
    settings = Settings(models_dir=models_dir, api_keys="user-key-1", admin_keys="admin-key-1")
    with serving(settings) as running:
        yield running


def _code(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


def _scope(headers: list[tuple[bytes, bytes]], protocols: list[str] | None = None) -> dict:  # type: ignore[type-arg]
    return {"type": "websocket", "headers": headers, "subprotocols": protocols or []}


def test_the_one_credential_is_the_header_s_or_the_subprotocol_s() -> None:
    assert credential(_scope([(b"authorization", b"Bearer  k-1 ")])) == b"k-1"
    assert credential(_scope([(b"authorization", b"Basic k-1")])) == b""
    encoded = base64.urlsafe_b64encode(b"k-2").decode().rstrip("=")
    assert credential(_scope([], ["arengine", KEY_SUBPROTOCOL + encoded])) == b"k-2"
    assert credential(_scope([])) == b""


@pytest.mark.parametrize(
    ("headers", "protocols"),
    [
        ([(b"authorization", b"Bearer x"), (b"authorization", b"Bearer k-1")], []),
        ([(b"authorization", b"Bearer k-1"), (b"authorization", b"Bearer k-1")], []),
        ([(b"authorization", b"Bearer k-1")], [KEY_SUBPROTOCOL + "ay0x"]),
        ([], [KEY_SUBPROTOCOL + "ay0x", KEY_SUBPROTOCOL + "ay0y"]),
    ],
)
def test_two_credentials_are_refused_whichever_would_pass(
    headers: list[tuple[bytes, bytes]], protocols: list[str]
) -> None:
    with pytest.raises(Unauthorized) as refused:
        credential(_scope(headers, protocols))
    assert refused.value.code is ErrorCode.AMBIGUOUS_CREDENTIALS


@pytest.mark.parametrize("pair", [[ADMIN, ("Authorization", "Bearer junk")], [ADMIN, USER]])
def test_the_administrator_check_refuses_two_keys(
    admins_only: InProcessClient, pair: list[tuple[str, str]]
) -> None:
    """The check once read the first header alone: an administrator's key followed by anything
    passed it."""
    refused = admins_only.post(REFERENCES, content=b"RIFF", headers=pair)
    assert refused.status_code == 401 and _code(refused) == "ambiguous_credentials"
    assert refused.headers["www-authenticate"].startswith("Bearer")
    # One key passes the check (then speech has no references).
    assert _code(admins_only.post(REFERENCES, content=b"RIFF", headers=[ADMIN])) == "not_a_library"


@pytest.mark.parametrize("pair", [[ADMIN, USER], [USER, ADMIN]])
def test_with_users_keys_two_keys_are_refused_before_any_endpoint(
    keyed: InProcessClient, pair: list[tuple[str, str]]
) -> None:
    """The middleware checked the last header and the administrator check the first: a user's
    key after an administrator's passed both."""
    for response in (
        keyed.post(REFERENCES, content=b"RIFF", headers=pair),
        keyed.get("/v1/models", headers=pair),
    ):
        assert response.status_code == 401 and _code(response) == "ambiguous_credentials"
    assert keyed.get("/v1/models", headers=[USER]).status_code == 200
    assert _code(keyed.post(REFERENCES, content=b"RIFF", headers=[USER])) == "not_admin"
