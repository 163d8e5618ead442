"""A sources file (`arengine listen --sources`): what it may say, every mistake named at once
with its key before anything connects; the reconnection waits; the extra PyAV needs; and the
capture of a recording as the mono s16le the stream is sent as."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from arengine_client.capture import INSTALL, Capture, CaptureError, require_av
from arengine_client.cli import run
from arengine_client.sources import Backoff, Source, SourcesFileError, load, parse

GOOD = """
[defaults]
models = "events"
reconnect_max_s = 5

[sources.hall]
url = "rtsp://user:secret@192.168.1.20:554/stream1"
profile = "alarms"
parameters = { threshold = 0.6, min_duration_ms = 200 }

[sources.radio]
url = "http://icecast.example:8000/live.ogg"
models = ["events", "loudness"]
sample_rate = 48000
options = { user_agent = "arengine" }

[sources.desk]
url = "alsa:default"
models = "loudness"
timeout_s = 3
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sources.toml"
    path.write_text(text)
    return path


def test_a_good_file_gives_each_source_its_values_and_the_defaults(tmp_path: Path) -> None:
    hall, radio, desk = load(_write(tmp_path, GOOD))
    assert (hall.name, hall.kind, hall.models) == ("hall", "network", "events")
    assert hall.parameters == {"threshold": 0.6, "min_duration_ms": 200, "profile": "alarms"}
    assert hall.backoff == Backoff(0.5, 5.0) and hall.sample_rate == 16000
    assert (radio.models, radio.sample_rate, radio.options) == (
        "events,loudness",
        48000,
        {"user_agent": "arengine"},
    )
    assert (desk.kind, desk.target, desk.timeout_s) == ("device", ("default", "alsa"), 3.0)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[sources.hall]\nmodels = 'events'", "sources.hall.url: required"),
        ("[sources.Hall]\nurl = 'x.wav'", "sources.Hall: a source's name must be 1 to 64"),
        ("[sources.'a b']\nurl = 'x.wav'", "a source's name must be"),
        ("[sources.hall]\nurl = 'x.wav'\nthreshold = 0.5", "unknown key 'threshold'; a source"),
        ("[sources.hall]\nurl = 'ftp://x/y'", "ftp:// is not read; use one of http, https"),
        ("[sources.hall]\nurl = 'x.wav'\nsample_rate = 44100.5", "sample_rate: must be a whole"),
        ("[sources.hall]\nurl = 'x.wav'\nsample_rate = 1000", "from 8000 to 192000, got 1000"),
        ("[sources.hall]\nurl = 'x.wav'\ntimeout_s = true", "timeout_s: must be a number"),
        ("[sources.hall]\nurl = 'x.wav'\nmodels = []", "name at least one model"),
        ("[sources.hall]\nurl = 'x.wav'\nmodels = 3", "models: a model's name, or a list"),
        ("[sources.hall]\nurl = 'x.wav'\nparameters = { a = [1] }", "parameters.a: must be"),
        ("[sources.hall]\nurl = 'x.wav'\nprofile = 1", "profile: must be a string"),
        ("[sources.hall]\nurl = 'x.wav'\nreconnect_min_s = 9\nreconnect_max_s = 2", "below"),
        ("[defaults]\nurl = 'x.wav'\n[sources.hall]\nurl = 'y.wav'", "defaults.url: each"),
        ("[source.hall]\nurl = 'x.wav'", "unknown table 'source'"),
        ("", "no sources: add one as [sources.NAME]"),
        ("sources = 3", "no sources"),
        ("[sources]\nhall = 'x.wav'", "sources.hall: must be a table"),
        ("[sources.hall\nurl = 'x'", "not valid TOML"),
    ],
)
def test_a_mistake_is_named_with_its_key(tmp_path: Path, text: str, problem: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(SourcesFileError) as raised:
        load(path)
    assert str(raised.value).startswith(f"{path}: ")
    assert problem in str(raised.value)


def test_every_mistake_is_reported_at_once() -> None:
    data = {"sources": {"a": {"url": 1}, "b": {"url": "x.wav", "timeout_s": 0}, "c": {}}}
    with pytest.raises(SourcesFileError) as raised:
        parse(data)
    lines = str(raised.value).splitlines()
    assert lines[0] == "the sources file has mistakes:"
    assert [line.split(":")[0].strip() for line in lines[1:]] == [
        "sources.a.url",
        "sources.b.timeout_s",
        "sources.c.url",
    ]


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SourcesFileError, match=r"sources.toml: cannot read it: No such file"):
        load(tmp_path / "sources.toml")


def test_waits_double_with_jitter_up_to_the_cap() -> None:
    backoff = Backoff(0.5, 30.0)
    for attempt, ceiling in enumerate([0.5, 1, 2, 4, 8, 16, 30, 30, 30]):
        assert backoff.delay_s(attempt, lambda: 0.0) == ceiling / 2
        assert backoff.delay_s(attempt, lambda: 1.0) == ceiling
    draws = {round(backoff.delay_s(3), 6) for _ in range(50)}
    assert len(draws) > 1 and all(2.0 <= d <= 4.0 for d in draws)
    assert backoff.delay_s(10**6, lambda: 1.0) == 30.0  # no overflow after days of failures


def test_the_url_of_a_file_a_device_and_a_stream_is_what_pyav_opens() -> None:
    assert Source("a", "file:/tmp/x.wav").target == ("/tmp/x.wav", None)
    assert Source("a", "/tmp/x.wav").kind == "file"
    assert Source("a", "dshow:audio=Mic (USB)").target == ("audio=Mic (USB)", "dshow")
    assert Source("a", "HTTPS://radio/live").kind == "network"


def test_without_pyav_the_error_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "av", None)  # `import av` raises ImportError
    with pytest.raises(CaptureError, match=r"needs PyAV") as raised:
        require_av()
    assert raised.value.lasting
    path = _write(tmp_path, "[sources.hall]\nurl = 'rtsp://cam/1'\n")
    assert run(["listen", "--server", "http://127.0.0.1:9", "--sources", str(path)]) == 2
    assert INSTALL in capsys.readouterr().err


def test_a_bad_file_stops_the_command_before_it_connects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "[sources.Hall]\nurl = 3\n")
    assert run(["listen", "--server", "http://127.0.0.1:9", "--sources", str(path)]) == 2
    err = capsys.readouterr().err
    assert "sources.Hall: a source's name must be" in err and "sources.Hall.url: required" in err


@pytest.mark.parametrize("extra", [["x.wav"], ["--model", "events"], ["--threshold=0.5"]], ids=str)
def test_with_sources_the_models_and_parameters_come_from_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    path = _write(tmp_path, GOOD)
    argv = ["listen", "--server", "http://127.0.0.1:9", "--sources", str(path), *extra]
    assert run(argv) == 2
    assert "come from the file" in capsys.readouterr().err


def test_listen_needs_an_input_or_a_sources_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["listen", "--server", "http://127.0.0.1:9"]) == 2
    assert "needs an INPUT" in capsys.readouterr().err


def test_a_recording_is_captured_as_mono_s16le_at_the_sources_rate(tmp_path: Path) -> None:
    t = np.arange(48000 * 2) / 48000
    stereo = np.stack([np.sin(2 * np.pi * 440 * t), np.sin(2 * np.pi * 440 * t)], axis=1) * 0.5
    path = tmp_path / "tone.flac"
    sf.write(path, stereo, 48000)
    capture = Capture(Source("desk", str(path), sample_rate=16000))
    chunks = []
    while chunk := capture.read():
        chunks.append(chunk)
    capture.close()
    assert {len(c) for c in chunks[:-1]} == {3200}  # 0.1 s each
    samples = np.frombuffer(b"".join(chunks), "<i2") / 32768
    assert len(samples) == 32000
    middle = samples[1000:-1000]
    assert np.sqrt(np.mean(middle**2)) == pytest.approx(0.5 / np.sqrt(2), rel=0.02)


def test_a_recording_that_is_not_there_fails_for_good(tmp_path: Path) -> None:
    with pytest.raises(CaptureError) as raised:
        Capture(Source("desk", str(tmp_path / "missing.wav")))
    assert raised.value.lasting and "No such file" in str(raised.value)
    with pytest.raises(CaptureError) as refused:
        Capture(Source("cam", "http://127.0.0.1:9/live.ogg", timeout_s=2))
    assert not refused.value.lasting  # a stream that is not up yet: tried again
