"""The site's reference pages, generated from the declarations they describe.

Each page is written from one declaration and nowhere else: the HTTP API from the app's OpenAPI
schema, the settings from the settings class, the query parameters from each kind's parameter
class, the errors from the error table, the output formats from the format table, the model cards
from `models/README.md`'s card table (which `tests/cli/test_cards.py` compares with the
manifests). `docs/hooks.py` adds them to the site at build time; `tests/test_docs.py` checks that
every declaration has its entry. `python -m docs.references` prints them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from annotated_types import Ge, Gt, Le, Lt

from arengine.cli.serve import ENV_ONLY
from arengine.errors import ErrorCode
from arengine.kinds.catalog import KINDS
from arengine.outputs.formats import FORMATS
from arengine.settings import SECTIONS, Settings

ROOT = Path(__file__).resolve().parent.parent
GENERATED = "Generated from the code when the site is built: edit the declaration, not this page."


def _cell(text: object) -> str:
    """A table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _page(title: str, intro: str, *parts: str) -> str:
    return "\n\n".join((f"# {title}", intro, f"!!! note\n    {GENERATED}", *parts)) + "\n"


def error_table() -> str:
    """One row per `ErrorCode` (499 is never sent: the client is gone)."""
    rows = ["| status | code | when |", "|---|---|---|"]
    rows += [
        f"| {code.status} | `{code}` | {_cell(code.description)} |"
        for code in sorted(ErrorCode, key=lambda code: (code.status, code.value))
        if code.status != 499
    ]
    return "\n".join(rows)


def errors_page() -> str:
    return _page(
        "Errors",
        'Every error answer has the body `{"error": {"code": "...", "message": "..."}}`; the '
        "`code` is stable, the message is for people. A live stream closes with `4000 + status` "
        "and the code as the reason. Each code is also a `reason` of "
        "`arengine_rejected_requests_total`.",
        error_table(),
    )


def _range(metadata: list[Any]) -> str:
    """`1 <= x <= 65535` from a field's annotated-types bounds; `-` when it has none."""
    low = high = ""
    for item in metadata:
        if isinstance(item, Ge):
            low = f"{item.ge} <= "
        elif isinstance(item, Gt):
            low = f"{item.gt} < "
        elif isinstance(item, Le):
            high = f" <= {item.le}"
        elif isinstance(item, Lt):
            high = f" < {item.lt}"
    return f"{low}x{high}" if low or high else "-"


def settings_table() -> str:
    """One section per settings section, as `arengine serve --help` groups them; one row per
    setting: flag, environment variables (flat and nested), default, range, meaning."""
    return "\n\n".join(_section_table(section) for section in SECTIONS)


def _section_table(section: str) -> str:
    model = SECTIONS[section]
    rows = [
        f"## {section}",
        "",
        str(model.__doc__),
        "",
        "| flag | environment | default | range | meaning |",
        "|---|---|---|---|---|",
    ]
    for name, field in model.model_fields.items():
        flag = "(environment only)" if name in ENV_ONLY else f"`--{name.replace('_', '-')}`"
        variables = f"`ARENGINE_{name.upper()}`, `ARENGINE_{section.upper()}__{name.upper()}`"
        rows.append(
            f"| {flag} | {variables} | `{field.default}` | "
            f"{_range(field.metadata)} | {_cell(field.description)} |"
        )
    return "\n".join(rows)


def settings_page() -> str:
    return _page(
        "Settings",
        "Each setting is a flag of `arengine serve` and an environment variable with the "
        "`ARENGINE_` prefix, flat or with its section (`ARENGINE_PORT` or "
        "`ARENGINE_SERVER__PORT`: both with different values are refused; a flag wins over "
        "the variable); API keys are environment only, so "
        "they never show in `ps`. `GET /v1/info` shows the limits in force.",
        settings_table(),
    )


def parameters_table(kind: str) -> str:
    """One row per post-processing parameter of `kind`: range, default, meaning."""
    rows = ["| parameter | range | default | meaning |", "|---|---|---|---|"]
    params = KINDS[kind].parameters
    defaults = params()
    for name, bounds in params.bounds().items():
        value = getattr(defaults, name)
        default = "see meaning" if value is None else f"`{value}`"
        rows.append(f"| `{name}` | {bounds.text()} | {default} | {_cell(params.docs()[name])} |")
    for name, doc in params.texts().items():  # per-label values a kind sets by default
        value = getattr(defaults, name)
        shown = "-"
        if isinstance(value, Mapping) and value:
            shown = "`" + ";".join(f"{label}:{number}" for label, number in value.items()) + "`"
        rows.append(f"| `{name}` | per label or list | {shown} | {_cell(doc)} |")
    return "\n".join(rows)


def parameters_page() -> str:
    sections = [f"## {kind}\n\n{parameters_table(kind)}" for kind in sorted(KINDS)]
    return _page(
        "Query parameters",
        "Each model kind declares its post-processing parameters once. They are query "
        "parameters of `POST /v1/recognize`, `POST /v1/jobs`, `GET /v1/jobs/{id}/result` and "
        "`WS /v1/listen`, flags of `arengine recognize` and `arengine listen`, and defaults in a "
        "model's `manifest.toml` (`[postprocess]`), always within the same ranges. A value "
        "outside its range, one the model does not take or one given twice is a 422 "
        "`invalid_parameter` that names it and its range. Lists are separated by `;` (AudioSet "
        "names hold commas), per-label values are `label:value`. `GET /v1/models` shows each "
        "loaded model's defaults.",
        *sections,
    )


def formats_table() -> str:
    """One row per output format: name (and aliases), media type, extension, content."""
    rows = ["| `format` | `Accept` | extension | content |", "|---|---|---|---|"]
    for fmt in FORMATS.values():
        names = " ".join(f"`{name}`" for name in (fmt.name, *fmt.aliases))
        default = " (default)" if fmt.name == "json" else ""
        rows.append(
            f"| {names}{default} | `{fmt.media_type}` | `.{fmt.extension}` | "
            f"{_cell(fmt.description)} |"
        )
    return "\n".join(rows)


def formats_page() -> str:
    return _page(
        "Output formats",
        "`?format=` (or the `Accept` header) on a recognition or a job's result, `--format` on "
        "the command line, and the page's download menus take these names; `GET /v1/formats` "
        "lists them as JSON. Every format but JSON comes as an attachment named after the upload. "
        "`ndjson` (`Accept: application/x-ndjson`) streams tags as they are final: see "
        "[Streaming results](../guides/outputs.md).",
        formats_table(),
    )


def _openapi() -> dict[str, Any]:
    from arengine.http.app import create_app

    return create_app(Settings()).openapi()


def _fields(schema: Mapping[str, Any], ref: str) -> list[str]:
    """The fields of a response's schema (its top-level properties) as table rows."""
    name = ref.rsplit("/", 1)[-1]
    properties = schema["components"]["schemas"][name].get("properties", {})
    if not properties:
        return []
    rows = ["", f"Answer (`{name}`):", "", "| field | meaning |", "|---|---|"]
    for field, spec in properties.items():
        rows.append(f"| `{field}` | {_cell(spec.get('description', spec.get('title', '')))} |")
    return rows


def _answer_ref(op: Mapping[str, Any]) -> str | None:
    for status in ("200", "201", "202"):
        content = op.get("responses", {}).get(status, {}).get("content", {})
        for media in content.values():
            ref = media.get("schema", {}).get("$ref")
            if isinstance(ref, str):
                return ref
    return None


def _operation(
    method: str, path: str, op: Mapping[str, Any], schema: Mapping[str, Any] | None = None
) -> str:
    lines = [f"### `{method.upper()} {path}`", "", _cell(op.get("summary", ""))]
    if op.get("description"):
        lines += ["", op["description"].strip()]
    params = op.get("parameters", [])
    if params:
        lines += ["", "| parameter | in | required | meaning |", "|---|---|---|---|"]
        for param in params:
            meaning = param.get("description") or param.get("schema", {}).get("description", "")
            required = "yes" if param.get("required") else "no"
            lines.append(f"| `{param['name']}` | {param['in']} | {required} | {_cell(meaning)} |")
    body = op.get("requestBody", {}).get("content", {})
    if body:
        lines += ["", "Body: " + ", ".join(f"`{media}`" for media in body)]
    ref = _answer_ref(op)
    if schema is not None and ref is not None:
        lines += _fields(schema, ref)
    responses = op.get("responses", {})
    if responses:
        lines += ["", "| status | meaning |", "|---|---|"]
        lines += [
            f"| {status} | {_cell(answer.get('description', ''))} |"
            for status, answer in sorted(responses.items())
        ]
    return "\n".join(lines)


def api_page(schema: Mapping[str, Any] | None = None) -> str:
    """Every operation of the OpenAPI schema, grouped by tag (or by first path segment)."""
    schema = schema if schema is not None else _openapi()
    sections = [
        _operation(method, path, op, schema)
        for path, methods in schema["paths"].items()
        for method, op in methods.items()
    ]
    return _page(
        "HTTP API",
        f"`{schema['info']['title']}` {schema['info']['version']}. A running server serves "
        "the same schema at `/openapi.json` and an interactive Swagger UI at `/docs` (offline: "
        "its files come from the package). Every error answer is described in "
        "[Errors](errors.md); query parameters of the models in "
        "[Query parameters](parameters.md). The live stream `WS /v1/listen` is not an OpenAPI "
        "operation: its protocol is in [Live streams](../guides/live.md).",
        "\n\n".join(sections),
    )


def models_page() -> str:
    """The card table of `models/README.md`, kept equal to the manifests by a test."""
    text = (ROOT / "models" / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- cards:start -->\n(.*?)\n<!-- cards:end -->", text, flags=re.S)
    if found is None:
        raise ValueError("models/README.md lost its cards markers")
    return _page(
        "Model cards",
        "The models that come with arengine, one card each, from their manifests' `[card]` and "
        "segment plans (`arengine models --markdown` prints this table for the models that load "
        "on your machine). `GET /v1/models` also gives each loaded model's labels, defaults, "
        "weights' sha256 and the real-time factor measured at warm-up. Mind the licences: "
        "`music` and `birds` were trained on data for non-commercial use only.",
        found.group(1),
    )


PAGES: dict[str, Callable[[], str]] = {
    "reference/api.md": api_page,
    "reference/settings.md": settings_page,
    "reference/parameters.md": parameters_page,
    "reference/errors.md": errors_page,
    "reference/formats.md": formats_page,
    "reference/models.md": models_page,
}
"""Each generated page of the site, by its path under `docs/`."""


if __name__ == "__main__":
    for page in PAGES.values():
        print(page())
    print(json.dumps(sorted(PAGES)))
