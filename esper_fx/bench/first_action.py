"""Time to first action: from starting a fresh python process to the controller's first action.

`measure(preset, ...)` starts `python -m esper_fx.bench.first_action` twice with one JAX persistent
compilation cache directory, empty at first: the first process is the *cold* start (every jitted function
compiles and fills the cache), the second the *warm* one (it loads them). The directory is set by hand
through JAX's own environment variables (`JAX_COMPILATION_CACHE_DIR`, a zero minimum compile time and
entry size, so every function is cached). Each child runs `esper_fx.run` on the benchmark configuration as
the command line would (one torch thread on the CPU) and stops at the first `pool.step`, when the first
actions have been computed and read back; it prints one JSON line with its clock marks. The parent
measures from just before the spawn, so the interpreter's start-up and every import count.

    python -m esper_fx.bench.first_action --preset quickstart [--n-envs 4] [--device cpu] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

MARKER = "FIRST_ACTION "
CACHE_ENV = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}
CHILD_TIMEOUT_S = 600


class FirstAction(Exception):
    """Raised by `StopAtFirstAction.step`: the run has produced its first actions."""


class StopAtFirstAction:
    """An env pool wrapper that notes the clock at `begin` and stops the run at the first `step`."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self.marks: dict[str, float] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def begin(self, *args, **kwargs):
        self.marks["reset_start"] = time.time()
        signals = self._pool.begin(*args, **kwargs)
        self.marks["reset_end"] = time.time()
        return signals

    def step(self, actions, *args, **kwargs):
        self.marks["first_action"] = time.time()
        raise FirstAction


def time_to_first_action(config, marks: dict[str, float] | None = None) -> dict[str, float]:
    """Run `config` until its first actions; returns the unix-time marks of the phases (after `marks`)."""
    marks = {"imports_start": time.time(), "imports_end": time.time()} if marks is None else dict(marks)
    from esper_fx.training.pools import build_pool
    from esper_fx.training.run import run

    pool = StopAtFirstAction(build_pool(config))
    marks["pool_built"] = time.time()
    try:
        run(config, run_dir=False, pool=pool, quiet=True)
    except FirstAction:
        pass
    return {**marks, **pool.marks}


def phases(marks: dict[str, float], spawned_at: float) -> dict[str, float]:
    """Seconds of each phase, from the marks of `time_to_first_action` and the time of the spawn (the
    interpreter's start-up and the import of the bench package come first)."""
    return {
        "interpreter_s": marks["imports_start"] - spawned_at,
        "imports_s": marks["imports_end"] - marks["imports_start"],
        "pool_build_s": marks["pool_built"] - marks["imports_end"],
        "controller_setup_s": marks["reset_start"] - marks["pool_built"],
        "first_reset_and_epoch_s": marks["reset_end"] - marks["reset_start"],
        "first_step_s": marks["first_action"] - marks["reset_end"],
        "total_s": marks["first_action"] - spawned_at,
    }


def _child_env(cache_dir: str) -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[2])  # this checkout, whatever the installed one is
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, **CACHE_ENV, "JAX_COMPILATION_CACHE_DIR": cache_dir,
            "PYTHONPATH": root if not path else f"{root}{os.pathsep}{path}"}


def _spawn(args: list[str], cache_dir: str) -> dict[str, float]:
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "esper_fx.bench.first_action", *args], env=_child_env(cache_dir),
                          capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARKER)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"first-action child failed ({done.returncode}): {done.stderr[-2000:]}")
    marks = json.loads(lines[-1][len(MARKER):])
    return phases(marks, started)


def measure(preset: str, *, n_envs: int, device: str, seed: int, quick: bool) -> dict[str, Any]:
    """Cold and warm time to first action of the benchmark configuration of `preset`."""
    args = ["--preset", preset, "--n-envs", str(n_envs), "--device", device, "--seed", str(seed)]
    args += ["--quick"] if quick else []
    with tempfile.TemporaryDirectory(prefix="esper-jax-cache-") as cache_dir:
        cold = _spawn(args, cache_dir)
        warm = _spawn(args, cache_dir)
    return {"preset": preset, "n_envs": n_envs, "cold": cold, "warm": warm}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m esper_fx.bench.first_action", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="quickstart")
    parser.add_argument("--n-envs", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    marks = {"imports_start": time.time()}
    import torch

    import esper_fx.training.run  # noqa: F401  (what the command line loads before a run starts)
    from esper_fx.bench.presets import N_ENVS, bench_config

    if not args.device.startswith("cuda"):
        torch.set_num_threads(1)  # as the command line does on CPU runs
    marks["imports_end"] = time.time()
    config = bench_config(args.preset, n_envs=args.n_envs or N_ENVS, device=args.device, seed=args.seed,
                          quick=args.quick)
    marks = time_to_first_action(config, marks)
    print(MARKER + json.dumps(marks), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
