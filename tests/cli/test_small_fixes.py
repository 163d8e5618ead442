"""Small CLI defects a first run met: no `--version`, an overall line past its total."""

from __future__ import annotations

import pytest

from arengine import __version__
from arengine.cli.commands import build_parser
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
