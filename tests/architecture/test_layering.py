"""The house rules that keep each thing in one place (docs/architecture.md).

- No import cycles between modules (type-checking-only imports aside).
- ``storage/`` is the only package that holds SQL: no module of ``replay_tui`` executes a
  statement or carries SQL text.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
# A statement: its keyword in capitals (the project's SQL style) and the words that make
# it one; a docstring saying "select" in prose, or a column titled COMMIT, is not.
SQL = re.compile(
    r"^\s*(SELECT\s.*\bFROM\s|SELECT\s+(count|coalesce|max|min|sum)\(|INSERT\s+(OR\s+\w+\s+)?INTO\s"
    r"|UPDATE\s+\w+\s+SET\s|DELETE\s+FROM\s|CREATE\s+(TABLE|INDEX|TRIGGER|VIEW|VIRTUAL)\s"
    r"|DROP\s+(TABLE|INDEX|TRIGGER|VIEW)\s|PRAGMA\s+\w+)",
    re.DOTALL,
)


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in graph.modules:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for m in sorted(graph.modules):
        if m not in index:
            visit(m)
    return out


def test_no_import_cycles() -> None:
    graph = grimp.build_graph("replay_tui", "storage", exclude_type_checking_imports=True)
    # A package's __init__ importing its own submodules is how a package is assembled,
    # not a cycle between two places.
    for m in list(graph.modules):
        for child in graph.find_children(m):
            if graph.direct_import_exists(importer=m, imported=child):
                graph.remove_import(importer=m, imported=child)
    assert _cycles(graph) == []


def _sql_in(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("execute", "executemany", "executescript"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.func.attr}()")
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.match(node.value)
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:60]!r}")
    return found


def test_storage_is_the_only_package_with_sql() -> None:
    found = [hit for p in sorted((ROOT / "replay_tui").rglob("*.py")) for hit in _sql_in(p)]
    assert found == []


def test_the_sql_check_finds_sql() -> None:
    # The check itself can fail: it sees the store's own statements.
    assert _sql_in(ROOT / "storage" / "readmodel.py")
