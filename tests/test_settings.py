"""The settings' sections: flat and nested names in the environment and as keywords, both forms of
one setting refused, and `arengine serve --help` grouped the same way."""

from __future__ import annotations

import os
import re

import pytest
from pydantic import ValidationError
from pydantic_settings import SettingsError

from arengine.cli.commands import build_parser, main
from arengine.cli.serve import ENV_ONLY
from arengine.settings import FIELDS, SECTIONS, ServerSettings, Settings


@pytest.fixture(autouse=True)
def _no_arengine_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.upper().startswith("ARENGINE_")]:
        monkeypatch.delenv(key)


def test_every_setting_is_in_exactly_one_section() -> None:
    names = [name for model in SECTIONS.values() for name in model.model_fields]
    assert len(names) == len(set(names)) == len(FIELDS)
    assert set(Settings.model_fields) == set(SECTIONS)
    assert not set(FIELDS) & set(SECTIONS)  # a flat keyword is never taken for a section


def test_the_flat_variable_still_sets_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARENGINE_PORT", "9001")
    monkeypatch.setenv("ARENGINE_MAX_UPLOAD_BYTES", "4096")
    monkeypatch.setenv("ARENGINE_DECODE_IN_CHILD", "false")
    settings = Settings()
    assert settings.server.port == 9001
    assert settings.limits.max_upload_bytes == 4096
    assert settings.engine.decode_in_child is False


def test_the_nested_variable_sets_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARENGINE_SERVER__PORT", "9002")
    monkeypatch.setenv("ARENGINE_LIMITS__MAX_UPLOAD_BYTES", "8192")
    monkeypatch.setenv("ARENGINE_PORT", "9002")  # the same value both ways is one setting
    settings = Settings()
    assert settings.server.port == 9002
    assert settings.limits.max_upload_bytes == 8192


def test_a_secret_file_variable_works_flat_and_nested(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARENGINE_DATABASE_URL_FILE", "/run/secrets/url")
    assert str(Settings().database.database_url_file) == "/run/secrets/url"
    monkeypatch.delenv("ARENGINE_DATABASE_URL_FILE")
    monkeypatch.setenv("ARENGINE_DATABASE__DATABASE_URL_FILE", "/run/secrets/other")
    assert str(Settings().database.database_url_file) == "/run/secrets/other"


def test_both_forms_with_different_values_are_refused_naming_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ARENGINE_API_KEYS", "secret-one")
    monkeypatch.setenv("ARENGINE_SECURITY__API_KEYS", "secret-two")
    with pytest.raises(SettingsError) as refused:
        Settings()
    message = str(refused.value)
    assert "ARENGINE_API_KEYS" in message and "ARENGINE_SECURITY__API_KEYS" in message
    assert "secret" not in message  # the values may be secrets


def test_the_cli_refuses_both_forms_as_invalid_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARENGINE_ENGINE_THREADS", "2")
    monkeypatch.setenv("ARENGINE_ENGINE__ENGINE_THREADS", "3")
    with pytest.raises(SystemExit) as stopped:
        main(["models"])
    assert str(stopped.value).startswith("arengine: invalid settings:")
    assert "ARENGINE_ENGINE__ENGINE_THREADS" in str(stopped.value)


def test_a_nested_variable_outside_the_section_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ARENGINE_SERVER__MAX_UPLOAD_BYTES", "4096")  # a limit, not the server's
    with pytest.raises(ValidationError, match="max_upload_bytes"):
        Settings()


def test_flat_and_nested_keywords(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings(port=9000).server.port == 9000
    assert Settings(server={"port": 9000}).server.port == 9000
    assert Settings(server=ServerSettings(port=9000), host="::1").server.port == 9000
    both = Settings(port=9000, server={"host": "::1"}, engine_threads=3)
    assert (both.server.port, both.server.host, both.engine.engine_threads) == (9000, "::1", 3)
    monkeypatch.setenv("ARENGINE_SERVER__PORT", "7000")
    assert Settings(port=9000).server.port == 9000  # a keyword (a flag) wins over a variable
    with pytest.raises(SettingsError, match="port is given twice"):
        Settings(port=9000, server={"port": 9001})
    with pytest.raises(ValidationError):
        Settings(no_such_setting=1)


def test_validators_keep_working_in_their_sections() -> None:
    with pytest.raises(ValidationError, match="kept apart"):
        Settings(api_keys="shared-9", admin_keys="shared-9")
    with pytest.raises(ValidationError, match="needs a secret"):
        Settings(webhook_url="https://hooks.example.com/hook")
    with pytest.raises(ValidationError, match="broker's address only"):
        Settings(mqtt_url="mqtt://host/topic")


def test_serve_help_groups_the_flags_by_section_in_order() -> None:
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert isinstance(commands, dict)
    help_text = commands["serve"].format_help()
    titles = re.findall(r"^(\w+) settings:$", help_text, flags=re.M)
    assert titles == list(SECTIONS)
    groups = re.split(r"^\w+ settings:$", help_text, flags=re.M)[1:]
    for (section, model), group in zip(SECTIONS.items(), groups, strict=True):
        flags = re.findall(r"^  (--[\w-]+)", group, flags=re.M)
        expected = [f"--{name.replace('_', '-')}" for name in model.model_fields]
        assert flags == [flag for flag in expected if flag[2:].replace("-", "_") not in ENV_ONLY]
        assert flags, section


def test_decoding_in_parts_is_the_default_and_can_be_turned_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On by default, in a pip install and the image alike (no `ffmpeg` program needed); off by
    flag or variable."""
    assert Settings().engine.parallel_decoding is True
    args = vars(build_parser().parse_args(["serve", "--no-parallel-decoding"]))
    assert args["parallel_decoding"] is False
    assert "parallel_decoding" not in vars(build_parser().parse_args(["serve"]))
    monkeypatch.setenv("ARENGINE_PARALLEL_DECODING", "false")
    assert Settings().engine.parallel_decoding is False
