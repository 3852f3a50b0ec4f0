"""The configuration stays split by job (issue 56): `esper_fx/config.py` holds the declaration alone, within
250 lines, and no class of `esper_fx/` grows past 250 lines (`TrainingConfig` once held four jobs in 455)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "esper_fx"
MAX_LINES = 250


def class_lengths(root: Path) -> dict[str, int]:
    """`path:Class` -> its lines, for every class (nested ones too) of every module under `root`."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                out[f"{path.relative_to(root.parent)}:{node.name}"] = node.end_lineno - node.lineno + 1
    return out


def test_config_py_is_the_declaration_within_250_lines():
    assert len((PACKAGE / "config.py").read_text(encoding="utf-8").splitlines()) <= MAX_LINES


def test_no_class_of_esper_fx_is_over_250_lines():
    lengths = class_lengths(PACKAGE)
    assert "esper_fx/config.py:TrainingConfig" in lengths
    assert {name: n for name, n in lengths.items() if n > MAX_LINES} == {}


def test_the_measure_counts_a_class_from_its_line_to_its_last(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("class A:\n    x = 1\n\n    def f(self):\n        return 2\n\n\nclass B: pass\n")
    assert class_lengths(tmp_path / "pkg") == {"pkg/m.py:A": 5, "pkg/m.py:B": 1}
