"""The documentation site: every declaration has its generated reference entry, no page repeats a
generated table, the limits the guides quote are the declared ones, and the site builds offline.

The references are written by `docs/references.py` (`python -m docs.references` prints them).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from arengine.errors import ErrorCode
from arengine.kinds.catalog import KINDS
from arengine.models import DEFAULT_MODELS_DIR
from arengine.outputs.formats import FORMATS
from arengine.settings import (
    MAX_FIELD_BYTES,
    MAX_MULTIPART_PARTS,
    MAX_PACKET_BYTES,
    MAX_RESULT_BYTES,
    MAX_STREAM_TEXT_BYTES,
    MAX_STREAMS,
    SECTIONS,
    size_text,
)
from docs import references

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
PROSE = " ".join(" ".join(page.read_text(encoding="utf-8").split()) for page in PAGES)


def test_the_error_reference_lists_every_declared_code_and_no_other() -> None:
    page = references.errors_page()
    listed = set(re.findall(r"^\| \d{3} \| `([a-z_]+)` \|", page, flags=re.MULTILINE))
    assert listed == {code.value for code in ErrorCode if code.status != 499}
    for code in ErrorCode:
        if code.status != 499:
            assert f"| {code.status} | `{code}` | {code.description} |" in page, code


def test_no_error_code_is_a_free_string_at_a_raise_site() -> None:
    for path in (ROOT / "arengine").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"code=[\"']", text), f"{path}: pass code=ErrorCode.X"


def test_the_settings_reference_has_every_setting_with_its_default_and_meaning() -> None:
    page = references.settings_page()
    for section, model in SECTIONS.items():
        for name, field in model.model_fields.items():
            rows = page.splitlines()
            row = next(line for line in rows if f"| `ARENGINE_{name.upper()}`" in line)
            assert f"`ARENGINE_{section.upper()}__{name.upper()}`" in row
            assert f"`{field.default}`" in row and " ".join(str(field.description).split()) in row


def test_the_settings_reference_is_in_sections_in_their_order() -> None:
    page = references.settings_page()
    assert re.findall(r"^## (\w+)$", page, flags=re.M) == list(SECTIONS)
    for section, model in SECTIONS.items():
        table = page.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
        listed = re.findall(r"^\| .*? \| `ARENGINE_(\w+)`,", table, flags=re.M)
        assert listed == [name.upper() for name in model.model_fields], section


def test_a_setting_shows_its_range() -> None:
    assert "| 1 <= x <= 65535 |" in references.settings_page()  # port


def test_the_parameters_reference_has_every_parameter_of_every_kind() -> None:
    page = references.parameters_page()
    sections = dict(re.findall(r"^## (\w+)\n\n(.*?)(?=^## |\Z)", page, flags=re.M | re.S))
    assert set(sections) == set(KINDS)
    for name, kind in KINDS.items():
        params = kind.parameters
        declared = {*params.bounds(), *params.texts()}
        listed = set(re.findall(r"^\| `(\w+)` \|", sections[name], flags=re.M))
        assert listed == declared, name
        for parameter, bounds in params.bounds().items():
            assert f"| `{parameter}` | {bounds.text()} |" in sections[name]


def test_the_formats_reference_has_every_format_and_alias() -> None:
    page = references.formats_page()
    for fmt in FORMATS.values():
        row = next(line for line in page.splitlines() if line.startswith(f"| `{fmt.name}`"))
        for name in fmt.aliases:
            assert f"`{name}`" in row
        assert f"`{fmt.media_type}` | `.{fmt.extension}` |" in row


def test_the_api_reference_has_every_operation_of_the_openapi_schema() -> None:
    schema = references._openapi()
    page = references.api_page(schema)
    for path, methods in schema["paths"].items():
        for method in methods:
            assert f"### `{method.upper()} {path}`" in page
    assert "### `POST /v1/recognize`" in page


def test_the_model_cards_reference_has_every_shipped_model() -> None:
    page = references.models_page()
    shipped = {path.parent.name for path in DEFAULT_MODELS_DIR.glob("*/manifest.toml")}
    listed = set(re.findall(r"^\| `([\w-]+)` \|", page, flags=re.M))
    assert shipped == listed


GENERATED_HEADERS = {
    "errors": "| status | code | when |",
    "settings": "| flag | environment |",
    "formats": "| `format` | `Accept` |",
    "parameters": "| parameter | range | default | meaning |",
    "cards": "| model | kind | task |",
}
"""The first cells of each generated table: no written page may hold such a table."""


@pytest.mark.parametrize("page", [*PAGES, ROOT / "README.md"], ids=lambda path: path.name)
def test_no_page_repeats_a_table_a_generated_reference_holds(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for what, header in GENERATED_HEADERS.items():
        assert header not in text, f"{page} repeats the {what} table: link to the reference"
    rows = re.findall(r"^\| \d{3} \| `[a-z_]+` \|", text, flags=re.M)
    assert not rows, f"{page} repeats rows of the error table"


FIXED_LIMITS = {
    ErrorCode.TOO_MANY_PARTS: ("more than {} parts", MAX_MULTIPART_PARTS, "at most {} parts"),
    ErrorCode.FIELD_TOO_LARGE: ("passed {}", size_text(MAX_FIELD_BYTES), "fields at most {}"),
    ErrorCode.RESULT_TOO_LARGE: ("passed {}", size_text(MAX_RESULT_BYTES), "up to {})"),
    ErrorCode.TOO_MANY_STREAMS: ("more than {} streams", MAX_STREAMS, "more than {} streams"),
    ErrorCode.DECODE_BOMB: ("more than {} of samples", size_text(MAX_PACKET_BYTES), None),
    ErrorCode.INVALID_STREAM_MESSAGE: (
        "text message passed {}",
        size_text(MAX_STREAM_TEXT_BYTES),
        "a text message over {}",
    ),
}
"""Each fixed limit (a named constant of the settings module): how its error's description and
the guides' prose quote it."""


def test_the_fixed_limits_are_quoted_from_their_declarations() -> None:
    for code, (described, value, in_guides) in FIXED_LIMITS.items():
        assert described.format(value) in code.description, code
        if in_guides is not None:
            assert in_guides.format(value) in PROSE, (
                f"the guides should say {in_guides.format(value)!r}"
            )


def _nav_pages(entries: list[object]) -> set[str]:
    found: set[str] = set()
    for entry in entries:
        values = entry.values() if isinstance(entry, dict) else [entry]
        for value in values:
            found |= _nav_pages(value) if isinstance(value, list) else {str(value)}
    return found


def test_every_page_written_or_generated_is_in_the_navigation() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))
    nav = _nav_pages(config["nav"])
    written = {str(page.relative_to(DOCS)) for page in PAGES}
    assert nav == written | set(references.PAGES) | {"changelog.md", "contributing.md"}


@pytest.mark.slow
def test_the_site_builds_strict_and_references_no_external_asset(tmp_path: Path) -> None:
    """`make test` builds the site too; this checks what it holds: the generated pages, and no
    font, script, style or image from another host (the site is served offline)."""
    mkdocs = Path(sys.executable).parent / "mkdocs"
    if not mkdocs.exists():
        pytest.skip("mkdocs is not installed (deploy/setup.sh --test installs it)")
    built = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    html = list((tmp_path / "site").rglob("*.html"))
    assert {"api.html", "errors.html", "settings.html"} <= {page.name for page in html}
    asset = re.compile(r"<(?:script|link|img|source|iframe)\b[^>]*(?:src|href)=\"(?:https?:)?//")
    for page in html:
        assert not asset.search(page.read_text(encoding="utf-8")), page
    css = " ".join(path.read_text() for path in (tmp_path / "site").rglob("*.css"))
    assert "fonts.googleapis" not in css and "@import url(http" not in css
