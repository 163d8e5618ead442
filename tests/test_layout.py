"""The package's layout: each room imports only what its `__init__` docstring allows, no two rooms
import each other (directly or round a longer cycle), and the code map names every module.

A room is a folder of `arengine/` (`arengine/kinds/`), or a module at the top (`types.py`),
whose rules are in `arengine/__init__.py`'s docstring. Every import counts: at the top, inside a
function, or under `TYPE_CHECKING`.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "arengine"
CODE_MAP = ROOT / "CONTRIBUTING.md"
"""Where the code map lives: its "How it works" section, a row per room."""
_ALLOWED = re.compile(r"^May import: (?P<rooms>[^.]*)\.", re.MULTILINE)
_TOP_ALLOWED = re.compile(r"`(?P<module>\w+)\.py`(?: and `(?P<other>\w+)\.py`)? (?P<rule>[^;.]*)")


def room_of(module: str) -> str:
    """`arengine.kinds.birds.network` -> `kinds`; `arengine.types` -> `types`; the package's
    own `__init__` is the room `arengine` (the version)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "arengine"


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


@functools.cache  # the room tests ask for the whole package's imports each
def imports_of(module: str, path: Path) -> frozenset[str]:
    """The `arengine` modules `path` imports, wherever the import statement is (parsed once a
    session: about 1 s for the package under coverage, which 20 tests asked for each)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                found.add(".".join([*base, *([node.module] if node.module else [])]))
            elif node.module:
                found.add(node.module)
    return frozenset(name for name in found if name == "arengine" or name.startswith("arengine."))


def room_imports() -> dict[str, set[str]]:
    """Each room -> the other rooms it imports."""
    graph: dict[str, set[str]] = {}
    for module, path in modules():
        room = room_of(module)
        others = {room_of(name) for name in imports_of(module, path)} - {room}
        graph.setdefault(room, set()).update(others)
    return graph


def _names(text: str) -> set[str]:
    text = re.sub(r"\([^)]*\)", "", text)  # "kinds (a note's name)": the reason is not a room
    text = text.replace(" and ", ",")
    return {name.strip().strip("`") for name in text.split(",")} - {"nothing", ""}


def allowed_imports() -> dict[str, set[str]]:
    """What each room's docstring allows: `May import: a, b.` in a folder's `__init__`, and for
    the modules at the top the rules in `arengine/__init__.py`."""
    allowed: dict[str, set[str]] = {}
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        match = _ALLOWED.search(docstring)
        if match:
            allowed[init.parent.name] = _names(match.group("rooms").replace("\n", " "))
    top = ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8")))
    for match in _TOP_ALLOWED.finditer(" ".join((top or "").split())):
        rule = match.group("rule")
        names = set() if "import nothing" in rule else _names(rule.partition("may import ")[2])
        for module in filter(None, (match.group("module"), match.group("other"))):
            allowed[module] = names
    return allowed


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of more than one room (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(room: str) -> None:
        index[room] = low[room] = len(index)
        stack.append(room)
        for other in sorted(graph.get(room, ())):
            if other not in index:
                visit(other)
                low[room] = min(low[room], low[other])
            elif other in stack:
                low[room] = min(low[room], index[other])
        if low[room] == index[room]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == room:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for room in sorted(graph):
        if room not in index:
            visit(room)
    return sorted(groups)


def test_every_room_says_what_it_may_import() -> None:
    rooms = {room for room in room_imports() if room != "arengine"}
    missing = rooms - set(allowed_imports())
    assert not missing, f"rooms whose docstring has no `May import:` rule: {sorted(missing)}"


@pytest.mark.parametrize("room", sorted(set(room_imports()) - {"arengine"}))
def test_a_room_imports_only_what_its_docstring_allows(room: str) -> None:
    imported = room_imports()[room]
    forbidden = imported - allowed_imports().get(room, set())
    assert not forbidden, f"{room} imports {sorted(forbidden)}, which its docstring does not allow"


def test_the_engine_core_names_no_feature() -> None:
    """The engine only schedules (issue 34): kinds, live streams, jobs, the HTTP layer, the
    loaded models and the settings plug into a request from outside, so neither its rule nor its
    imports may name them; a docstring widened to let one back in fails here."""
    features = {"http", "jobs", "kinds", "live", "models", "service", "settings"}
    assert not allowed_imports()["engine"] & features
    assert not room_imports()["engine"] & features


def test_no_cycle_between_rooms() -> None:
    assert cycles(room_imports()) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    """The check itself: a cycle round three rooms is found, one way imports are not."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_an_import_under_type_checking_or_in_a_function_counts(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from arengine.jobs.store import JobStore\n"
        "def f() -> None:\n"
        "    import arengine.http.app\n"
        "from .sibling import x\n",
        encoding="utf-8",
    )
    found = imports_of("arengine.engine.probe", source)
    assert found == {"arengine.jobs.store", "arengine.http.app", "arengine.engine.sibling"}


def _code_map() -> str:
    text = CODE_MAP.read_text(encoding="utf-8")
    start = text.index("## How it works")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _rows(code_map: str) -> dict[str, str]:
    """Each row of the map's table by its folder: `arengine/kinds/birds/` -> the row's text."""
    rows = re.findall(r"^\| `(arengine/[\w/]+/)` \|(.*)$", code_map, flags=re.MULTILINE)
    return dict(rows)


def _mapped(path: str, code_map: str, rows: dict[str, str]) -> bool:
    """`path` is in the map: named whole, or by its path below a row's folder in that row."""
    if path in code_map:
        return True
    return any(
        path.startswith(folder) and re.search(rf"`{re.escape(path[len(folder) :])}`", row)
        for folder, row in rows.items()
    )


def test_the_code_map_names_every_module() -> None:
    code_map = _code_map()
    rows = _rows(code_map)
    missing = [
        str(path.relative_to(ROOT))
        for _, path in modules()
        if path.name not in ("__init__.py", "__main__.py")
        and not _mapped(str(path.relative_to(ROOT)), code_map, rows)
    ]
    assert not missing, f"modules the code map ({CODE_MAP.name}) does not name: {missing}"


def test_every_room_of_the_code_map_exists() -> None:
    stale = [folder for folder in _rows(_code_map()) if not (ROOT / folder).is_dir()]
    assert not stale, f"the code map names folders that do not exist: {stale}"


def test_a_module_is_mapped_by_its_room_row_or_its_whole_path() -> None:
    code_map = (
        "| `arengine/kinds/` | the base (`base.py`) |\n"
        "| `arengine/kinds/birds/` | its network (`network.py`) |\n"
        "`arengine/types.py` is shared.\n"
    )
    rows = _rows(code_map)
    assert _mapped("arengine/kinds/base.py", code_map, rows)
    assert _mapped("arengine/kinds/birds/network.py", code_map, rows)
    assert _mapped("arengine/types.py", code_map, rows)
    assert not _mapped("arengine/kinds/birds/location.py", code_map, rows)
    assert not _mapped("arengine/kinds/catalog.py", code_map, rows)
