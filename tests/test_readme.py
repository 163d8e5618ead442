"""The README's tables and map are checked against the declarations they describe.

On a mismatch the failure shows the table to paste; `python -m tests.test_readme` prints them all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from arengine.cli.commands import ENV_ONLY
from arengine.errors import ErrorCode
from arengine.kinds.catalog import KINDS
from arengine.outputs.formats import FORMATS
from arengine.settings import (
    MAX_FIELD_BYTES,
    MAX_MULTIPART_PARTS,
    MAX_PACKET_BYTES,
    MAX_RESULT_BYTES,
    MAX_STREAMS,
    Settings,
    size_text,
)

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def error_table() -> str:
    """One row per `ErrorCode` (499 is never sent: the client is gone)."""
    rows = ["| status | code | when |", "|---|---|---|"]
    rows += [
        f"| {code.status} | `{code}` | {code.description} |"
        for code in sorted(ErrorCode, key=lambda code: (code.status, code.value))
        if code.status != 499
    ]
    return "\n".join(rows)


def settings_table() -> str:
    """One row per setting: flag, environment variable, default, description."""
    rows = ["| flag | environment | default | meaning |", "|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        flag = "(environment only)" if name in ENV_ONLY else f"`--{name.replace('_', '-')}`"
        rows.append(
            f"| {flag} | `ARENGINE_{name.upper()}` | `{field.default}` | {field.description} |"
        )
    return "\n".join(rows)


def parameters_table() -> str:
    """One row per kind and post-processing parameter: range, default, meaning."""
    rows = ["| kind | parameter | range | default | meaning |", "|---|---|---|---|---|"]
    for kind in sorted(KINDS):
        params = KINDS[kind].parameters
        defaults = params()
        for name, bounds in params.bounds().items():
            value = getattr(defaults, name)
            default = "see meaning" if value is None else f"`{value}`"
            doc = params.docs()[name]
            rows.append(f"| {kind} | `{name}` | {bounds.text()} | {default} | {doc} |")
        for name, doc in params.texts().items():  # per-label values a kind sets by default
            value = getattr(defaults, name)
            if isinstance(value, Mapping) and value:
                shown = ";".join(f"{label}:{number}" for label, number in value.items())
                rows.append(f"| {kind} | `{name}` | per label | `{shown}` | {doc} |")
    return "\n".join(rows)


def formats_table() -> str:
    """One row per output format: name (and aliases), media type, extension, content."""
    rows = ["| `format` | `Accept` | extension | content |", "|---|---|---|---|"]
    for fmt in FORMATS.values():
        names = " ".join(f"`{name}`" for name in (fmt.name, *fmt.aliases))
        default = " (default)" if fmt.name == "json" else ""
        rows.append(
            f"| {names}{default} | `{fmt.media_type}` | `.{fmt.extension}` | {fmt.description} |"
        )
    return "\n".join(rows)


def _assert_in_readme(table: str, what: str) -> None:
    assert table in README, f"README's {what} table is stale; paste this:\n\n{table}\n"


def test_the_error_table_lists_every_declared_code_and_no_other() -> None:
    _assert_in_readme(error_table(), "error")
    listed = set(re.findall(r"^\| \d{3} \| `([a-z_]+)` \|", README, flags=re.MULTILINE))
    assert listed == {code.value for code in ErrorCode if code.status != 499}


def test_no_error_code_is_a_free_string_at_a_raise_site() -> None:
    for path in (ROOT / "arengine").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"code=[\"']", text), f"{path}: pass code=ErrorCode.X"


def test_the_settings_table_matches_the_settings_class() -> None:
    _assert_in_readme(settings_table(), "settings")


def test_the_formats_table_matches_the_declarations() -> None:
    _assert_in_readme(formats_table(), "formats")


def test_the_parameters_table_matches_the_declarations() -> None:
    _assert_in_readme(parameters_table(), "post-processing parameters")


FIXED_LIMITS = {
    ErrorCode.TOO_MANY_PARTS: ("more than {} parts", MAX_MULTIPART_PARTS, "at most {} parts"),
    ErrorCode.FIELD_TOO_LARGE: ("passed {}", size_text(MAX_FIELD_BYTES), "fields at most {}"),
    ErrorCode.RESULT_TOO_LARGE: ("passed {}", size_text(MAX_RESULT_BYTES), "up to {})"),
    ErrorCode.TOO_MANY_STREAMS: ("more than {} streams", MAX_STREAMS, "more than {} streams"),
    ErrorCode.DECODE_BOMB: ("more than {} of samples", size_text(MAX_PACKET_BYTES), None),
}
"""Each fixed limit (`arengine/settings.py`): how its error's description and the README's prose
quote it."""


def test_the_fixed_limits_are_quoted_from_their_declarations() -> None:
    prose = " ".join(README.split())
    for code, (described, value, in_readme) in FIXED_LIMITS.items():
        assert described.format(value) in code.description, code
        if in_readme is not None:
            assert in_readme.format(value) in prose, (
                f"the README should say {in_readme.format(value)!r}"
            )


def test_every_path_in_the_code_map_exists() -> None:
    paths = set(re.findall(r"\b((?:arengine|tests|loadtests|deploy|models)/[\w./-]*\w)", README))
    assert len(paths) >= 10
    missing = sorted(path for path in paths if not (ROOT / path).exists())
    assert not missing, f"the README names paths that do not exist: {missing}"


if __name__ == "__main__":
    print(error_table(), settings_table(), parameters_table(), formats_table(), sep="\n\n")
