"""A real server reading a WAV while it arrives, whose header disagrees with the file: the same
answer as for the complete file (`tests/http/test_wav_headers.py` has the other paths)."""

from __future__ import annotations

import pytest

from tests.conftest import Server, wait_until
from tests.e2e.test_read_while_uploading import _info, _reply, _request
from tests.wav_headers import CASES, SECONDS, lying

# On the common server (`server`, 4-s segments): one server start less than a server of its own.


@pytest.mark.parametrize("multipart", [False, True], ids=["raw", "multipart"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_read_while_arriving_it_gives_the_audio_the_file_holds(
    server: Server, case: str, multipart: bool
) -> None:
    sock, body = _request(server, lying(case), multipart)
    with sock:
        half = len(body) // 2
        sock.sendall(body[:half])
        assert wait_until(lambda: _info(server)["active_jobs"] == 1)  # started on the header
        sock.sendall(body[half:])
        status, answer = _reply(sock)
    assert status == 200, answer
    audio = answer["audio"]
    assert (audio["duration_s"], audio["truncated"]) == (SECONDS, False)
    assert tuple(audio["warnings"]) == CASES[case][3]
