"""A WAV whose header disagrees with the file, through the HTTP layer: the same answer sent raw or
as a multipart part with its length declared (read while it arrives), or chunked with no length
(read once complete)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.http.conftest import InProcessClient
from tests.wav_headers import CASES, SECONDS, lying


async def _pieces(body: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(body), 32 * 1024):
        yield body[start : start + 32 * 1024]
        await asyncio.sleep(0.01)  # lets the server start on the header, as a real upload does


def _send(client: InProcessClient, body: bytes, shape: str) -> httpx.Response:
    if shape == "multipart":
        return client.post("/v1/recognize", files={"file": ("a.wav", body, "audio/wav")})
    if shape == "chunked":
        headers = {"Content-Type": "audio/wav"}
        return client.post("/v1/recognize", content=_pieces(body), headers=headers)
    headers = {"Content-Type": "audio/wav", "Content-Length": str(len(body))}
    return client.post("/v1/recognize", content=_pieces(body), headers=headers)


@pytest.mark.parametrize("shape", ["raw", "multipart", "chunked"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_path_answers_with_the_audio_the_file_holds(
    client: InProcessClient, case: str, shape: str
) -> None:
    response = _send(client, lying(case), shape)
    assert response.status_code == 200, response.text
    audio = response.json()["audio"]
    assert (audio["duration_s"], audio["truncated"]) == (SECONDS, False)
    assert tuple(audio["warnings"]) == CASES[case][3]
