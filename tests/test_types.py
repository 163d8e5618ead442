"""The result JSON has one writer (`result_dict`) and one reader (`result_of`): every field goes
out and comes back, through every place that reads it."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from arengine.client import Recognition
from arengine.http.schemas import RecognizeResponse
from arengine.outputs.formats import FORMATS
from arengine.types import AudioInfo, Extra, Result, Tag, Timings, result_dict, result_of, tag_of

NOT_IN_THE_JSON = {(AudioInfo, "length_trusted")}
"""Fields that are facts for validation only, never serialised."""

RESULT = Result(
    model="notes,speech",
    audio=AudioInfo(
        format="MP4/MOV",
        subtype="AAC",
        sample_rate=44100,
        channels=2,
        frames=1_234_567,
        decoder="ffmpeg",
        stream=2,
        truncated=True,
        warnings=("3 damaged packets skipped", "the header's length was wrong"),
        recorded_at="2025-05-01T05:30:00-04:00",
    ),
    tags=(
        Tag(0.25, 1.5, "speech", 0.875, model="speech", extra=Extra(label_id="/m/09x0r")),
        Tag(
            0.5,
            0.625,
            "Eurasian Wren",
            0.75,
            extra=Extra(scientific_name="Troglodytes troglodytes"),
        ),
        Tag(
            0.5,
            0.75,
            "A4",
            0.5,
            extra=Extra(frequency_hz=440.5, midi=69, pitch_bend=(0.0, -1.0, 2.5)),
        ),
        Tag(1.0, 2.0, "C5", 0.625, model="notes", extra=Extra(midi=72, pitch_bend=())),
        Tag(1.5, 2.5, "Glass", 0.75, model="events", extra=Extra(label_id="/m/039jq")),
        Tag(
            2.0,
            5.0,
            "Eurasian Blackbird",
            0.875,
            model="birds",
            extra=Extra(scientific_name="Turdus merula"),
        ),
        Tag(
            6.0,
            18.5,
            "Station ident",
            0.25,
            extra=Extra(
                reference="7", reference_start=1.5, reference_end=14.0, speed=1.0312, pitch=0.9876
            ),
        ),
    ),
    timings=Timings(0.001, 0.25, 1.5, 0.125, 2.0),
    model_timings=(
        ("notes", Timings(0.0, 0.125, 1.25, 0.0625, 1.75)),
        ("speech", Timings(0.0, 0.125, 0.25, 0.0625, 0.5)),
    ),
    skipped=(("notes", 0.0), ("speech", 12.5)),
)


def _set_fields(value: Any) -> set[tuple[type, str]]:
    """The fields of `value` and of the dataclasses inside it that differ from their default."""
    out: set[tuple[type, str]] = set()
    for field in dataclasses.fields(value):
        item = getattr(value, field.name)
        if field.default is dataclasses.MISSING or item != field.default:
            out.add((type(value), field.name))
        items = item if isinstance(item, tuple) else (item,)
        for inner in items:
            if isinstance(inner, tuple):
                inner = inner[-1]  # a (name, timings) pair
            if dataclasses.is_dataclass(inner) and not isinstance(inner, type):
                out |= _set_fields(inner)
    return out


def test_the_sample_sets_every_field() -> None:
    """A new field of a result must be set here, so the round trips below carry it."""
    every = {
        (cls, field.name)
        for cls in (Result, AudioInfo, Tag, Timings)
        for field in dataclasses.fields(cls)
    }
    assert every - _set_fields(RESULT) == NOT_IN_THE_JSON


def test_the_json_reads_back_as_the_same_result() -> None:
    data = json.loads(json.dumps(result_dict(RESULT)))
    assert result_of(data) == RESULT


def test_every_reader_gives_the_same_result() -> None:
    text = json.dumps(result_dict(RESULT))
    assert RecognizeResponse.model_validate_json(text).to_result() == RESULT  # POST /v1/render
    assert FORMATS["json"].parse(text) == list(RESULT.tags)  # the json format
    assert Recognition is Result  # the client and `arengine recognize --server`


def test_a_csv_row_reads_as_a_tag_with_its_empty_cells_unset() -> None:
    row = {"start": "0.5", "end": "1", "label": "C5", "score": "0.5", "frequency_hz": ""}
    assert tag_of({**row, "model": "notes"}) == Tag(0.5, 1.0, "C5", 0.5, model="notes")
    assert tag_of(row) == Tag(0.5, 1.0, "C5", 0.5)


def test_a_single_model_result_has_no_model_timings() -> None:
    single = dataclasses.replace(RESULT, model="speech", model_timings=())
    assert "model_timings" not in result_dict(single)
    assert result_of(result_dict(single)) == single
