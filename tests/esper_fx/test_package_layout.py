"""The packages are layered: no import circle between the modules of esper_fx, hosts, rl and bridge (imports
inside functions counted, the package roots included, no exemptions), no folder importing one that imports it
back, each package importing only the layers below it, and the contracts package importing nothing of the
project outside itself (neither torch nor jax). Also: few loose modules in esper_fx, and a one-line `__init__`
per esper_fx folder that imports nothing."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from esper_fx.controller_names import BUILT_IN

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "esper_fx"
PACKAGES = ("esper_fx", "hosts", "rl", "bridge")
CONTRACTS = "esper_fx.contracts"
# each module's layer: it may import its own layer's modules and lower layers' only (hosts and rl never each other)
LAYERS = {CONTRACTS: 0, "hosts": 1, "rl": 1, "bridge": 2, "esper_fx": 3}
# esper_fx's loose modules: __init__, the three `python -m` entry points (train, prove, report; doctor and bench
# are folders), and what folders on several layers stand on (config, presets, errors, command, controller_names,
# stopping, devices)
MAX_LOOSE_MODULES = 11


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}


def _imports(path: Path, known: set[str]) -> set[str]:
    """Every project module `path` imports, at the top or inside a function (`from a import b` counts as the
    module a.b when that is a module, else a)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in known}


def _graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports; the registry also imports each built-in controller's module
    (by name, when the controller is first asked for)."""
    modules = _modules()
    graph = {name: _imports(path, set(modules)) for name, path in modules.items()}
    graph["esper_fx.controllers.registry"] |= {module for module, _ in BUILT_IN.values()}
    return graph


def _unit(module: str) -> str:
    """The folder (or loose module) a module belongs to: its first two name parts; the contracts are one unit."""
    return ".".join(module.split(".")[:2])


def _layer(module: str) -> int:
    return LAYERS[CONTRACTS] if _unit(module) == CONTRACTS else LAYERS[module.split(".")[0]]


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph`, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
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


def _folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between folders (and loose modules): a cycle there is a folder importing one above it."""
    folders: dict[str, set[str]] = {}
    for module, imported in graph.items():
        folders.setdefault(_unit(module), set()).update(_unit(m) for m in imported if _unit(m) != _unit(module))
    return folders


def _layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module of a higher layer, or sideways between hosts and rl."""
    return sorted(f"{module} imports {m}" for module, imported in graph.items() for m in imported
                  if _layer(m) > _layer(module)
                  or (_layer(m) == _layer(module) and m.split(".")[0] != module.split(".")[0]))


def test_no_import_cycle_between_modules():
    graph = _graph()
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_no_folder_imports_a_folder_that_imports_it_back():
    folders = _folder_graph(_graph())
    assert _cycle(folders) is None, " -> ".join(_cycle(folders) or [])


def test_each_package_imports_only_the_layers_below_it():
    assert _layer_violations(_graph()) == []


def test_contracts_import_nothing_of_the_project_outside_themselves():
    graph = _graph()
    contracts = {m for m in graph if _unit(m) == CONTRACTS}
    assert contracts > {CONTRACTS}
    assert {m for c in contracts for m in graph[c]} <= contracts


def test_importing_the_contracts_loads_neither_framework_nor_the_rest_of_esper_fx():
    """In a fresh interpreter: every contracts module, then what got loaded (the `esper_fx` root comes with any
    of its modules, and imports nothing)."""
    contracts = sorted(m for m in _modules() if _unit(m) == CONTRACTS)
    child = ("import importlib, json, sys\n"
             f"sys.path.insert(0, {str(ROOT)!r})\n"
             f"for name in {contracts!r}:\n"
             "    importlib.import_module(name)\n"
             "print(json.dumps(sorted(sys.modules)))\n")
    result = subprocess.run([sys.executable, "-I", "-c", child], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert [m for m in loaded if m.split(".")[0] in ("torch", "jax", "jaxlib")] == []
    assert [m for m in loaded if m.split(".")[0] == "esper_fx" and m != "esper_fx" and _unit(m) != CONTRACTS] == []


def test_the_controller_names_import_nothing_and_name_each_built_in_constructor():
    modules = _modules()
    assert _imports(modules["esper_fx.controller_names"], set(modules)) == set()
    for module, constructor in BUILT_IN.values():
        tree = ast.parse(modules[module].read_text(encoding="utf-8"))
        assert constructor in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, (module, constructor)


def test_at_most_eleven_loose_modules():
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


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_folder_graph_sees_a_folder_importing_upwards():
    graph = {"p.low.a": {"p.high.b"}, "p.high.b": {"p.low.c"}, "p.low.c": set()}
    assert _cycle(graph) is None
    assert _cycle(_folder_graph(graph)) == ["p.high", "p.low", "p.high"]


def test_the_layer_check_finds_upward_and_sideways_imports():
    graph = {"esper_fx.contracts.stages": {"hosts.env"}, "hosts.env": {"rl.ppo"},
             "rl.ppo": {"esper_fx.contracts.stages"}, "bridge.dlpack": {"esper_fx.contracts.stages"}}
    assert _layer_violations(graph) == ["esper_fx.contracts.stages imports hosts.env", "hosts.env imports rl.ppo"]
