"""The code's shape (issue 56): no function of the project takes more than 10 parameters (self and cls not
counted; a group of them is a value), no call passes more than 10 values by position (issue 67), and the run never probes its pool with `getattr` (the pool protocol,
`esper_fx.contracts.pool.EpisodePool`, names every member the run uses). A static scan with `ast`, so new
files are covered without editing this test."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("esper_fx", "hosts", "rl", "bridge")
MAX_PARAMETERS = 10


def _sources(*packages: str):
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT), ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> list[str]:
    """Every parameter a function takes (positional, keyword-only, *args, **kwargs), self and cls excepted."""
    args = node.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return [name for name in names if name not in ("self", "cls")]


def too_many_parameters(tree: ast.AST) -> list[str]:
    return [f"{getattr(node, 'name', 'lambda')} (line {node.lineno}): {len(parameters(node))} parameters"
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            and len(parameters(node)) > MAX_PARAMETERS]


def pool_probes(tree: ast.AST) -> list[str]:
    """`getattr(<something naming a pool>, ...)` calls, and `__getattr__` methods that forward to a pool."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and node.args and "pool" in ast.unparse(node.args[0]).lower():
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__" and "pool" in ast.unparse(node).lower():
            found.append(f"line {node.lineno}: a __getattr__ forwarding to a pool")
    return found


def test_no_function_takes_more_than_ten_parameters():
    offenders = [f"{path}: {line}" for path, tree in _sources(*PACKAGES) for line in too_many_parameters(tree)]
    assert not offenders, "\n".join(offenders)


def wide_calls(tree: ast.AST) -> list[str]:
    """Calls that pass more than MAX_PARAMETERS values by position (a wide value built positionally: name them)."""
    return [f"line {node.lineno}: {ast.unparse(node.func)}({len(node.args)} positional values)"
            for node in ast.walk(tree) if isinstance(node, ast.Call) and len(node.args) > MAX_PARAMETERS]


def test_no_call_passes_more_than_ten_values_by_position():
    """Issue 67, item 3: `Episode` (14 values), `SignalLayout` (13), `ComparisonTable`, `LifecycleTimings` and
    `EpochMetrics` (11 each) were built positionally, where a swapped pair of values reads as right."""
    offenders = [f"{path}: {line}" for path, tree in _sources(*PACKAGES) for line in wide_calls(tree)]
    assert not offenders, "\n".join(offenders)


def test_the_run_never_probes_its_pool_with_getattr():
    offenders = [f"{path}: {line}" for path, tree in _sources("esper_fx/training") for line in pool_probes(tree)]
    assert not offenders, "\n".join(offenders)


def test_the_scans_find_what_they_look_for():
    wide = ast.parse("def f(self, a, b, c, d, e, f, g, h, i, j, *, k=1): pass\n"
                     "def g(a, b, c, d, e, f, g, h, *args, **kwargs): pass\n"
                     "h = lambda a, b, c, d, e, f, g, h, i, j, k: 0\n")
    assert [line.split(" ")[0] for line in too_many_parameters(wide)] == ["f", "lambda"]
    assert len(wide_calls(ast.parse("f(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)\ng(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)\n"
                                    "h(a=1, b=2, c=3, d=4, e=5, f=6, g=7, i=8, j=9, k=10, m=11)\n"))) == 1
    probing = ast.parse("close = getattr(pool, 'close', None)\nn = getattr(self.pool, 'n_workers', 0)\n"
                        "x = getattr(self._inside, 'on', False)\n"
                        "class W:\n    def __getattr__(self, name):\n        return getattr(self.pool, name)\n")
    assert len(pool_probes(probing)) == 4  # two calls, the forwarding method and the call inside it
