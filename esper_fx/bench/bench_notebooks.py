"""`notebooks` (only when named): each notebook run top to bottom under SMOKE=1, against a kernel that only
imports esper_fx.

The notebooks are the Jupyter path. At SMOKE sizes each should finish within two minutes, so that a
researcher who opens one sees a result before they give up on it. That goal is measured here, not asserted
in a test (a loaded machine would fail such a test). tests/notebooks/test_notebooks.py runs the same
notebooks through the same `execute` and checks what they show.

Each notebook runs once, in a fresh kernel of this interpreter (a kernelspec written to a temporary
directory), with the checkout on PYTHONPATH, a temporary working directory, SMOKE=1, one torch thread and
one JAX compilation cache shared by the run. The reference, measured first in the same run, is a one-cell
notebook that imports esper_fx: the kernel start and the imports that every notebook pays. The ratio is
notebook / reference. `--device` and `--quick` do not apply (the notebooks choose their own devices, and
SMOKE is already their small size). Needs nbclient and ipykernel (`pip install -e '.[test]'`) and a checkout, since the
notebooks are not part of the installed package.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from esper_fx.bench.timing import Timing

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = REPO / "notebooks"
TARGET_S = 120.0  # each notebook under SMOKE=1
CELL_TIMEOUT_S = 600
REFERENCE_SOURCE = "import esper_fx, esper_fx.controllers, esper_fx.training"


def notebooks() -> list[Path]:
    """The numbered notebooks of the checkout, in order."""
    return sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))


def write_kernelspec(directory: Path) -> Path:
    """A kernelspec named python3 under `directory` that starts ipykernel with this interpreter."""
    spec_dir = directory / "python3"
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (esper_fx)", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    return directory


def kernel_env(compile_cache: Path) -> dict[str, str]:
    """The kernel's environment: SMOKE=1, the checkout importable, Agg, one torch thread, a shared JAX cache."""
    env = dict(os.environ)
    env["SMOKE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["MPLBACKEND"] = "Agg"
    env.setdefault("OMP_NUM_THREADS", "1")  # tiny tensors: one torch thread, no oversubscription on a busy CPU
    env.setdefault("JAX_COMPILATION_CACHE_DIR", str(compile_cache))
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


def execute(nb, kernels: Path, workdir: Path, env: dict[str, str]) -> float:
    """Run notebook `nb` (an nbformat node, filled in place) in a fresh kernel; its wall time in seconds.
    Raises nbclient's CellExecutionError at the first failing cell. The kernel is shut down whatever happens
    (nbclient shuts down only a kernel it started, and this one is ours)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    km = KernelManager(kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))
    client = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_S, allow_errors=False,
                            resources={"metadata": {"path": str(workdir)}})
    started = time.perf_counter()
    try:
        client.execute(env=env)
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    return time.perf_counter() - started


def run(settings) -> dict:
    import nbformat

    paths = notebooks()
    if not paths:
        raise FileNotFoundError(f"no notebooks in {NOTEBOOK_DIR}: run the benchmark from a checkout of esper_fx")
    with tempfile.TemporaryDirectory(prefix="esper_fx_bench_nb_") as tmp:
        root = Path(tmp)
        kernels, env = write_kernelspec(root / "kernels"), kernel_env(root / "jax_cache")
        reference = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(REFERENCE_SOURCE)])
        (root / "reference").mkdir()
        ref_s = execute(reference, kernels, root / "reference", env)
        cases = []
        for path in paths:
            workdir = root / path.stem
            workdir.mkdir()
            seconds = execute(nbformat.read(path, as_version=4), kernels, workdir, env)
            cases.append({"notebook": path.stem, "smoke": Timing.from_samples([seconds]).as_dict(),
                          "import": Timing.from_samples([ref_s]).as_dict(),
                          "ratio": seconds / ref_s})
    slowest = max(cases, key=lambda c: c["smoke"]["median_s"])
    slowest_s = slowest["smoke"]["median_s"]
    return {
        "what": "each notebook top to bottom under SMOKE=1 in a fresh kernel, wall time",
        "reference": "import: a fresh kernel that only imports esper_fx",
        "ratio_definition": "notebook / import, wall time",
        "columns": {"case": "notebook", "measured": "smoke", "reference": "import"},
        "cases": cases,
        "target": {"max_s": TARGET_S, "met": slowest_s <= TARGET_S},
        "headline": f"{len(cases)} notebooks under SMOKE=1: the slowest, {slowest['notebook']}, {slowest_s:.0f} s "
                    f"(target ≤ {TARGET_S:.0f} s each); a kernel that only imports esper_fx {ref_s:.1f} s",
    }
