"""The client distribution imports only what it declares: httpx and websockets at the top of its
modules; its extras (soundfile, tqdm, av) and arengine (the full command line) only where a function
can do without them. A top-level `import soundfile` made `arengine recognize --server` need
soundfile and numpy; `import arengine.types` made the client need torch.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent.parent / "client" / "arengine_client"
DECLARED = {"httpx", "websockets"}
"""client/pyproject.toml's dependencies (tests/test_packaging.py checks that list)."""
OPTIONAL = {"soundfile", "tqdm", "av", "arengine"}
"""Imported inside a function, which works (or says what to install) without them."""


def _imports(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"__future__", "arengine_client"}


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda path: path.name)
def test_a_module_imports_only_the_declared_dependencies_at_its_top(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = ast.Module(
        body=[node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)],
        type_ignores=[],
    )
    assert _imports(top) <= DECLARED, path.name
    assert _imports(tree) <= DECLARED | OPTIONAL, path.name
