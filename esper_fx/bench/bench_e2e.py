"""`e2e`: the share of an epoch's wall time spent in the controller and the bridge, in a real run.

A real `esper_fx.run` on shapes10 (small synthetic split, no run directory). The run's env pool is
wrapped in `TimedPool`, which only reads the clock around the pool's own calls (`begin` and `step`: the
loop's interface), so every epoch gives:
- env: the pool's own work for the epoch (train, validate, signals; then actions, step_epoch);
- controller + bridge: the gap between two pool calls, i.e. `to_jax(signals)`, the jitted controller step
  (normalise, act, reward, append) up to `block_until_ready`, `to_torch(actions)`;
- epoch: from the epoch's signals being asked for to the end of its actions.
The share is the median over epochs of controller+bridge / epoch (target < 0.5%). Medians over epochs keep the
few epochs in which JAX compiles out of the figure, and the first batch (a warm-up) is left out entirely.

The loop's own per-batch sums (`history[b].timing` = env_s, bridge_s, controller_s) are reported for
every batch, with the wall time outside the epochs (`pool.reset`, the observation-normaliser update, the
PPO update, bookkeeping). From the last batch (which compiles nothing) come the controller and bridge
shares of the batch's wall time, and the share counting the time outside the epochs as controller time
too (an upper bound that includes the PPO update).

--quick runs the `heuristic` controller (no PPO update to compile) for one batch: a smoke test whose
figures are not the claim.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

import esper_fx
from esper_fx.bench.settings import BenchSettings
from esper_fx.bench.timing import Timing
from esper_fx.config import TrainingConfig
from esper_fx.training.pools import build_pool

TASK = "shapes10"
TIMING_KEYS = ("env_s", "bridge_s", "controller_s")
TARGET_SHARE = 0.005  # issue 17: controller + hand-off at most 0.5% of an epoch's wall time
FULL = {"controller": "ppo_lstm", "n_envs": 4, "max_epochs": 25, "batches": 3, "warmup_batches": 1,
        "train": 8192, "test": 1024, "bpe": 512}
QUICK = {"controller": "heuristic", "n_envs": 1, "max_epochs": 5, "batches": 1, "warmup_batches": 0,
         "train": 512, "test": 256, "bpe": 128}


@dataclasses.dataclass(frozen=True)
class EpochTiming:
    batch: int
    env_s: float  # train_and_validate + apply
    gap_s: float  # between them: bridge + controller
    epoch_s: float  # train_and_validate start to apply end


class TimedPool:
    """Forwards everything to an EnvPool and records the clock around `begin` and `step`.

    `step` is the epoch's actions followed by the next epoch's training: the pool's own clock splits it
    with `train_and_validate`, which it calls inside `step` (and `begin`)."""

    def __init__(self, pool: Any):
        self._pool = pool
        self.epochs: list[EpochTiming] = []
        self._batch = -1
        self._marks: tuple[float, float] = (0.0, 0.0)  # this epoch's train_and_validate: start, end

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def begin(self, batch_index: int, *args, **kwargs):
        self._batch = int(batch_index)
        self._pool.build_envs(batch_index, *args, **kwargs)
        return self._train_and_validate()

    def step(self, actions, bootstrap: bool = True):
        start, signals_ready = self._marks
        applying = time.perf_counter()
        last = self._pool.epoch >= self._pool.max_epochs
        result = self._pool.apply(actions, bootstrap=last and bootstrap)
        end = time.perf_counter()
        self.epochs.append(EpochTiming(self._batch, (signals_ready - start) + (end - applying),
                                       applying - signals_ready, end - start))
        return result, None if last else self._train_and_validate()

    def _train_and_validate(self):
        start = time.perf_counter()
        signals = self._pool.train_and_validate()
        self._marks = (start, time.perf_counter())
        return signals


def _config(settings: BenchSettings, size: dict) -> TrainingConfig:
    device = str(settings.device.torch_device)
    return TrainingConfig(
        task=TASK, controller=size["controller"], n_envs=size["n_envs"], max_epochs=size["max_epochs"],
        n_episodes=size["n_envs"] * size["batches"], seed=settings.seed, device=device,
        synthetic_train_samples=size["train"], synthetic_test_samples=size["test"],
        batch_size_per_env=size["bpe"], max_train_batches=0, env_workers=0,  # the in-process pool's epoch
    )


def _batch_rows(history: list) -> list[dict]:
    """The loop's per-batch timing sums, and the wall time outside the epochs."""
    rows = []
    for entry in history:
        timing = entry.timing
        if any(k not in timing for k in TIMING_KEYS):
            raise RuntimeError(f"history entries carry no timing {TIMING_KEYS} (got {sorted(timing)})")
        in_epochs = sum(timing[k] for k in TIMING_KEYS)
        rows.append({"batch": entry.batch, **{k: timing[k] for k in TIMING_KEYS},
                     "wall_time_s": entry.wall_time_s, "outside_epochs_s": entry.wall_time_s - in_epochs})
    return rows


def _last_batch_shares(last: dict) -> dict:
    """Shares of the last batch's wall time (a batch that compiles nothing) from the loop's own sums."""
    wall = last["wall_time_s"]
    return {
        "last_batch_share_controller": last["controller_s"] / wall,
        "last_batch_share_bridge": last["bridge_s"] / wall,
        "last_batch_share_outside_epochs": last["outside_epochs_s"] / wall,
        "share_with_outside_epochs": (last["controller_s"] + last["bridge_s"] + last["outside_epochs_s"]) / wall,
    }


def _case(size: dict, epochs: list[EpochTiming], rows: list[dict]) -> dict:
    measured = [e for e in epochs if e.batch >= size["warmup_batches"]]
    return {
        "n_envs": size["n_envs"], "max_epochs": size["max_epochs"], "controller": size["controller"],
        "epochs_measured": len(measured),
        "samples_per_env_epoch": size["train"] // size["n_envs"] // size["bpe"] * size["bpe"],
        "controller_bridge": Timing.from_samples([e.gap_s for e in measured]).as_dict(),
        "env": Timing.from_samples([e.env_s for e in measured]).as_dict(),
        "epoch": Timing.from_samples([e.epoch_s for e in measured]).as_dict(),
        "ratio": statistics.median(e.gap_s / e.epoch_s for e in measured),
        **_last_batch_shares(rows[-1]),
        "batches": rows,
    }


def run(settings: BenchSettings) -> dict:
    size = QUICK if settings.quick else FULL
    config = _config(settings, size)
    pool = TimedPool(build_pool(config))
    result = esper_fx.run(config, run_dir=False, quiet=True, pool=pool)
    case = _case(size, pool.epochs, _batch_rows(result.history))
    met = case["ratio"] < TARGET_SHARE
    return {
        "what": f"a real esper_fx.run on {TASK} ({size['controller']}, E={size['n_envs']}, T={size['max_epochs']}, "
                f"{size['batches']} batches, {size['train']} training samples, batch {size['bpe']})",
        "measured": "controller + bridge per epoch (the gap between the pool's train_and_validate and apply)",
        "reference": "the epoch's wall time (train_and_validate start to apply end)",
        "ratio_definition": "median over epochs of controller+bridge / epoch wall time (a share)",
        "columns": {"case": "n_envs", "measured": "controller_bridge", "reference": "epoch"},
        "ratio_is_share": True,
        "cases": [case],
        "target": {"max_share": TARGET_SHARE, "met": met},
        "headline": f"controller + bridge = {100 * case['ratio']:.2f}% of an epoch (median over "
                    f"{case['epochs_measured']} epochs); last batch: controller "
                    f"{100 * case['last_batch_share_controller']:.2f}%, bridge {100 * case['last_batch_share_bridge']:.2f}%, "
                    f"{100 * case['share_with_outside_epochs']:.2f}% counting resets and the PPO update "
                    f"(target < {100 * TARGET_SHARE:g}%: "
                    f"{'met' if met else 'not met'})",
    }
