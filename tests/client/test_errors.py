"""One error hierarchy for the server and the client (`arengine_client.errors`).

Seven exception names existed twice, in `arengine/errors.py` and `arengine/client.py`, unrelated:
`except arengine.client.TooLarge` did not catch the server's `TooLarge`.
"""

from __future__ import annotations

import inspect

import pytest

from arengine import errors as server
from arengine_client import errors as shared


def _classes(module: object) -> dict[str, type[BaseException]]:
    return {
        name: member
        for name, member in vars(module).items()
        if inspect.isclass(member) and issubclass(member, BaseException)
    }


def test_a_name_in_both_modules_is_one_family() -> None:
    both = _classes(server).keys() & _classes(shared).keys()
    assert {"ArengineError", "TooLarge", "InvalidInput", "Unauthorized"} <= both
    for name in both:
        assert issubclass(_classes(server)[name], _classes(shared)[name]), name


@pytest.mark.parametrize(
    "error",
    [
        c
        for c in _classes(server).values()
        if issubclass(c, server.ArengineError) and c is not server.ArengineError
    ],
    ids=lambda c: c.__name__,
)
def test_each_server_error_is_in_the_family_of_its_status(
    error: type[server.ArengineError],
) -> None:
    families = [f for f in shared.FAMILIES if issubclass(error, f)]
    code = error.default_code
    if code is None:  # `TooLarge`: every code it is raised with is of its family
        assert families == [shared.TooLarge]
        return
    if code.status in shared.BY_STATUS:
        assert families == [shared.BY_STATUS[code.status]], (error, code.status)
    else:  # 499, 500: no family; caught as the base class
        assert families == []
    raised = error("why", code=code) if error is not server.StageFailed else None
    if raised is not None:
        assert (raised.status, raised.code, raised.message, str(raised)) == (
            code.status,
            code,
            "why",
            "why",
        )


def test_every_code_of_a_family_status_is_raised_as_that_family_by_the_client() -> None:
    for code in server.ErrorCode:
        body = f'{{"error": {{"code": "{code}", "message": "m"}}}}'.encode()
        answer = shared.error_of(code.status, body)
        assert (answer.status, answer.code, answer.message) == (code.status, str(code), "m")
        assert type(answer) is shared.BY_STATUS.get(code.status, shared.ArengineError)


def test_a_server_error_raised_in_process_is_caught_as_the_clients() -> None:
    with pytest.raises(shared.TooLarge) as caught:
        raise server.TooLarge("too long", code=server.ErrorCode.AUDIO_TOO_LONG)
    assert (caught.value.status, caught.value.code) == (413, "audio_too_long")
    with pytest.raises(shared.Unavailable):
        raise server.Overloaded("busy")


def test_a_balancers_page_is_an_http_error() -> None:
    answer = shared.error_of(502, b"<html>502 Bad Gateway</html>")
    assert isinstance(answer, shared.Unavailable)
    assert (answer.code, answer.message) == (shared.HTTP_ERROR, "<html>502 Bad Gateway</html>")
