"""What a plain `pip install arengine` installs is what the client and the command line import.

Every third-party module that an `arengine` or `arengine_client` module loaded by
`arengine.client` or `arengine.cli` imports (at the top or inside a function) must come from a
runtime dependency of pyproject.toml, not from an extra: before, `httpx` was a test extra, and
`arengine.client` and `arengine recognize --server` ended in `ModuleNotFoundError` on a plain
install. The client distribution's own imports are checked by `tests/client/test_distribution.py`.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
CODE = {"arengine": ROOT, "arengine_client": ROOT / "client"}
"""Where each of the two distributions' packages is in the checkout."""

_LOADED = (
    "import json, sys; import arengine.client, arengine.cli, arengine.cli.commands, "
    "arengine_client.remote, arengine_client.listen, arengine_client.cli; "
    "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in CODE)))"
)


def _requirement_name(requirement: str) -> str:
    return _normal(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0])


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_dependencies() -> set[str]:
    """The distribution names of pyproject's `[project] dependencies`, normalised."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {_requirement_name(requirement) for requirement in project["dependencies"]}


def loaded_modules() -> list[str]:
    """The arengine modules that importing the client and the command line loads (a fresh
    interpreter: this test process has imported much more)."""
    out = subprocess.run(
        [sys.executable, "-c", f"CODE = {sorted(CODE)!r}; {_LOADED}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    names: list[str] = json.loads(out.stdout)
    return names


def imported_top_levels(module: str) -> set[str]:
    """The top-level names of every absolute import in a module's source."""
    path = CODE[module.split(".")[0]] / Path(*module.split("."))
    source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    tree = ast.parse(source.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_client_and_the_cli_import_only_runtime_dependencies() -> None:
    modules = loaded_modules()
    assert "arengine.client" in modules and "arengine_client.remote" in modules
    third_party = {
        name
        for module in modules
        for name in imported_top_levels(module)
        if name not in sys.stdlib_module_names and name not in {*CODE, "__future__"}
    }
    distributions = packages_distributions()
    runtime = runtime_dependencies()
    missing = {
        name: sorted(distributions.get(name, [name]))
        for name in sorted(third_party)
        if not {_normal(d) for d in distributions.get(name, [name])} & runtime
    }
    assert missing == {}, f"imported but not runtime dependencies in pyproject.toml: {missing}"


def test_httpx_is_a_runtime_dependency_not_only_a_test_extra() -> None:
    assert "httpx" in runtime_dependencies()


@pytest.mark.parametrize("name", ["torch", "onnxruntime"])
def test_the_runtimes_the_tests_compare_are_pinned_to_what_is_installed(name: str) -> None:
    """Outputs are checked against references to 1e-4 and less: a runtime resolved fresh on a
    first run (onnxruntime 1.32.0 against a range up to 2) moved them past their gates. The pin
    admits the installed version and no later minor release."""
    requirement = next(
        Requirement(line)
        for line in tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
            "dependencies"
        ]
        if _requirement_name(line) == name
    )
    installed = Version(version(name))
    assert requirement.specifier.contains(installed.base_version), (requirement, installed)
    next_minor = f"{installed.major}.{installed.minor + 1}.0"
    assert not requirement.specifier.contains(next_minor), f"{requirement} admits {next_minor}"
