"""Small CLI defects a first run met: no `--version`, an overall line past its total."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest

from arengine import __version__
from arengine.cli.commands import build_parser
from arengine_client.cli import build_parser as client_parser
from arengine_client.progress import _Counts


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"arengine {__version__}"


def test_the_overall_line_never_reads_more_done_than_in_all() -> None:
    """Headers said 34.4 s; decoding found 34.5 s: the line read "34.5/34.4 s of audio"."""
    counts = _Counts(files=1, total_audio_s=34.4, done_files=1, done_audio_s=34.5)
    assert "34.5/34.5 s of audio" in counts.overall()


@pytest.mark.parametrize("parser", [build_parser, client_parser], ids=["arengine", "client"])
def test_concurrency_is_the_flag_and_jobs_its_deprecated_alias(
    parser: Callable[[], argparse.ArgumentParser], capsys: pytest.CaptureFixture[str]
) -> None:
    """`--jobs` also named the server's durable jobs: `--concurrency` says what it is, and the
    old name still works, with a warning on stderr."""
    server = ["--server", "http://127.0.0.1:9"]
    assert parser().parse_args(["recognize", "a.wav", *server]).concurrency == 4
    assert (
        parser().parse_args(["recognize", "a.wav", "--concurrency", "2", *server]).concurrency == 2
    )
    assert "deprecated" not in capsys.readouterr().err
    assert parser().parse_args(["recognize", "a.wav", "--jobs", "3", *server]).concurrency == 3
    assert "--jobs is deprecated; use --concurrency" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser().parse_args(["recognize", "--help"])
    shown = capsys.readouterr().out
    assert "--concurrency" in shown and "--jobs" not in shown, "the old name is not advertised"
