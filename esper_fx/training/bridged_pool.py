"""The env pool as the loop sees it: packed JAX signals out, actions in (ARCHITECTURE §2).

`BridgedPool` wraps a `hosts.env.EnvPool` or an `esper_fx.distributed.pool.RayEnvPool` (a
`contracts.pool.EpisodePool`, as it is itself) and does every torch -> jax conversion of an epoch through the DLPack bridge, so the loop never holds
a torch tensor:

    signals = pool.begin(b, n_active)           # fresh envs for batch b, epoch 1: packed jax signals
    result = pool.step(actions)                 # the epoch's actions (numpy int [E, 5]) -> EpochResult

The signals cross as three buffers, one per dtype (`esper_fx.contracts.signals.signal_columns`,
`hosts.signals.assembly.pack_signals`): three zero-copy conversions instead of one per field. The jitted
controller step unpacks them (`contracts.signals.unpack_signals`). The actions cross the other way in the one
form they keep from the controller to the slots: the loop reads the step's one small result array back once
and hands its [E, 5] integer columns (`contracts.actions.ACTION_HEADS` order) to the pool as a numpy array.

The bridge's lifetime rule (keep the torch tensors alive until the JAX computation that reads them has
finished) is kept here: a handoff lives until the next `step` (the loop reads the actions back first) or,
for the bootstrap signals, until the next `begin`. `timing` sums the seconds spent in the pool (`env_s`) and in
the hand-off (packing, conversion: `bridge_s`) since the last `begin`; a pool that times its phases
(a non-empty `phase_s`: `hosts.env.EnvPool`, `esper_fx.distributed.pool.RayEnvPool`) also splits `env_s` into its env
builds (`env_build_s`), training (`env_train_s`), validation (`env_validate_s`) and, with Ray workers, the
wait beyond the slowest worker's own time (`env_wait_s`), as `esper_fx.outputs.time_breakdown` says.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, NamedTuple

import numpy as np

from bridge.dlpack import Handoff, to_jax
from esper_fx.contracts.pool import EpisodePool
from esper_fx.contracts.signals import SignalColumn
from hosts.signals.assembly import pack_signals


class EpochResult(NamedTuple):
    """What one `step` did and what comes next (every value plain python or jax)."""

    actions: np.ndarray  # [E, 5] int32, read-only, as the pool executed them (contracts.actions.ACTION_HEADS order)
    events: tuple[Any, ...]  # hosts.env.LifecycleEvent of this epoch, envs in index order (for the logs)
    signals: dict | None  # the next epoch's packed signals; None after the last epoch
    bootstrap: dict | None  # the last epoch's post-action packed signals (asked for with bootstrap=True)


TIMING_KEYS = ("env_s", "env_build_s", "env_train_s", "env_validate_s", "env_wait_s", "bridge_s")
PHASES = {"env_build_s": "build_s", "env_train_s": "train_s", "env_validate_s": "validate_s"}


class BridgedPool:
    def __init__(self, pool: EpisodePool, columns: Mapping[str, SignalColumn]):
        self.pool = pool
        self.columns = dict(columns)
        self.timing = dict.fromkeys(TIMING_KEYS, 0.0)
        self._signals: Handoff | None = None
        self._bootstrap: Handoff | None = None

    @property
    def steps_per_epoch(self) -> int:
        return self.pool.steps_per_epoch

    def begin(self, batch_index: int, n_active: int | None = None) -> dict:
        """Fresh envs for batch `batch_index`; returns epoch 1's packed signals as jax arrays."""
        self.timing = dict.fromkeys(TIMING_KEYS, 0.0)
        self._bootstrap = None
        started, phases = time.perf_counter(), self._phases()
        signals = self.pool.begin(batch_index, n_active)
        self._pool_lap(started, phases)
        self._signals = self._to_jax(signals, "signals")
        return self._signals.tree

    def step(self, actions: np.ndarray, bootstrap: bool = False) -> EpochResult:
        """Execute the epoch's actions (a numpy integer array [E, 5]); returns the next epoch's signals, or after
        the last epoch (when `bootstrap`) the post-action bootstrap signals."""
        started, phases = time.perf_counter(), self._phases()
        applied, signals = self.pool.step(actions, bootstrap=bootstrap)
        self._pool_lap(started, phases)
        self._signals = None if signals is None else self._to_jax(signals, "signals")
        if applied.bootstrap_signals is not None:
            self._bootstrap = self._to_jax(applied.bootstrap_signals, "bootstrap_signals")
        return EpochResult(applied.actions, applied.events, _tree(self._signals if signals is not None else None),
                           _tree(self._bootstrap if applied.bootstrap_signals is not None else None))

    def prefetch(self, batch_index: int, n_active: int | None = None) -> None:
        """Let a pool that can (Ray's) start batch `batch_index` ahead, while the driver updates; a no-op for
        the in-process pool, which has no other core to do it on."""
        self.pool.prefetch(batch_index, n_active)

    def episode_results(self) -> list:
        return self.pool.episode_results()

    @property
    def n_workers(self) -> int:
        return self.pool.n_workers

    @property
    def phase_s(self) -> dict[str, float]:
        return self.pool.phase_s

    @property
    def stats(self) -> dict[str, float]:
        return self.pool.stats

    def wait_ready(self) -> Any:
        return self.pool.wait_ready()

    def close(self) -> None:
        self.pool.close()

    def _to_jax(self, signals: dict, name: str) -> Handoff:
        started = time.perf_counter()
        handoff = to_jax(pack_signals(signals, self.columns), name=name)
        self._lap("bridge_s", started)
        return handoff

    def _lap(self, key: str, started: float) -> None:
        self.timing[key] += time.perf_counter() - started

    def _phases(self) -> dict[str, float]:
        return dict(self.pool.phase_s)

    def _pool_lap(self, started: float, before: dict[str, float]) -> None:
        """A pool call's wall time into `env_s` and, where the pool times its phases, its split: the phases'
        own seconds, beside the pool's own time in the call (`work_s`, Ray's slowest worker; in process the
        call's wall time). Work the driver did not wait for (a batch start sent ahead, which overlaps the
        update) is scaled down to the wait; the wait beyond the work is `env_wait_s`."""
        wall = time.perf_counter() - started
        self.timing["env_s"] += wall
        after = self._phases()
        if not before or not after:  # a pool that does not time its phases
            return
        work = after["work_s"] - before["work_s"] if "work_s" in after else wall
        scale = wall / work if work > wall else 1.0
        for key, phase in PHASES.items():
            if phase in after:
                self.timing[key] += (after[phase] - before[phase]) * scale
        self.timing["env_wait_s"] += max(0.0, wall - work)


def _tree(handoff: Handoff | None) -> dict | None:
    return None if handoff is None else handoff.tree
