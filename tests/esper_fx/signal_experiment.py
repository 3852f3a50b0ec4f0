"""Stop a CLI run with SIGINT, SIGTERM or SIGKILL at several points, continue it, and compare the outcome with an
uninterrupted run of the same configuration, bit for bit.

    python -m tests.esper_fx.signal_experiment            # the whole matrix: one line per trial, then a verdict

A trial runs `python -m esper_fx.train --config base.json --run-dir run`, waits for a marker on its stdout
(plus an optional delay), sends the signal, and then does what a user would: `--resume run` while the run
directory holds a run, or the original command again if the stop came before anything was written. It
passes when SIGINT / SIGTERM exit with 130 / 143 and no traceback, and the finished run's history (every
BatchSummary of the final manifest), metrics.csv (without wall times), events (without timestamps, wall
times and checkpoint/start bookkeeping) and final controller state (every array) equal the reference's.
`tests/esper_fx/training/test_failures.py` runs a few trials of the matrix.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.esper_fx.stops import VOLATILE_KEYS, without_keys

REPO = Path(__file__).resolve().parents[2]

# No TensorBoard and no report: the comparison reads neither, and the report's static-host batch and plots
# were a quarter of every finished run's time.
BASE: dict[str, Any] = dict(
    task="shapes10", controller="ppo_lstm", n_envs=2, max_epochs=3, n_episodes=8, seed=11, device="cpu",
    synthetic_train_samples=256, synthetic_test_samples=64, batch_size_per_env=32, max_train_batches=2,
    checkpoint_every=2, slots=["r0c0", "r0c1"], tensorboard=False, report=False,
)
# where to stop: (stdout line prefix to wait for, seconds to wait after it). The signal lands a few
# milliseconds after the marker; "inside batch 1" relies on a batch taking longer than its delay.
POINTS: dict[str, tuple[str, float]] = {
    "start-up": ("Run dir:", 0.0),
    "batch 0 committed": ("BATCH 0 |", 0.0),
    "inside batch 1": ("BATCH 0 |", 0.3),
    "after a checkpoint": ("Checkpoint saved", 0.0),
    "last batch committed": ("BATCH 3 |", 0.0),
}
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
EXPECTED_CODE = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGKILL: -signal.SIGKILL}
BOOKKEEPING_EVENTS = frozenset({"CHECKPOINT_SAVED", "CHECKPOINT_LOADED", "TRAINING_STARTED"})


@dataclass
class Trial:
    signal_name: str
    point: str
    code: int | None  # exit code of the stopped run
    traceback: bool
    resumes: int  # how many further commands it took to finish
    equal: dict[str, bool]  # part -> equal to the reference

    @property
    def ok(self) -> bool:
        expected = EXPECTED_CODE[signal.Signals[self.signal_name]]
        return (self.code in (expected, 0)) and not self.traceback and all(self.equal.values())

    def line(self) -> str:
        parts = ", ".join(f"{k} {'=' if v else '≠'}" for k, v in self.equal.items())
        return (f"{'PASS' if self.ok else 'FAIL'} {self.signal_name:7} at {self.point:22} exit {self.code}, "
                f"traceback {'yes' if self.traceback else 'no'}, {self.resumes} follow-up command(s); {parts}")


def _env(cache: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", XLA_PYTHON_CLIENT_PREALLOCATE="false",
                JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0", PYTHONUNBUFFERED="1")


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "esper_fx.train", *args]


def reference_run(work: Path, cache: Path) -> Path:
    (work / "base.json").write_text(json.dumps(BASE))
    run = work / "reference"
    subprocess.run(_command("--config", str(work / "base.json"), "--run-dir", str(run), "--quiet"), check=True,
                   env=_env(cache), capture_output=True, timeout=900)
    return run


def stop_at(work: Path, cache: Path, run: Path, point: str, signum: int) -> tuple[int | None, str]:
    """Start the run, stop it at `point` with `signum`; (exit code, stderr)."""
    marker, delay = POINTS[point]
    proc = subprocess.Popen(_command("--config", str(work / "base.json"), "--run-dir", str(run)), env=_env(cache),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(marker):
            time.sleep(delay)
            proc.send_signal(signum)
            break
    _, err = proc.communicate(timeout=900)
    return proc.returncode, err


def finish(work: Path, cache: Path, run: Path) -> int:
    """What a user does after a stop, until the run completes: --resume while the directory holds a run, the
    original command again when nothing was written. Returns how many commands it took."""
    for attempt in range(1, 4):
        if (run / "summary.json").exists():
            return attempt - 1
        holds_run = run.is_dir() and any(p.name != ".lock" for p in run.iterdir())
        args = ("--resume", str(run)) if holds_run else ("--config", str(work / "base.json"), "--run-dir", str(run))
        proc = subprocess.run(_command(*args, "--quiet"), env=_env(cache), capture_output=True, text=True,
                              timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"follow-up {args} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return 3


def _drop(value: Any) -> Any:
    return without_keys(value, VOLATILE_KEYS)


def observe(run: Path) -> dict[str, Any]:
    """The parts of a finished run that must not depend on how it was stopped and continued."""
    final = run / "checkpoints" / "final"
    manifest = json.loads((final / "manifest.json").read_text())
    with open(run / "metrics.csv", newline="") as fh:
        metrics = [_drop(row) for row in csv.DictReader(fh)]
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    return {
        "history": _drop(manifest["history"]),
        "metrics.csv": metrics,
        "events": [_drop(e) for e in events if e["event_type"] not in BOOKKEEPING_EVENTS],
        "state": final_state(final),
    }


def final_state(checkpoint: Path) -> list:
    """Every array of the checkpoint's controller state and normalisers, as bytes."""
    import jax
    import numpy as np

    from esper_fx.outputs import checkpoint as ckpt
    from esper_fx.controllers import protocol as ctl
    from esper_fx.controllers import registry
    from esper_fx.config import TrainingConfig
    from esper_fx.training.run_state import fresh_learner

    config = TrainingConfig(**BASE)
    spec = ctl.ControllerSpec.from_config(config)
    template = fresh_learner(registry.build(config.controller_name, spec), spec, config.seed)._asdict()
    trees = ckpt.load_trees(ckpt.read_manifest(checkpoint), template)
    return [np.asarray(leaf).tobytes() for leaf in jax.tree_util.tree_leaves(trees)]


def trial(work: Path, cache: Path, reference: dict[str, Any], point: str, signum: int) -> Trial:
    run = work / f"{signal.Signals(signum).name}-{point.replace(' ', '_')}"
    code, err = stop_at(work, cache, run, point, signum)
    resumes = finish(work, cache, run)
    got = observe(run)
    return Trial(signal.Signals(signum).name, point, code, "Traceback" in err, resumes,
                 {part: got[part] == reference[part] for part in reference})


def run_matrix(points=tuple(POINTS), signals=SIGNALS, echo=print) -> list[Trial]:
    with tempfile.TemporaryDirectory(prefix="signals-") as tmp:
        work = Path(tmp)
        cache = work / "jax-cache"
        reference = observe(reference_run(work, cache))
        trials = []
        for signum in signals:
            for point in points:
                trials.append(trial(work, cache, reference, point, signum))
                echo(trials[-1].line())
    return trials


if __name__ == "__main__":
    results = run_matrix()
    print(f"{sum(t.ok for t in results)} of {len(results)} trials passed")
    sys.exit(0 if all(t.ok for t in results) else 1)
