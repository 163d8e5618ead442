"""The command line: one flag per setting, environment variables, jemalloc re-execution."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from arengine.allocator import find_jemalloc
from arengine.cli import build_parser, main
from arengine.settings import Settings
from tests.conftest import start_server, stop_server


def _settings_from(argv: list[str]) -> Settings:
    args = vars(build_parser().parse_args(argv))
    args.pop("command")
    return Settings(**args)


def test_every_setting_is_a_flag() -> None:
    help_text = build_parser()._subparsers._group_actions[0].choices["serve"].format_help()  # type: ignore[union-attr]
    for name in Settings.model_fields:
        if name == "api_keys":  # a secret: environment only
            assert "--api-keys" not in help_text and "ARENGINE_API_KEYS" in help_text
            continue
        assert f"--{name.replace('_', '-')}" in help_text
        assert f"ARENGINE_{name.upper()}" in help_text


def test_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARENGINE_PORT", "9100")
    monkeypatch.setenv("ARENGINE_ENGINE_THREADS", "3")
    settings = _settings_from(["serve", "--port", "9200", "--no-jemalloc", "--upload-dir", "/tmp"])
    assert settings.port == 9200
    assert settings.engine_threads == 3
    assert settings.jemalloc is False
    assert settings.upload_dir == Path("/tmp")
    assert settings.host == "127.0.0.1"


def test_out_of_range_settings_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--port", "70000"])
    assert "port" in str(exited.value.code)


def test_module_entry_point_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "arengine", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--intra-op-threads" in done.stdout


@pytest.mark.skipif(find_jemalloc() is None, reason="the system jemalloc is not installed")
def test_serve_runs_under_jemalloc_unless_told_not_to(tmp_path: Path) -> None:
    for flag, expected in (("--jemalloc", "jemalloc"), ("--no-jemalloc", "glibc")):
        server = start_server(tmp_path, flag, "--engine-threads", "3", "--intra-op-threads", "1")
        try:
            info = httpx.get(server.url + "/v1/info").json()
        finally:
            stop_server(server)
        assert info["allocator"] == expected
        assert info["engine_threads"] == 3
        assert info["intra_op_threads"] == 1
        if expected == "jemalloc":
            assert "allocator=jemalloc" in server.log.read_text()
