"""Each kind declares its own tag fields (`arengine/kinds/fields.py`); the code every kind
shares names none of them, so a kind's field is added or changed in its own folder only."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from arengine.kinds.catalog import KINDS, TAG_FIELDS, field_of
from arengine.kinds.fields import Role, TagField, extra_of
from arengine.types import Tag, result_dict, result_of

ROOT = Path(__file__).resolve().parents[2]
SHARED = (
    "arengine/outputs",
    "arengine/http",
    "arengine/cli",
    "arengine/engine",
    "arengine/postprocess",
    "arengine/types.py",
    "client/arengine_client",
)
"""The code every kind goes through: types, outputs, the HTTP layer, the CLI, the engine, the
shared post-processing (the label tagger of every label kind) and the client distribution."""
KIND_OWN = {"arengine/http/references.py": "the fingerprint library's own endpoints"}
"""Modules of the shared rooms that serve one kind, and so may name its fields."""
OWN_NAMES = {
    ("arengine/outputs/formats.py", "scientific_name"): 2,  # Kaleidoscope's own column
    ("arengine/outputs/formats.py", "midi"): 1,  # the MIDI format's name
    ("arengine/outputs/midi.py", "pitch"): 3,  # mido's pitch-wheel value
    ("client/arengine_client/progress.py", "speed"): 3,  # a progress bar's rate
}
"""Names that are a kind field's too but mean something else where they stand, and how often
they do: one more is a use of the field."""


def _files() -> Iterator[Path]:
    for place in SHARED:
        path = ROOT / place
        found = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        yield from (f for f in found if f.relative_to(ROOT).as_posix() not in KIND_OWN)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes: prose may name a field as an example."""
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for item in body:
                if isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant):
                    found.add(id(item.value))
    return found


def _names(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every identifier and string in the code (not its docstrings), with its line."""
    prose = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            yield node.lineno, node.attr
        elif isinstance(node, ast.Name):
            yield node.lineno, node.id
        elif isinstance(node, ast.keyword) and node.arg:
            yield node.value.lineno, node.arg
        elif isinstance(node, ast.arg):
            yield node.lineno, node.arg
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
        ):
            yield node.lineno, node.value


def test_shared_code_names_no_kind_field() -> None:
    named: dict[tuple[str, str], list[int]] = {}
    for path in _files():
        where = path.relative_to(ROOT).as_posix()
        for line, name in _names(ast.parse(path.read_text(), str(path))):
            if name in TAG_FIELDS:
                named.setdefault((where, name), []).append(line)
    beyond = {key: lines for key, lines in named.items() if len(lines) > OWN_NAMES.get(key, 0)}
    assert beyond == {}, "shared code names a kind's field; ask its declaration (TAG_FIELDS)"
    assert {key: len(lines) for key, lines in named.items()} == OWN_NAMES  # none left stale


def test_the_check_finds_a_field_named() -> None:
    """The check above sees attribute reads, keywords and strings, not docstrings."""
    code = (
        'def f(tag):\n    """Reads `reference`."""\n    return tag.midi, g(label_id=1), "speed"\n'
    )
    assert sorted(name for _, name in _names(ast.parse(code)) if name in TAG_FIELDS) == [
        "label_id",
        "midi",
        "speed",
    ]


def test_every_declared_field_belongs_to_a_kind_and_has_its_text() -> None:
    for name, declared in TAG_FIELDS.items():
        assert declared.name == name and declared.description.endswith(".")
        assert declared.type in (float, int, str)
        assert any(declared in kind.tag_fields for kind in KINDS.values())
    assert not {"start", "end", "label", "score", "model", "extra"} & set(TAG_FIELDS)


def test_each_role_is_one_field() -> None:
    for role in Role:
        assert sum(f.role is role for f in TAG_FIELDS.values()) <= 1, role
    assert field_of(Role.SPECIES) is TAG_FIELDS["scientific_name"]


def test_a_field_declared_twice_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from arengine.kinds import catalog

    twin: TagField[float] = TagField("midi", float, "Another midi.")
    kind = dataclasses.replace(KINDS["loudness"], tag_fields=(twin,))
    monkeypatch.setitem(catalog.KINDS, "loudness", kind)
    with pytest.raises(ValueError, match="'midi' is declared twice"):
        catalog._tag_fields()


def test_a_field_is_read_through_its_declaration() -> None:
    level = TAG_FIELDS["level_dbfs"]
    tag = Tag(1.0, 2.0, "loud", 0.5, extra=extra_of((level, -6.02)))
    assert level.of(tag) == level.at(tag) == -6.02
    quiet = Tag(1.0, 2.0, "loud", 0.5)
    assert level.of(quiet) is None
    with pytest.raises(KeyError, match="level_dbfs"):
        level.at(quiet)


def test_unknown_fields_round_trip_through_the_client_types() -> None:
    """The client knows no kinds: a field a newer server sends comes back as it went."""
    data = {
        "model": "x",
        "audio": {
            "duration_s": 1.0,
            "sample_rate": 16000,
            "channels": 1,
            "format": "WAV",
            "subtype": "PCM_16",
            "decoder": "libsndfile",
            "stream": 0,
            "truncated": False,
            "warnings": [],
        },
        "tags": [{"start": 0.0, "end": 1.0, "label": "a", "score": 0.5, "colour": [1, 2]}],
        "timings": dict.fromkeys(
            ("validation_s", "features_s", "inference_s", "postprocess_s", "total_s"), 0.0
        ),
    }
    result = result_of(data)
    assert result.tags[0].extra == {"colour": (1, 2)}
    assert result_dict(result) == data
    assert result_of(result_dict(result)) == result
