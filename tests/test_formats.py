"""Output formats: each writes a result and parses it back to the same tags."""

from __future__ import annotations

import json

import pytest

from arengine.formats import FORMATS, get_format, negotiate
from arengine.http.schemas import RecognizeResponse
from arengine.types import AudioInfo, Result, Tag, Timings, result_dict

SPEECH = (
    Tag(0.034, 2.59, "speech", 0.9683),
    Tag(3.3333337, 7.25, "speech", 0.71234),
    Tag(3599.9994, 3723.5, "speech", 0.5),
)
NOTES = (Tag(0.5, 0.75, "A4", 0.9, 440.0), Tag(1.0, 1.5, "C#5", 0.8, 554.37))


def _result(tags: tuple[Tag, ...], model: str = "speech") -> Result:
    timings = Timings(0.0011111111, 0.02, 0.03, 0.004, 0.05)
    return Result(model, AudioInfo("FLAC", "PCM_16", 44100, 2, 44100 * 3724), tags, timings)


@pytest.mark.parametrize("name", sorted(FORMATS))
@pytest.mark.parametrize("tags", [SPEECH, NOTES, ()], ids=["speech", "notes", "empty"])
def test_round_trip(name: str, tags: tuple[Tag, ...]) -> None:
    fmt = FORMATS[name]
    parsed = fmt.parse(fmt.render(_result(tags), "my talk.flac"))
    assert len(parsed) == len(tags)
    for got, want in zip(parsed, tags, strict=True):
        assert got.start == pytest.approx(want.start, abs=fmt.precision_s)
        assert got.end == pytest.approx(want.end, abs=fmt.precision_s)
        assert got.label == want.label
        if name in ("json", "csv", "raven"):
            assert got.score == pytest.approx(want.score, abs=1e-6)
        if name in ("vtt", "srt"):
            assert got.score == pytest.approx(want.score, abs=0.005)
        if name in ("json", "csv"):
            assert got.frequency_hz == want.frequency_hz


def test_json_is_the_http_body() -> None:
    for tags in (SPEECH, NOTES):
        result = _result(tags)
        http = RecognizeResponse.of(result).model_dump(exclude_none=True)
        assert json.loads(FORMATS["json"].render(result, "x")) == http == result_dict(result)


def test_exact_text_of_each_format() -> None:
    result = _result(SPEECH[:1])
    assert FORMATS["csv"].render(result, "x") == "start,end,label,score\n0.034,2.59,speech,0.9683\n"
    assert FORMATS["txt"].render(result, "x") == "0.034000\t2.590000\tspeech\n"
    assert FORMATS["rttm"].render(result, "my talk") == (
        "SPEAKER my_talk 1 0.034 2.556 <NA> <NA> speech <NA> <NA>\n"
    )
    assert FORMATS["vtt"].render(result, "x") == (
        "WEBVTT\n\n1\n00:00:00.034 --> 00:00:02.590\nspeech (0.97)\n"
    )
    assert FORMATS["srt"].render(result, "x") == "1\n00:00:00,034 --> 00:00:02,590\nspeech (0.97)\n"
    raven = FORMATS["raven"].render(result, "x").splitlines()
    assert raven[0].split("\t")[:8] == [
        "Selection",
        "View",
        "Channel",
        "Begin Time (s)",
        "End Time (s)",
        "Low Freq (Hz)",
        "High Freq (Hz)",
        "Annotation",
    ]
    assert raven[1].split("\t")[:8] == [
        "1",
        "Spectrogram 1",
        "1",
        "0.034000",
        "2.590000",
        "0.000",
        "22050.000",
        "speech",
    ]


def test_cue_times_past_an_hour() -> None:
    text = FORMATS["srt"].render(_result(SPEECH), "x")
    assert "00:59:59,999 --> 01:02:03,500" in text


def test_pitch_columns() -> None:
    result = _result(NOTES, "pitch")
    assert (
        FORMATS["csv"].render(result, "x").splitlines()[0] == "start,end,label,score,frequency_hz"
    )
    low, high = FORMATS["raven"].render(result, "x").splitlines()[1].split("\t")[5:7]
    assert float(low) < 440 < float(high) < 466


def test_unknown_format_lists_the_known_ones() -> None:
    with pytest.raises(
        ValueError, match="known formats: json, csv, txt, raven, rttm, vtt, srt, ndjson"
    ):
        get_format("xml")


def test_accept_header_negotiation() -> None:
    assert negotiate("text/csv") == "csv"
    assert negotiate("text/html, text/vtt;q=0.9") == "vtt"
    assert negotiate("application/x-subrip") == "srt"
    assert negotiate("application/x-ndjson") == "ndjson"
    assert negotiate("*/*") is None
    assert negotiate(None) is None
