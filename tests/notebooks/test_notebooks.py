"""The notebooks run top to bottom under SMOKE=1, and the committed files carry no outputs.

The `.ipynb` files are the source: edit them in Jupyter, then clear every output before committing
(Jupyter's "Clear All Outputs", or `jupyter nbconvert --clear-output --inplace notebooks/*.ipynb`).

Each notebook executes in a fresh kernel of *this* interpreter (a kernelspec written to a temporary
directory, so neither a missing nor a foreign `python3` kernelspec matters), with the repository root
on PYTHONPATH, its working directory in a temporary directory, and SMOKE=1. Any cell error fails the
test; so does a notebook that leaves a new file in the repository. How long each takes is a goal (two
minutes under SMOKE=1) measured by `python -m esper_fx.bench --only notebooks`, which runs them through the
same `execute`, not asserted here.

A SMOKE run must also show what the notebook is about, not only run: at least one figure among its outputs
(an `image/png`: the notebooks select the inline backend in Jupyter, SMOKE or not, although the kernel's
environment says MPLBACKEND=Agg) and at least one germination, read from the line `seeds germinated: N`
that every notebook prints from a run's summary or a comparison's episodes (N >= 1 in at least one). The
SMOKE sizes run 6 epochs, the fewest in which every schedule of the notebooks germinates (GERMINATE closes
once a seed could no longer be fossilized before the last epoch).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager

from esper_fx.bench.bench_notebooks import NOTEBOOK_DIR, REPO, execute, kernel_env, notebooks, write_kernelspec

NOTEBOOKS = notebooks()
GERMINATED = re.compile(r"^seeds germinated: (\d+)", re.MULTILINE)  # the line each notebook prints
IGNORED_DIRS = {".git", "__pycache__", ".pytest_cache", ".hypothesis", ".ipynb_checkpoints", ".venv", "venv",
                ".jax_cache"}


def _repo_files() -> set[str]:
    files = set()
    for root, dirs, names in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in IGNORED_DIRS and not d.endswith(".egg-info")]
        files.update(str(Path(root, n).relative_to(REPO)) for n in names)
    return files


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory) -> Path:
    """A kernelspec named python3 that starts ipykernel with the interpreter running the tests."""
    return write_kernelspec(tmp_path_factory.mktemp("kernels"))


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory) -> Path:
    """One JAX compilation cache for the notebooks of this session (they compile the same programs)."""
    return tmp_path_factory.mktemp("jax_cache")


def test_there_are_four_notebooks():
    assert [p.name for p in NOTEBOOKS] == ["01_quickstart.ipynb", "02_controller_ablation.ipynb",
                                           "03_custom_controller.ipynb", "04_ppo_math.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebook_has_no_outputs_and_no_execution_counts(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert code_cells
    for cell in code_cells:
        assert cell.outputs == [], f"cell {cell.get('id')} of {path.name} carries outputs"
        assert cell.execution_count is None, f"cell {cell.get('id')} of {path.name} has an execution count"
    assert "SMOKE" in code_cells[0].source
    assert any("seeds germinated: " in c.source for c in code_cells), f"{path.name} never prints its germinations"


def test_the_notebooks_are_the_source_with_no_generator_beside_them():
    assert sorted(p.name for p in NOTEBOOK_DIR.iterdir() if p.suffix == ".py") == []


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom_under_smoke(path, kernel_dir, compile_cache, tmp_path):
    nb = nbformat.read(path, as_version=4)
    spec = KernelSpecManager(kernel_dirs=[str(kernel_dir)]).get_kernel_spec("python3")
    assert Path(spec.argv[0]) == Path(sys.executable)
    before = _repo_files()
    execute(nb, kernel_dir, tmp_path, kernel_env(compile_cache))  # raises CellExecutionError on a failing cell
    executed = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in executed)
    errors = [o for c in executed for o in c.outputs if o.output_type == "error"]
    assert errors == []
    setup_text = "".join(o.get("text", "") for o in executed[0].outputs)
    assert "SMOKE=True" in setup_text, "the kernel did not see SMOKE=1"
    figures = [o for c in executed for o in c.outputs if "image/png" in o.get("data", {})]
    assert figures, f"{path.name} showed no figure (no image/png output) under SMOKE=1"
    printed = "".join(o.text for c in executed for o in c.outputs
                      if o.output_type == "stream" and o.name == "stdout")
    germinated = [int(n) for n in GERMINATED.findall(printed)]
    assert germinated, f"{path.name} printed no 'seeds germinated: N' line under SMOKE=1"
    assert max(germinated) >= 1, f"{path.name} germinated no seed under SMOKE=1 (counts {germinated})"
    if path.name == "01_quickstart.ipynb":  # its esper_fx.run draws the notebook's progress line, updated in place
        bars = [o["data"]["text/plain"] for c in executed for o in c.outputs
                if o.output_type == "display_data" and o["data"].get("text/plain", "").startswith("batch ")]
        assert bars and all("] 100% · " in bar and "ETA 0:00:00" in bar for bar in bars), bars
    assert _repo_files() == before, f"{path.name} wrote into the repository: {_repo_files() - before}"
