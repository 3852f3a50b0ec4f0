"""esper_fx/ is grouped by job: few loose modules, a one-line `__init__` per folder that imports nothing, no
import cycle between its modules (imports inside functions counted too), and `contracts.py` at the bottom."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "esper_fx"
MAX_LOOSE_MODULES = 10


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: Path, known: set[str]) -> set[str]:
    """Every esper_fx module `path` imports, at the top or inside a function (`from a import b` counts as
    the module a.b when that is a module, else a)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in known and m != "esper_fx"}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph`, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_at_most_ten_loose_modules():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= MAX_LOOSE_MODULES, loose


def test_every_folder_init_says_in_one_line_what_it_owns_and_imports_nothing():
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        if init.parent.name == "bench":  # the benchmarks' package documents the benchmark command instead
            continue
        tree = ast.parse(init.read_text(encoding="utf-8"))
        doc = ast.get_docstring(tree)
        assert doc and "\n" not in doc.strip(), f"{init}: a one-line docstring"
        assert len(tree.body) == 1, f"{init}: nothing but the docstring (importing it must load nothing)"


def test_no_import_cycle_between_esper_fx_modules():
    modules = _modules()
    graph = {name: _imports(path, set(modules)) for name, path in modules.items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_contracts_import_nothing_of_the_project():
    modules = _modules()
    assert _imports(modules["esper_fx.contracts"], set(modules)) == set()
