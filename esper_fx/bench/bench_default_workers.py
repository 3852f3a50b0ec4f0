"""`default_workers_train` / `default_workers_prove`: the commands a user runs, with no flags (env workers
`auto`, the default) against `--env-workers 0` (everything in one process) (issue 28).

Each round runs both commands as subprocesses, one after the other, alternating which goes first (rounds
interleave, so a change in the machine's load hits both alike), each in its own temporary run directory:

- **train**: `python -m esper_fx.train --quiet --run-dir D` [`--env-workers 0`];
- **prove**: `python -m esper_fx.prove --quiet --out D` [`--env-workers 0`].

Reported: every wall time, the medians, their ratio (in-process / default, the speed-up), each run's
"First action after X s" line (train), and from the default train runs' summary the serial share of the
run: the run's wall time minus the time of the slowest Ray worker inside the epochs, over the wall time.
Amdahl's law turns it into the speed-up more cores could give, up to one worker per env. The two runs of
a round must have the same numbers: metrics.csv and summary.json (train), prove.json (prove), with clock
readings, timings and paths left out; a difference is an error naming the first field that differs.

Not in the default selection (each takes minutes): `python -m esper_fx.bench --only default_workers_train
[--rounds R]`. The lead's figures are in docs/PERFORMANCE.md.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

DEFAULT_ROUNDS = 2
MODULES = {"train": "esper_fx.train", "prove": "esper_fx.prove"}
FIRST_ACTION = re.compile(r"First action after ([0-9.]+) s")
# (provenance: where a run came from, its command line and start time included, not what it computed)
VOLATILE = frozenset({"timing", "timestamp", "started", "finished", "checkpoint", "run_dir", "out", "path", "json",
                      "provenance"})
PROVE_INVOCATION = ("command", "config")  # prove.json's record of the command line and its configuration
CORE_COUNTS = (2, 4, 8, 16)
TARGETS = {"train": 1.6, "prove": 1.5}  # issue 28's speed-ups on the 2-core machine


def command(kind: str, out_dir: Path, in_process: bool) -> list[str]:
    """The command line of one run: the module with no flags but its output place (and `--env-workers 0`)."""
    where = ["--run-dir", str(out_dir)] if kind == "train" else ["--out", str(out_dir)]
    return [sys.executable, "-m", MODULES[kind], "--quiet", *where, *(["--env-workers", "0"] if in_process else [])]


def first_action_s(stdout: str) -> float | None:
    """The seconds of the run's "First action after X s" line (None when it printed none)."""
    match = FIRST_ACTION.search(stdout)
    return float(match.group(1)) if match else None


def untimed(value: Any, root: str = "") -> Any:
    """`value` without clock readings, timings and paths: keys ending in `_s`, the VOLATILE keys, and the
    run's own directory `root` in any string."""
    if isinstance(value, dict):
        return {k: untimed(v, root) for k, v in value.items() if not (k.endswith("_s") or k in VOLATILE)}
    if isinstance(value, list):
        return [untimed(v, root) for v in value]
    if isinstance(value, str) and root:
        return value.replace(root, "<out>")
    return value


def results_of(kind: str, out_dir: Path) -> dict[str, Any]:
    """What must be equal between the two runs of a round."""
    if kind == "train":
        lines = (out_dir / "metrics.csv").read_text(encoding="utf-8").splitlines()
        header = lines[0].split(",")
        keep = [i for i, name in enumerate(header) if not (name.endswith("_s") or name in VOLATILE)]
        rows = [[row.split(",")[i] for i in keep] for row in lines]
        summary = json.loads((out_dir / "summary.json").read_text(encoding="utf-8"))
        return {"metrics.csv": rows, "summary.json": untimed(summary, str(out_dir))}
    report = json.loads((out_dir / "prove.json").read_text(encoding="utf-8"))
    for asked in PROVE_INVOCATION:  # what the user typed (the two commands differ there by design)
        report.pop(asked, None)
    return {"prove.json": untimed(report, str(out_dir))}


def first_difference(a: Any, b: Any, where: str = "") -> str | None:
    """Where `a` and `b` first differ ("summary.json.final_avg_accuracy: 61.2 != 61.3"), or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return f"{where}.{key}: only in {'the first' if key in a else 'the second'}"
            found = first_difference(a[key], b[key], f"{where}.{key}" if where else str(key))
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} entries != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{where}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{where}: {a!r} != {b!r}"


def serial_share(summary: dict[str, Any]) -> float | None:
    """The share of a Ray run's wall time outside the slowest worker's epochs (the driver's serial part:
    acting, the PPO update, logging, Ray's own overhead); None for an in-process run."""
    timing, wall = summary.get("timing") or {}, summary.get("wall_time_s")
    if not timing.get("env_workers") or "worker_s" not in timing or not wall:
        return None
    return max(0.0, wall - timing["worker_s"]) / wall


def amdahl(share: float, workers: int, n_envs: int) -> dict[str, float]:
    """The expected speed-up over the in-process run per core count (Amdahl's law, at most one worker per
    env), from a run of `workers` workers whose wall time was `share` serial: with that run's wall time 1,
    the parallel part is (1 - share) · workers in one worker's time, and it divides over min(cores, envs)."""
    parallel = (1 - share) * workers
    return {str(c): (share + parallel) / (share + parallel / min(c, n_envs)) for c in CORE_COUNTS}


def timed(cmd: Sequence[str], runner: Callable = subprocess.run) -> tuple[float, str]:
    """(wall seconds, stdout) of one command; a failure raises with its last lines."""
    started = time.perf_counter()
    done = runner(list(cmd), capture_output=True, text=True, env=os.environ.copy())
    wall = time.perf_counter() - started
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout or "").strip().splitlines()[-3:])
        raise RuntimeError(f"{' '.join(cmd[1:])} exited {done.returncode}: {tail}")
    return wall, done.stdout


def one_round(kind: str, index: int, work: Path, runner: Callable = subprocess.run) -> dict[str, Any]:
    """Both runs of round `index` (the default first in even rounds), checked equal."""
    order = ["default", "in_process"] if index % 2 == 0 else ["in_process", "default"]
    out: dict[str, Any] = {}
    for name in order:
        out_dir = work / f"{kind}-{index}-{name}"
        wall, stdout = timed(command(kind, out_dir, name == "in_process"), runner)
        out[name] = {"wall_s": wall, "first_action_s": first_action_s(stdout), "results": results_of(kind, out_dir)}
        if kind == "train":
            summary = json.loads((out_dir / "summary.json").read_text(encoding="utf-8"))
            out[name]["serial_share"] = serial_share(summary)
            out[name]["env_workers"] = (summary.get("timing") or {}).get("env_workers")
    diff = first_difference(out["default"].pop("results"), out["in_process"].pop("results"))
    if diff is not None:  # (the wall times are said too: the round's minutes are not lost)
        raise AssertionError(f"{kind} round {index}: the default and --env-workers 0 differ at {diff} (wall "
                             f"{out['default']['wall_s']:.1f} s by default, {out['in_process']['wall_s']:.1f} s "
                             f"with --env-workers 0)")
    return out


def summarize(kind: str, rounds: list[dict[str, Any]], n_envs: int | None = None) -> dict[str, Any]:
    """Medians, the ratio and (train) the serial share with its Amdahl estimate, from the rounds."""
    walls = {name: [r[name]["wall_s"] for r in rounds] for name in ("default", "in_process")}
    med = {name: statistics.median(w) for name, w in walls.items()}
    result = {"kind": kind, "rounds": rounds, "wall_s": walls, "median_s": med,
              "ratio": med["in_process"] / med["default"], "identical": True}
    shares = [r["default"].get("serial_share") for r in rounds if r["default"].get("serial_share") is not None]
    if shares:
        share, workers = statistics.median(shares), rounds[0]["default"]["env_workers"]
        result["serial_share"] = share
        result["amdahl_speedup"] = amdahl(share, workers, n_envs or workers)
    return result


def _run(kind: str, settings: Any) -> dict[str, Any]:
    from esper_fx.config import TrainingConfig

    rounds_n = getattr(settings, "rounds", None) or DEFAULT_ROUNDS
    with tempfile.TemporaryDirectory(prefix=f"bench-{kind}-") as work:
        rounds = [one_round(kind, i, Path(work)) for i in range(rounds_n)]
    result = summarize(kind, rounds, TrainingConfig.preset("quickstart").n_envs)
    first = [r["default"]["first_action_s"] for r in rounds], [r["in_process"]["first_action_s"] for r in rounds]
    result["headline"] = (f"python -m {MODULES[kind]}: {result['median_s']['default']:.1f} s by default vs "
                          f"{result['median_s']['in_process']:.1f} s with --env-workers 0 ({result['ratio']:.2f}×, "
                          f"median of {rounds_n}), same numbers"
                          + (f"; first action {first[0]} s vs {first[1]} s" if kind == "train" else ""))
    if "serial_share" in result:
        result["headline"] += (f"; serial share {100 * result['serial_share']:.1f}%, Amdahl: "
                               + ", ".join(f"{c} cores {x:.2f}×" for c, x in result["amdahl_speedup"].items()))
    spread = {name: {"median_s": result["median_s"][name], "p10_s": min(w), "p90_s": max(w)}
              for name, w in result["wall_s"].items()}  # (few rounds: the spread is min–max)
    result["cases"] = [{"case": kind, **spread, "ratio": result["ratio"]}]
    result["target"] = {"min_speedup": TARGETS[kind], "met": result["ratio"] >= TARGETS[kind]}
    result["columns"] = {"case": "case", "measured": "default", "reference": "in_process"}
    result["ratio_definition"] = "--env-workers 0 median / default median (the speed-up)"
    return result


def run_train(settings: Any) -> dict[str, Any]:
    return _run("train", settings)


def run_prove(settings: Any) -> dict[str, Any]:
    return _run("prove", settings)
