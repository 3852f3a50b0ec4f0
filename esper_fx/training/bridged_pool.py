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
for the bootstrap signals, until the next `begin`. `timing` sums the seconds spent in the pool and in
the hand-off (packing, conversion) since the last `begin`.
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


class BridgedPool:
    def __init__(self, pool: EpisodePool, columns: Mapping[str, SignalColumn]):
        self.pool = pool
        self.columns = dict(columns)
        self.timing = {"env_s": 0.0, "bridge_s": 0.0}
        self._signals: Handoff | None = None
        self._bootstrap: Handoff | None = None

    @property
    def steps_per_epoch(self) -> int:
        return self.pool.steps_per_epoch

    def begin(self, batch_index: int, n_active: int | None = None) -> dict:
        """Fresh envs for batch `batch_index`; returns epoch 1's packed signals as jax arrays."""
        self.timing = {"env_s": 0.0, "bridge_s": 0.0}
        self._bootstrap = None
        started = time.perf_counter()
        signals = self.pool.begin(batch_index, n_active)
        self._lap("env_s", started)
        self._signals = self._to_jax(signals, "signals")
        return self._signals.tree

    def step(self, actions: np.ndarray, bootstrap: bool = False) -> EpochResult:
        """Execute the epoch's actions (a numpy integer array [E, 5]); returns the next epoch's signals, or after
        the last epoch (when `bootstrap`) the post-action bootstrap signals."""
        started = time.perf_counter()
        applied, signals = self.pool.step(actions, bootstrap=bootstrap)
        self._lap("env_s", started)
        self._signals = None if signals is None else self._to_jax(signals, "signals")
        if applied.bootstrap_signals is not None:
            self._bootstrap = self._to_jax(applied.bootstrap_signals, "bootstrap_signals")
        return EpochResult(applied.actions, applied.events, _tree(self._signals if signals is not None else None),
                           _tree(self._bootstrap if applied.bootstrap_signals is not None else None))

    def prefetch(self, batch_index: int, n_active: int | None = None) -> None:
        """Let a pool that can (Ray's) start batch `batch_index` ahead, while the driver updates; a no-op for
        the in-process pool, which has no other core to do it on."""
        ahead = getattr(self.pool, "prefetch", None)
        if ahead is not None:
            ahead(batch_index, n_active)

    def episode_results(self) -> list:
        return self.pool.episode_results()

    def _to_jax(self, signals: dict, name: str) -> Handoff:
        started = time.perf_counter()
        handoff = to_jax(pack_signals(signals, self.columns), name=name)
        self._lap("bridge_s", started)
        return handoff

    def _lap(self, key: str, started: float) -> None:
        self.timing[key] += time.perf_counter() - started


def _tree(handoff: Handoff | None) -> dict | None:
    return None if handoff is None else handoff.tree
