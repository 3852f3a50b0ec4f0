"""Where a run's wall time went (issue 55): summary.json's `timing.breakdown`, its closing line and its bar.

    {"wall_s": 301.2, "parts": {"setup": 6.1, "pool_train": 150.3, ..., "other": 1.9},
     "other_share": 0.0063}

The parts do not overlap and add up to `wall_s`: the run's wall time from the start of `esper_fx.run` to the
moment summary.json is final (after the report and the end of the W&B run; closing the pool and the closing
lines come after it). Each part is a wall time on the driver, the process that runs the loop:

    setup         start-up: checks, the env pool (its data, its Ray workers), the controller's first state,
                  the run directory; a resume's checkpoint is `checkpoints`
    pool_build    building each batch's envs (models,           | in process: the pool's own clock around its
                  optimisers)                                    | phases; with Ray workers, the slowest
    pool_train    the envs' training steps                      | worker's own clock, scaled down to the
    pool_validate the fused validation + counterfactual pass,    | driver's wait where the worker's work
                  its one host sync, and what follows it         | overlapped the driver's (a batch start
                  (governor, contributions, tracker)             | sent ahead runs during the update)
    pool_other    the pool's rest: signals, actions, slot steps  |
    ray_wait      with Ray workers: the driver's wait beyond the slowest worker's own time (the object
                  store, merging the signals); 0 in process
    bridge        packing the signals and their DLPack hand-off to JAX
    controller    the jitted controller step of each epoch and the one read-back of its actions
    update        the end-of-batch update: the normaliser and the PPO update (and its read-back)
    jax_compile   JAX compilation wherever it happened: tracing, lowering and XLA's compilation (or its
                  load from the persistent cache), from jax.monitoring's duration events
                  (`training.clock`); every other part is counted without it
    batch_other   the rest of each batch: its start, the bootstrap value, tallies, episode results, its row
    checkpoints   writing checkpoints (and reading one on a resume)
    logging       TensorBoard and W&B (opening, each batch's scalars, closing), with metrics.csv,
                  events.jsonl, summary.json and the console's batch lines
    static_host   the report's reference batch, the host trained alone
    report        plots/ and report.html
    other         wall_s less every other part: what no part names (between the batches, the console's
                  per-epoch progress, ...); never negative

On CUDA the parts are host times: the pool's training phase launches its kernels without waiting for them,
and `pool_validate` holds the epoch's one host sync, so it also holds the wait for the training kernels
that had not finished (a training phase much shorter than validation means the envs wait on the GPU, not
on their launches). Plain python: no torch, no jax.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

# part -> its label in the closing line and the report's bar, in the order both show them
PARTS: dict[str, str] = {
    "setup": "start-up",
    "pool_build": "pool: env builds",
    "pool_train": "pool: train",
    "pool_validate": "pool: validate + counterfactual",
    "pool_other": "pool: rest",
    "ray_wait": "Ray round trips",
    "bridge": "bridge",
    "controller": "controller act",
    "update": "PPO update",
    "jax_compile": "JAX compilation",
    "batch_other": "batch bookkeeping",
    "checkpoints": "checkpoints",
    "logging": "TensorBoard, W&B, logs",
    "static_host": "static-host batch",
    "report": "report",
    "other": "other",
}
# a batch's `timing` keys (BatchSummary.timing) that the batch parts are read from
POOL_KEYS = {"pool_build": "env_build_s", "pool_train": "env_train_s", "pool_validate": "env_validate_s",
             "ray_wait": "env_wait_s"}
DIGITS = 4  # seconds are rounded to 0.1 ms


def batch_parts(timing: Mapping[str, float], wall_s: float) -> dict[str, float]:
    """One batch's wall time in parts (the batch parts of PARTS), from its `timing` sums: env_s (the pool,
    split into env_build_s, env_train_s, env_validate_s, env_wait_s and the rest), bridge_s, controller_s and update_s
    (each with its compilation, controller_compile_s and update_compile_s, taken out) and compile_s, all
    the batch's compilation; what is left of `wall_s` is `batch_other`."""
    t = {k: float(v) for k, v in timing.items() if isinstance(v, (int, float))}
    env, bridge, controller, update = (t.get(k, 0.0) for k in ("env_s", "bridge_s", "controller_s", "update_s"))
    controller_c, update_c, compiled = (t.get(k, 0.0) for k in ("controller_compile_s", "update_compile_s",
                                                                 "compile_s"))
    parts = {name: t.get(key, 0.0) for name, key in POOL_KEYS.items()}
    parts["pool_other"] = env - sum(parts.values())
    parts.update(bridge=bridge, controller=controller - controller_c, update=update - update_c,
                 batch_other=wall_s - env - bridge - controller - update - (compiled - controller_c - update_c))
    return parts


def breakdown(wall_s: float, run_parts: Mapping[str, float], compile_s: float,
              batches: Sequence[Any]) -> dict[str, Any]:
    """The breakdown of a run's `wall_s`: the run's own parts (setup, checkpoints, logging, static_host,
    report), its compilation and the parts of its `batches` (BatchSummary rows or their dicts, this process's
    only), `other` the rest (0 when the parts leave nothing)."""
    parts = dict.fromkeys(PARTS, 0.0)
    for batch in batches:
        timing, wall = (batch.get("timing") or {}, batch.get("wall_time_s", 0.0)) if isinstance(batch, Mapping) \
            else (batch.timing or {}, batch.wall_time_s)
        for name, seconds in batch_parts(timing, float(wall or 0.0)).items():
            parts[name] += seconds
    for name, seconds in run_parts.items():
        if name not in PARTS or name == "other":
            raise KeyError(f"unknown part of a run's time: {name!r} (known: {', '.join(PARTS)})")
        parts[name] += float(seconds)
    parts["jax_compile"] += float(compile_s)
    parts = {name: round(max(0.0, seconds), DIGITS) for name, seconds in parts.items()}
    parts["other"] = round(max(0.0, wall_s - sum(s for name, s in parts.items() if name != "other")), DIGITS)
    wall = round(wall_s, DIGITS)
    return {"wall_s": wall, "parts": parts, "other_share": parts["other"] / wall if wall > 0 else 0.0}


def shares(bd: Mapping[str, Any]) -> dict[str, float]:
    """Each part's share of the wall time (0..1)."""
    wall = float(bd.get("wall_s") or 0.0)
    return {name: (float(s) / wall if wall > 0 else 0.0) for name, s in (bd.get("parts") or {}).items()}


def largest(bd: Mapping[str, Any], n: int = 3) -> list[tuple[str, float]]:
    """The `n` largest parts other than `other`, as (name, share), largest first."""
    ranked = sorted(((name, share) for name, share in shares(bd).items() if name != "other" and share > 0),
                    key=lambda item: -item[1])
    return ranked[:n]


def closing_line(bd: Mapping[str, Any] | None) -> str | None:
    """`Time: pool: train 48.1%, controller act 20.3%, JAX compilation 9.7% of 301.2 s (other 0.6%; ...)`, the
    three largest parts; None without a breakdown."""
    if not bd or not bd.get("parts") or not math.isfinite(float(bd.get("wall_s") or math.nan)):
        return None
    top = ", ".join(f"{PARTS.get(name, name)} {share:.1%}" for name, share in largest(bd))
    return (f"Time: {top or 'nothing measured'} of {float(bd['wall_s']):.1f} s (other "
            f"{float(bd.get('other_share', 0.0)):.1%}; every part: summary.json, timing.breakdown)")
