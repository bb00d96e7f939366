"""The package layout: one `hangwatch` namespace, layers that point one way, no cycles.

Layers, bottom to top (a module may import its own package and anything below);
hangwatch.supervisor is further divided into rooms (ROOM_ALLOWED, at the end):
    hangwatch.contract                                        (0)
    hangwatch.supervisor | hangwatch.diagnostics | hangwatch.generator   (1, side by side)
    hangwatch.trainer  (the trainer-side facade over generator + contract)   (2)
    hangwatch.cli      (wires supervisor + diagnostics; reproduce drives the generator's worker)  (2)
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_DIR: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]
BARE = ("supervisor", "generator", "diagnostics")
LAYER = {
    "hangwatch.contract": 0,
    "hangwatch.supervisor": 1,
    "hangwatch.diagnostics": 1,
    "hangwatch.generator": 1,
    "hangwatch.trainer": 2,
    "hangwatch.cli": 2,
}
# Who may import whom, besides itself and the contract.
ALLOWED = {
    "hangwatch.trainer": {"hangwatch.generator"},
    # `hangwatch reproduce` runs a batch in the generator's isolated worker (never importing torch itself).
    "hangwatch.cli": {"hangwatch.supervisor", "hangwatch.diagnostics", "hangwatch.generator"},
}


def _package_of_dir(path: Path) -> str:
    """The installed name of the module at ``path`` (longest package-dir match)."""
    rel = path.relative_to(ROOT).with_suffix("")
    best = max((d for d in PACKAGE_DIR.values() if rel.as_posix().startswith(d + "/")), key=len)
    name = next(n for n, d in PACKAGE_DIR.items() if d == best)
    rest = rel.relative_to(best).parts
    if rest and rest[-1] == "__init__":
        rest = rest[:-1]
    return ".".join((name, *rest))


def _modules() -> dict[str, Path]:
    mods = {}
    for folder in BARE:
        for path in (ROOT / folder).rglob("*.py"):
            mods[_package_of_dir(path)] = path
    return mods


MODULES = _modules()


def _layer_root(name: str) -> str:
    return max((p for p in LAYER if name == p or name.startswith(p + ".")), key=len)


def _imports(path: Path, name: str) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.rsplit(".", node.level - (1 if path.name == "__init__.py" else 0))[0]
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in MODULES)
    return out


GRAPH = {name: {i for i in _imports(path, name) if i.startswith("hangwatch.")} for name, path in MODULES.items()}


def test_every_package_folder_is_installed():
    """pyproject lists packages by hand (the folders are mapped); a forgotten one would not install."""
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = {_package_of_dir(p) for folder in BARE for p in (ROOT / folder).rglob("__init__.py")}
    assert found == listed


def test_no_bare_top_level_imports():
    bad = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            bad += [f"{name}: {m}" for m in mods if m.split(".")[0] in BARE]
    assert not bad


def test_layers_point_one_way():
    bad = []
    for name, deps in GRAPH.items():
        mine = _layer_root(name)
        for dep in deps:
            theirs = _layer_root(dep)
            if theirs in (mine, "hangwatch.contract") or theirs in ALLOWED.get(mine, ()):
                continue
            bad.append(f"{name} imports {dep}")
    assert not bad, "\n".join(sorted(bad))


def test_contract_is_dependency_free():
    for name, path in MODULES.items():
        if _layer_root(name) != "hangwatch.contract":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for m in mods:
                    top = m.split(".")[0]
                    assert top in ("hangwatch", "psutil", "__future__") or top in _stdlib(), f"{name} imports {m}"


def _stdlib() -> frozenset[str]:
    import sys

    return frozenset(sys.stdlib_module_names)


def test_no_import_cycles():
    # Modules that import each other at module level or lazily: either is a cycle in the design.
    graph = {n: {d for d in deps if d in MODULES and d != n} for n, deps in GRAPH.items()}
    # A package's __init__ is imported by its children implicitly; edges to it are not cycles.
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for d in graph[n]:
            if state.get(d) == 1:
                pytest.fail("import cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)


# The rooms of hangwatch.supervisor, and which other rooms each may import (besides itself and the
# contract). The top (runner, config, the package itself) may import every room.
ROOM_ALLOWED = {
    "decide": set(),
    "watch": set(),
    "contain": {"watch"},
    "operate": {"decide", "watch"},
    "cohort": {"decide"},
    "recover": {"decide", "watch", "contain"},
}
TOP = {"hangwatch.supervisor", "hangwatch.supervisor.runner", "hangwatch.supervisor.config"}


def _room(name: str) -> str | None:
    parts = name.split(".")
    if name in TOP or len(parts) < 3 or parts[:2] != ["hangwatch", "supervisor"]:
        return None
    return parts[2]


def test_every_supervisor_module_sits_in_a_room():
    loose = [n for n in MODULES if _layer_root(n) == "hangwatch.supervisor" and n not in TOP
             and _room(n) not in ROOM_ALLOWED]
    assert not loose, f"modules outside the rooms {sorted(ROOM_ALLOWED)}: {sorted(loose)}"


def test_supervisor_rooms_point_one_way():
    bad = []
    for name, deps in GRAPH.items():
        mine = _room(name)
        if mine is None or _layer_root(name) != "hangwatch.supervisor":
            continue
        for dep in deps:
            if _layer_root(dep) != "hangwatch.supervisor":
                continue
            theirs = _room(dep)
            if dep in TOP:
                bad.append(f"{name} imports the top ({dep})")
            elif theirs != mine and theirs not in ROOM_ALLOWED[mine]:
                bad.append(f"{name} ({mine}) imports {dep} ({theirs})")
    assert not bad, "\n".join(sorted(bad))
