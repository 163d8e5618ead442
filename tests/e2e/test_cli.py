"""The command line: one flag per setting, environment variables, jemalloc re-execution."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import av
import httpx
import numpy as np
import pytest

from arengine.audio.validation import AudioLimits, probe
from arengine.cli.commands import build_parser, main
from arengine.cli.runner import expand
from arengine.errors import ErrorCode, UnsupportedFormat
from arengine.outputs.formats import FORMATS
from arengine.settings import FIELDS, Settings
from arengine.system.allocator import find_jemalloc
from tests.conftest import RecordingFactory, start_server, stop_server
from tests.conftest import run_cli as _arengine
from tests.recordings import ffmpeg


def _settings_from(argv: list[str]) -> Settings:
    args = vars(build_parser().parse_args(argv))
    args.pop("command")
    return Settings(**args)


def test_every_setting_is_a_flag() -> None:
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert isinstance(commands, dict)
    help_text = commands["serve"].format_help()
    for name in FIELDS:
        if name in ("api_keys", "admin_keys"):  # secrets: environment only
            flag, variable = f"--{name.replace('_', '-')}", f"ARENGINE_{name.upper()}"
            assert flag not in help_text and variable in help_text
            continue
        assert f"--{name.replace('_', '-')}" in help_text
        assert f"ARENGINE_{name.upper()}" in help_text


def test_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARENGINE_PORT", "9100")
    monkeypatch.setenv("ARENGINE_ENGINE_THREADS", "3")
    settings = _settings_from(["serve", "--port", "9200", "--no-jemalloc", "--upload-dir", "/tmp"])
    assert settings.server.port == 9200
    assert settings.engine.engine_threads == 3
    assert settings.server.jemalloc is False
    assert settings.server.upload_dir == Path("/tmp")
    assert settings.server.host == "127.0.0.1"


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


@pytest.mark.slow
@pytest.mark.skipif(find_jemalloc() is None, reason="the system jemalloc is not installed")
def test_serve_runs_under_jemalloc_unless_told_not_to(tmp_path: Path) -> None:
    for flag, expected in (("--jemalloc", "jemalloc"), ("--no-jemalloc", "glibc")):
        server = start_server(
            tmp_path, flag, "--models", "speech", "--engine-threads", "3", "--intra-op-threads", "1"
        )
        try:
            info = httpx.get(server.url + "/v1/info").json()
        finally:
            stop_server(server)
        assert info["allocator"] == expected
        assert info["engine_threads"] == 3
        assert info["intra_op_threads"] == 1
        if expected == "jemalloc":
            assert "allocator=jemalloc" in server.log.read_text()


@pytest.mark.slow
def test_recognize_writes_one_file_per_input_and_reports_the_bad_ones(
    tmp_path: Path, recording: RecordingFactory
) -> None:
    inputs = tmp_path / "in"
    (inputs / "nested").mkdir(parents=True)
    clips = [recording(f"talk{i}.{ext}") for i, ext in enumerate(["flac", "wav", "mp3"])]
    for clip in clips[:2]:
        clip.path.rename(inputs / clip.path.name)
    clips[2].path.rename(inputs / "nested" / clips[2].path.name)
    (inputs / "broken.wav").write_bytes(b"RIFF....WAVEfmt " + b"\x00" * 64)
    (inputs / "notes.md").write_text("not audio, not picked from a folder")
    out = tmp_path / "out"
    done = _arengine(
        "recognize", str(inputs), str(tmp_path / "missing.flac"), "--format", "vtt",
        "--out", str(out), "--concurrency", "2", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert written == ["nested/talk2.vtt", "talk0.vtt", "talk1.vtt"]  # the folder's layout
    for clip, name in zip(clips, ["talk0.vtt", "talk1.vtt", "nested/talk2.vtt"], strict=True):
        tags = FORMATS["vtt"].parse((out / name).read_text())
        assert len(tags) == len(clip.speech) == 2
        for tag, (start, end) in zip(tags, clip.speech, strict=True):
            assert tag.start == pytest.approx(start, abs=0.3)
            assert tag.end == pytest.approx(end, abs=0.4)
    err = done.stderr
    assert "2 of 5 files failed" in err
    assert "broken.wav" in err and "missing.flac" in err
    assert err.count("FAILED") == 2
    assert "[5/5]" in err and "overall: 5/5 files" in err
    assert "RTF" in err and "ETA" in err
    assert done.stdout == ""


def test_recognize_exits_0_when_all_succeed(tmp_path: Path, recording: RecordingFactory) -> None:
    clip = recording("ok.flac")
    done = _arengine("recognize", str(clip.path), "--format", "csv", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    header, *rows = (tmp_path / "ok.csv").read_text().splitlines()
    assert header == "start,end,label,score"
    assert len(rows) == 2


@pytest.mark.slow
def test_recognize_usage_errors(tmp_path: Path) -> None:
    assert _arengine("recognize", str(tmp_path), cwd=tmp_path).returncode == 2  # no audio
    bad_format = _arengine("recognize", "x.wav", "--format", "xml", cwd=tmp_path)
    assert bad_format.returncode == 2
    assert "csv" in bad_format.stderr
    (tmp_path / "a.wav").write_bytes(b"")
    bad_model = _arengine("recognize", "a.wav", "--model", "nope", cwd=tmp_path)
    assert bad_model.returncode == 2
    assert "unknown model nope: the models in " in bad_model.stderr
    no_notes = _arengine(
        "recognize", "a.wav", "--format", "midi", "--model", "speech", cwd=tmp_path
    )
    assert no_notes.returncode == 2
    assert "format midi holds only notes; model 'speech' tags none" in no_notes.stderr


def test_recognize_takes_a_format_alias(tmp_path: Path, recording: RecordingFactory) -> None:
    clip = recording("labels.flac")
    done = _arengine("recognize", str(clip.path), "--format", "audacity", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(FORMATS["txt"].parse((tmp_path / "labels.txt").read_text())) == 2


def test_recognize_help_lists_every_format_and_alias() -> None:
    parser = build_parser()
    recognize = parser._subparsers._group_actions[0].choices["recognize"]  # type: ignore[union-attr,index]
    text = recognize.format_help()
    for fmt in FORMATS.values():
        assert f".{fmt.extension}" in text and fmt.description[:30] in " ".join(text.split())
        for alias in fmt.aliases:
            assert alias in text


def test_models_lists_name_kind_labels_and_rate(tmp_path: Path) -> None:
    done = _arengine("models", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    assert rows[0] == ["name", "kind", "labels", "sample_rate"]
    assert ["speech", "speech", "1", "16000"] in rows


def test_models_markdown_prints_the_cards(tmp_path: Path) -> None:
    done = _arengine("models", "--markdown", "--models", "speech", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = "| model | kind | task | labels | licence | source | version | input | segments |"
    assert lines[0] == header
    assert lines[2].startswith("| `speech` | speech | voice activity detection")
    assert "| MIT |" in lines[2] and "| 16000 Hz mono |" in lines[2]
    assert len(lines) == 3


@pytest.mark.parametrize("command", ["recognize", "models", "serve", "references"])
def test_every_command_has_help_with_examples(command: str, tmp_path: Path) -> None:
    done = _arengine(command, "--help", cwd=tmp_path)
    assert done.returncode == 0
    assert "example" in done.stdout
    assert f"arengine {command}" in done.stdout


def test_recognize_probes_folder_contents_and_lists_what_it_skipped(
    tmp_path: Path, recording: RecordingFactory
) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    clip = recording("talk.wav")
    ffmpeg("-i", str(clip.path), "-c:a", "aac", str(inputs / "memo.m4a"))
    ffmpeg("-i", str(clip.path), "-c:a", "libopus", "-f", "webm", str(inputs / "recording"))
    (inputs / "cover.mp3").write_text("#EXTM3U\nhttp://127.0.0.1:9/a.ts\n")  # not audio
    (inputs / "notes.txt").write_text("minutes of the meeting")
    (inputs / "cut.m4a").write_bytes((inputs / "memo.m4a").read_bytes()[:300])  # audio, damaged
    out = tmp_path / "out"
    done = _arengine("recognize", str(inputs), "--out", str(out), "--format", "csv", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["memo.csv", "recording.csv"]
    for name in ("memo.csv", "recording.csv"):
        assert len((out / name).read_text().splitlines()) == 1 + len(clip.speech)
    err = done.stderr
    assert "skipped 2 file(s) that hold no audio" in err
    assert "cover.mp3: found an HLS/M3U playlist, not audio" in err
    assert "notes.txt: not a recognised audio file" in err
    assert "1 of 3 files failed" in err and "cut.m4a" in err


def _wavpack_in_matroska(path: Path) -> Path:
    """A container arengine opens holding a codec it does not decode (WavPack)."""
    with av.open(str(path), "w", format="matroska") as container:
        stream = container.add_stream("wavpack", rate=16000)
        stream.layout = "mono"
        silence = np.zeros((1, 16000), dtype=np.int16)
        frame = av.AudioFrame.from_ndarray(silence, format="s16p", layout="mono")
        frame.rate = 16000
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return path


def test_a_refused_codec_is_a_failure_not_a_skipped_file(tmp_path: Path) -> None:
    """The folder scan told a refused codec from a non-audio file by the message's first word;
    it goes by the error's code."""
    wavpack = _wavpack_in_matroska(tmp_path / "take.mka")
    (tmp_path / "archive.zip").write_bytes(b"PK\x03\x04" + bytes(200))
    with pytest.raises(UnsupportedFormat) as refused:
        probe(wavpack, AudioLimits(60.0, 8, 8000, 96000))
    assert refused.value.code == ErrorCode.UNSUPPORTED_CODEC and refused.value.status == 415
    files, skipped = expand([tmp_path])
    assert files == [wavpack]
    assert [(failure.path.name, failure.reason.split(";")[0]) for failure in skipped] == [
        ("archive.zip", "found a ZIP archive, not audio")
    ]


def test_resume_over_files_of_one_stem_loses_no_output(
    tmp_path: Path, recording: RecordingFactory
) -> None:
    """`--resume` in-process named only the files left to do: with `a.wav` done, `a.mp3` took
    its output's name and overwrote it; two folders' `a.wav` shared one output too."""
    inputs = tmp_path / "in"
    for folder in ("x", "y"):
        (inputs / folder).mkdir(parents=True)
    talk = recording("talk.wav")
    quiet = recording("quiet.wav", pieces=[("silence", 2.0)])
    ffmpeg("-i", str(quiet.path), str(inputs / "a.mp3"))
    talk.path.rename(inputs / "a.wav")
    (inputs / "x" / "a.wav").write_bytes((inputs / "a.wav").read_bytes())
    quiet.path.rename(inputs / "y" / "a.wav")
    out = tmp_path / "out"
    (out / "x").mkdir(parents=True)
    (out / "x" / "a.csv").write_text("kept\n")
    (out / "a.wav.csv").write_text("kept\n")
    done = _arengine(
        "recognize", str(inputs), "--format", "csv", "--out", str(out), "--resume", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "resume: 2 outputs already there, skipped" in done.stderr
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert written == ["a.mp3.csv", "a.wav.csv", "x/a.csv", "y/a.csv"]
    assert (out / "a.wav.csv").read_text() == (out / "x" / "a.csv").read_text() == "kept\n"
    for silent in ("a.mp3.csv", "y/a.csv"):
        assert (out / silent).read_text() == "start,end,label,score\n"


def test_combined_table_of_a_folder_run_and_of_its_resumption(
    tmp_path: Path, recording: RecordingFactory
) -> None:
    inputs = tmp_path / "in"
    (inputs / "site1").mkdir(parents=True)
    recording("talk.wav").path.rename(inputs / "site1" / "PA01_20250501_053000.wav")
    recording("other.flac").path.rename(inputs / "other.flac")
    out, combined = tmp_path / "out", tmp_path / "all.csv"
    args = ["recognize", str(inputs), "--format", "csv", "--out", str(out)]
    done = _arengine(*args, "--combined", str(combined), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"combined: 2 files' rows in {combined}" in done.stderr
    rows = list(csv.DictReader(io.StringIO(combined.read_text())))
    dated = str(inputs.resolve() / "site1" / "PA01_20250501_053000.wav")
    assert [row["file"] for row in rows] == [str(inputs.resolve() / "other.flac")] * 2 + [dated] * 2
    assert [row["start_at"][:16] for row in rows[2:]] == ["2025-05-01T05:30"] * 2  # its name's
    assert rows[0]["start_at"] == ""  # the other file says nothing of its time
    first = combined.read_text()
    (out / "other.csv").unlink()
    again = _arengine(*args, "--resume", "--combined", str(combined), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "resume: 1 outputs already there, skipped" in again.stderr
    assert combined.read_text() == first  # the file done earlier is in it too
    refused = _arengine(*args[:-4], "--format", "vtt", "--combined", "x.vtt", cwd=tmp_path)
    assert refused.returncode == 2
    assert "--combined takes a table format: csv, birdnet, kaleidoscope, raven" in refused.stderr
