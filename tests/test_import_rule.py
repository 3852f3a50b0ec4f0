"""The import rule (ARCHITECTURE §5): `hosts` never imports jax, `rl` never imports torch, and
`esper_fx.contracts` / `esper_fx.config` import neither. From `esper_fx`, `hosts` and `rl` import only
the `esper_fx.contracts` package: the vocabulary both sides share.

Each package is imported in a fresh interpreter (`sys.executable -I`) where a meta-path finder makes the
forbidden frameworks raise ImportError, and every module under it is found with pkgutil.walk_packages, so
new files are covered without editing this test. The finder also records *attempts* to import a forbidden
framework from the project's own files, so `try: import jax / except ImportError` is caught too. A static
scan adds what an import-time check cannot see: imports inside function bodies.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
JAX_SIDE = ("jax", "jaxlib", "flax", "optax", "chex")
TORCH_SIDE = ("torch", "torchvision")

# Runs in the fresh interpreter. argv[1] is JSON: [root, blocked names, packages to walk, single modules].
_CHILD = textwrap.dedent(
    r"""
    import importlib, importlib.abc, json, os, pkgutil, sys, traceback

    root, blocked, walk, singles = json.loads(sys.argv[1])
    root = os.path.realpath(root)
    sys.path.insert(0, root)
    violations, imported = [], []
    preloaded = sorted(m for m in sys.modules if m.split(".")[0] in blocked)
    if preloaded:
        violations.append(f"already imported before the check: {preloaded}")

    def _importer():
        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            if not name.startswith("<frozen") and name != importlib.__file__:
                return os.path.realpath(name)
            frame = frame.f_back
        return "?"

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname.split(".")[0] not in blocked:
                return None
            importer = _importer()
            if importer.startswith(root + os.sep):
                violations.append(f"{os.path.relpath(importer, root)} tried to import {fullname}")
            raise ImportError(f"import rule: {fullname} is blocked here")

    sys.meta_path.insert(0, Block())

    def _load(name):
        try:
            module = importlib.import_module(name)
        except Exception:
            violations.append(f"importing {name} failed: {traceback.format_exc(limit=-1).strip()}")
            return None
        where = os.path.realpath(getattr(module, "__file__", "") or "")
        if not where.startswith(root + os.sep):
            violations.append(f"{name} resolved outside {root}: {where}")
        imported.append(name)
        return module

    def _walk_error(name):
        violations.append(f"importing {name} failed: {traceback.format_exc(limit=-1).strip()}")

    for package_name in walk:
        package = _load(package_name)
        if package is not None:
            for info in pkgutil.walk_packages(package.__path__, package_name + ".", onerror=_walk_error):
                _load(info.name)
    for name in singles:
        _load(name)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] == "esper_fx")
    print(json.dumps({"imported": imported, "violations": violations, "esper_fx_modules": loaded}))
    """
)
SHARED = "esper_fx.contracts"  # the only esper_fx package `hosts` and `rl` may import (its topic modules)


def within(module: str, package: str) -> bool:
    """True for `package` itself and every module under it."""
    return module == package or module.startswith(package + ".")


def run_import_check(root: Path, blocked, walk=(), singles=()) -> dict:
    """Import `walk` packages (every module under them) and `singles` in a fresh interpreter, `blocked`
    frameworks made unimportable. Returns {"imported": [...], "violations": [...]}."""
    payload = json.dumps([str(root), list(blocked), list(walk), list(singles)])
    result = subprocess.run(
        [sys.executable, "-I", "-c", _CHILD, payload], capture_output=True, text=True, timeout=300, cwd=root
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def modules_on_disk(root: Path, package: str) -> set[str]:
    """Every importable module name under `package`, from the file tree (independent of pkgutil)."""
    names = set()
    for path in (root / package).rglob("*.py"):
        if not (path.parent / "__init__.py").exists():
            continue
        parts = path.relative_to(root).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def source_imports(root: Path, package: str):
    """(file, line, module, imported names) of every absolute import anywhere in the package's source,
    function bodies included; the names are () for `import module`."""
    for path in sorted((root / package).rglob("*.py")):
        where = path.relative_to(root)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield where, node.lineno, alias.name, ()
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                yield where, node.lineno, node.module, tuple(alias.name for alias in node.names)


def project_imports(root: Path, package: str, project: str, allowed: str) -> list[str]:
    """Every import of a `project` module outside the package `allowed` anywhere in the package's source
    (`from project import a` imports the module project.a)."""
    found = []
    for where, line, module, names in source_imports(root, package):
        modules = [f"{module}.{n}" for n in names] if module == project else [module]
        found += [f"{where}:{line} imports {m}" for m in modules if m.split(".")[0] == project and not within(m, allowed)]
    return found


def static_violations(root: Path, package: str, blocked) -> list[str]:
    """Every `import X` / `from X import ...` of a blocked framework anywhere in the package's source,
    function bodies included."""
    return [f"{where}:{line} imports {module}" for where, line, module, _ in source_imports(root, package)
            if module.split(".")[0] in blocked]


# ----------------------------------------------------------------------------------------------
# The rule, on the real packages
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "package, blocked", [("hosts", JAX_SIDE), ("rl", TORCH_SIDE)], ids=["hosts_without_jax", "rl_without_torch"]
)
def test_every_module_of_the_package_imports_with_the_other_framework_blocked(package, blocked):
    report = run_import_check(ROOT, blocked, walk=[package])
    assert report["violations"] == []
    assert modules_on_disk(ROOT, package) <= set(report["imported"])


@pytest.mark.parametrize(
    "package, blocked", [("hosts", JAX_SIDE), ("rl", TORCH_SIDE)], ids=["hosts_without_jax", "rl_without_torch"]
)
def test_no_source_file_of_the_package_names_the_other_framework(package, blocked):
    assert static_violations(ROOT, package, blocked) == []


@pytest.mark.parametrize("package", ["hosts", "rl"])
def test_the_package_imports_nothing_from_esper_fx_but_the_contracts(package):
    assert project_imports(ROOT, package, "esper_fx", SHARED) == []
    blocked = JAX_SIDE if package == "hosts" else TORCH_SIDE
    report = run_import_check(ROOT, blocked, walk=[package])
    assert [m for m in report["esper_fx_modules"] if m != "esper_fx" and not within(m, SHARED)] == []


def test_contracts_and_config_import_neither_framework():
    report = run_import_check(ROOT, JAX_SIDE + TORCH_SIDE, walk=[SHARED], singles=["esper_fx.config"])
    assert report["violations"] == []
    assert modules_on_disk(ROOT, "esper_fx/contracts") | {"esper_fx.config"} <= set(report["imported"])


# ----------------------------------------------------------------------------------------------
# The checker itself: it catches a violation, and only a violation
# ----------------------------------------------------------------------------------------------


def _make_package(root: Path, files: dict[str, str]) -> None:
    for relative, source in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))


def test_checker_passes_a_clean_package_and_finds_nested_modules(tmp_path):
    _make_package(
        tmp_path,
        {
            "cleanpkg/__init__.py": "",
            "cleanpkg/a.py": "import json\n",
            "cleanpkg/sub/__init__.py": "",
            "cleanpkg/sub/b.py": "from cleanpkg import a\n",
        },
    )
    report = run_import_check(tmp_path, JAX_SIDE, walk=["cleanpkg"])
    assert report["violations"] == []
    assert set(report["imported"]) == {"cleanpkg", "cleanpkg.a", "cleanpkg.sub", "cleanpkg.sub.b"}
    assert modules_on_disk(tmp_path, "cleanpkg") == set(report["imported"])


def test_checker_fails_when_a_nested_module_imports_jax(tmp_path):
    _make_package(
        tmp_path,
        {
            "fakehosts/__init__.py": "",
            "fakehosts/ok.py": "import math\n",
            "fakehosts/sub/__init__.py": "",
            "fakehosts/sub/model.py": "import jax\n",
        },
    )
    report = run_import_check(tmp_path, JAX_SIDE, walk=["fakehosts"])
    assert any("importing fakehosts.sub.model failed" in v for v in report["violations"])
    assert any("fakehosts/sub/model.py tried to import jax" in v for v in report["violations"])
    assert not any("fakehosts.ok" in v for v in report["violations"])


def test_checker_fails_on_a_swallowed_optional_import(tmp_path):
    _make_package(
        tmp_path,
        {
            "fakerl/__init__.py": "",
            "fakerl/maybe.py": """
                try:
                    from torch import nn
                except ImportError:
                    nn = None
            """,
        },
    )
    report = run_import_check(tmp_path, TORCH_SIDE, walk=["fakerl"])
    assert report["violations"] == ["fakerl/maybe.py tried to import torch"]


def test_checker_fails_on_a_transitive_import_through_another_project_package(tmp_path):
    _make_package(
        tmp_path,
        {
            "shared/__init__.py": "import optax\n",
            "fakehosts/__init__.py": "",
            "fakehosts/uses_shared.py": "import shared\n",
        },
    )
    report = run_import_check(tmp_path, JAX_SIDE, walk=["fakehosts"])
    assert "shared/__init__.py tried to import optax" in report["violations"]
    assert any("importing fakehosts.uses_shared failed" in v for v in report["violations"])


def test_static_scan_finds_imports_inside_functions(tmp_path):
    _make_package(
        tmp_path,
        {
            "fakehosts/__init__.py": "",
            "fakehosts/lazy.py": """
                def controller():
                    import flax.linen as nn
                    from chex import assert_shape
                    return nn, assert_shape
            """,
        },
    )
    assert static_violations(tmp_path, "fakehosts", JAX_SIDE) == [
        "fakehosts/lazy.py:3 imports flax.linen",
        "fakehosts/lazy.py:4 imports chex",
    ]


def test_project_scan_finds_every_import_of_another_module_of_the_project(tmp_path):
    _make_package(
        tmp_path,
        {
            "fakehosts/__init__.py": "from shared import contracts\n",
            "fakehosts/ok.py": "import shared.contracts\nfrom shared.contracts import X\n",
            "fakehosts/bad.py": """
                from shared.config import TrainingConfig
                from shared import loop, contracts

                def later():
                    import shared.telemetry
            """,
        },
    )
    assert project_imports(tmp_path, "fakehosts", "shared", "shared.contracts") == [
        "fakehosts/bad.py:2 imports shared.config",
        "fakehosts/bad.py:3 imports shared.loop",
        "fakehosts/bad.py:6 imports shared.telemetry",
    ]

