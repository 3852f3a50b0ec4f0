"""`ray`: env-epochs per second with the envs in Ray actors against the in-process pool (issue 15).

At E = 4 on the quickstart preset (`--preset` picks others): one epoch of every env, `pool.step(WAIT
actions)` (the actions, the epoch's training and validation, the next signals), timed interleaved for

- **in_process**: `hosts.env.EnvPool`, every env in this process one after another;
- **ray_2**: `esper_fx.distributed.pool.RayEnvPool` with 2 workers (2 envs each), signals back as numpy arrays
  through the object store and actions out as int32 arrays, torch tensors again on the driver.

Ratio: in_process / ray_2 (the speed-up; target ≥ 1.6 on a 2-core machine). The Ray path's overhead is
the driver's wall time of a step minus the slowest worker's own time in it (the object-store round trip,
scheduling, numpy <-> torch), as a share of the step (target < 5%). Both pools use the driver's torch
thread count (the bench's default 1), so each worker uses one core. Epochs 2.. of episode 0 are timed;
the episode is long enough for warm-up and repetitions.
"""

from __future__ import annotations

import math
import time

import numpy as np

from esper_fx.contracts.actions import DEFAULT_TEMPO, HEAD_TEMPO, NUM_HEADS
from esper_fx.bench.presets import N_ENVS, bench_config
from esper_fx.bench.settings import BenchSettings, Reps
from esper_fx.bench.timing import Candidate, measure_interleaved
from esper_fx.training.pools import pool_settings
from hosts.env import EnvPool

REPS = Reps(warmup=1, reps=5)
N_WORKERS = 2
TARGET_SPEEDUP = 1.6
TARGET_OVERHEAD_SHARE = 0.05
DEFAULT_PRESET = "quickstart"


def _stepper(pool, n_envs: int, cpu: list[float] | None = None):
    """One epoch per call: WAIT for every env, then the next epoch's training and validation; with `cpu`,
    this process's CPU time per call is appended to it."""
    wait = np.zeros((n_envs, NUM_HEADS), dtype=np.int32)
    wait[:, HEAD_TEMPO] = DEFAULT_TEMPO

    def step():
        started = time.process_time()
        out = pool.step(wait, bootstrap=False)
        if cpu is not None:
            cpu.append(time.process_time() - started)
        return out

    return step


def _case(settings: BenchSettings, preset: str) -> dict:
    from esper_fx.distributed.pool import RayEnvPool

    device = str(settings.device.torch_device)
    config = bench_config(preset, n_envs=N_ENVS, device=device, seed=settings.seed, quick=settings.quick)
    reps = settings.reps(REPS)
    if config.max_epochs < 1 + reps.warmup + reps.reps:
        config = config.replace(max_epochs=1 + reps.warmup + reps.reps)
    local = EnvPool(pool_settings(config))
    with RayEnvPool(pool_settings(config), N_WORKERS) as remote:
        local.begin(0)
        remote.begin(0)
        before, local_cpu = dict(remote.stats), []
        timings = measure_interleaved({"in_process": Candidate(_stepper(local, N_ENVS, local_cpu), _no_sync),
                                       "ray_2": Candidate(_stepper(remote, N_ENVS), _no_sync)},
                                      reps.warmup, reps.reps)
        stats = {k: remote.stats[k] - before[k] for k in before}
    steps = reps.warmup + reps.reps
    wall, worker = stats["step_wall_s"], stats["step_worker_s"]
    in_process, ray_2 = timings["in_process"], timings["ray_2"]
    return {
        "preset": preset, "n_envs": N_ENVS, "n_workers": N_WORKERS, "steps_per_epoch": local.steps_per_epoch,
        "in_process": in_process.as_dict(), "ray_2": ray_2.as_dict(),
        "ratio": in_process.median_s / ray_2.median_s,
        "env_epochs_per_s": {"in_process": N_ENVS / in_process.median_s, "ray_2": N_ENVS / ray_2.median_s},
        "overhead_share": (wall - worker) / wall, "overhead_s_per_epoch": (wall - worker) / steps,
        # one env-epoch's compute: in process, and inside a worker (the slowest one's step / its envs);
        # above 1, the workers' envs ran slower than in process (cores busy with other work)
        "env_epoch_s": {"in_process": in_process.median_s / N_ENVS,
                        "in_worker": worker / steps / math.ceil(N_ENVS / N_WORKERS)},
        # CPU time per env-epoch: about equal when the workers do the in-process work, only spread out
        "env_epoch_cpu_s": {"in_process": sum(local_cpu) / steps / N_ENVS,
                            "in_workers": stats["step_worker_cpu_s"] / steps / N_ENVS},
        "bytes_per_epoch": {"signals_in": stats["bytes_in"] // steps, "actions_out": stats["bytes_out"] // steps},
    }


def _no_sync(_result) -> None:
    """CPU pools return after their host sync; CUDA pools read their accumulators back inside the step."""


def run(settings: BenchSettings) -> dict:
    presets = settings.presets or (DEFAULT_PRESET,)
    cases = [_case(settings, preset) for preset in presets]
    met = {"speedup": all(c["ratio"] >= TARGET_SPEEDUP for c in cases),
           "overhead": all(c["overhead_share"] < TARGET_OVERHEAD_SHARE for c in cases)}
    return {
        "what": f"one epoch of E={N_ENVS} envs: the in-process pool vs {N_WORKERS} Ray env workers",
        "measured": f"esper_fx.distributed.pool.RayEnvPool.step ({N_WORKERS} workers)",
        "reference": "hosts.env.EnvPool.step (in process)",
        "ratio_definition": "in_process median / ray_2 median (the speed-up)",
        "columns": {"case": "preset", "measured": "ray_2", "reference": "in_process"},
        "cases": cases,
        "target": {"min_speedup": TARGET_SPEEDUP, "max_overhead_share": TARGET_OVERHEAD_SHARE,
                   "met": all(met.values()), "met_by_target": met},
        "headline": "; ".join(
            f"{c['preset']} E={c['n_envs']}: {c['env_epochs_per_s']['ray_2']:.2f} env-epochs/s with "
            f"{c['n_workers']} Ray workers vs {c['env_epochs_per_s']['in_process']:.2f} in process "
            f"({c['ratio']:.2f}×); Ray overhead {100 * c['overhead_share']:.1f}% of the epoch, "
            f"{c['bytes_per_epoch']['signals_in'] + c['bytes_per_epoch']['actions_out']} B/epoch through the object store"
            for c in cases),
    }
