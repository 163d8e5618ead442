"""`Client` is `AsyncClient` made blocking: generated from it, with the same public methods.

Two hand-kept copies had drifted (`listen` existed only in the asynchronous one).
"""

from __future__ import annotations

import inspect
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from arengine_client import AsyncClient, Client

ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPT = ROOT / "client" / "unasync.py"

RENAMED = {"aclose": "close", "__aenter__": "__enter__", "__aexit__": "__exit__"}
"""Methods whose blocking twin has another name."""


def _public(cls: type[Any]) -> dict[str, inspect.Signature]:
    return {
        RENAMED.get(name, name): inspect.signature(member)
        for name, member in vars(cls).items()
        if callable(member) and (not name.startswith("_") or name in DUNDERS)
    }


DUNDERS = {"__init__", *RENAMED, *RENAMED.values()}


def test_the_blocking_client_is_what_the_script_generates() -> None:
    checked = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr
    script: dict[str, Any] = runpy.run_path(str(SCRIPT))
    generated = script["generate"](script["SOURCE"].read_text(encoding="utf-8"))
    assert generated == script["TARGET"].read_text(encoding="utf-8")
    assert "async " not in generated and "await " not in generated


def test_the_check_fails_on_a_hand_edited_blocking_client(tmp_path: Path) -> None:
    copy = tmp_path / "client"
    shutil.copytree(ROOT / "client", copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "arengine_client" / "_sync.py"
    target.write_text(
        target.read_text(encoding="utf-8").replace("poll_s: float = 2.0", "poll_s: float = 1.0")
    )
    checked = subprocess.run(
        [sys.executable, str(copy / "unasync.py"), "--check"], capture_output=True, text=True
    )
    assert checked.returncode == 1 and "out of date" in checked.stderr


def test_both_clients_have_the_same_methods_and_signatures() -> None:
    blocking, asynchronous = _public(Client), _public(AsyncClient)
    assert sorted(blocking) == sorted(asynchronous)
    assert "listen" in blocking and "listen_lines" in blocking
    for name, signature in blocking.items():
        other = asynchronous[name]
        assert list(signature.parameters) == list(other.parameters), name
        for parameter, twin in zip(
            signature.parameters.values(), other.parameters.values(), strict=True
        ):
            assert (parameter.kind, parameter.default) == (twin.kind, twin.default), name
            assert str(parameter.annotation) == str(twin.annotation).replace("Async", ""), name


def test_every_method_of_the_asynchronous_client_is_a_coroutine_or_an_async_iterator() -> None:
    for name, member in vars(AsyncClient).items():
        if callable(member) and name not in ("__init__",) and not name.startswith("_A"):
            assert inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member), name
    for name, member in vars(Client).items():
        if callable(member):
            assert not inspect.iscoroutinefunction(member), name
            assert not inspect.isasyncgenfunction(member), name
