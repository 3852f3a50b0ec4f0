"""The env pool as the loop drives it: the `EpisodePool` protocol every pool follows."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class EpisodePool(Protocol):
    """E envs in lock-step, one batch of episodes at a time, one step per host epoch. Three pools have these
    members: `hosts.env.EnvPool` (in this process; torch signals, `(ApplyResult, next signals)` per step),
    `esper_fx.distributed.pool.RayEnvPool` (the same envs in Ray actors, the same results) and
    `esper_fx.training.bridged_pool.BridgedPool` (wraps either; packed jax signals out, an `EpochResult` per step)."""

    steps_per_epoch: int  # training steps per env per epoch

    def begin(self, batch_index: int, n_active: int | None = None) -> Any:
        """Start episode batch `batch_index` with its first `n_active` envs (all by default): fresh envs,
        then the first epoch; returns its signals."""

    def step(self, actions: Any, bootstrap: bool = ...) -> Any:
        """Execute the epoch's actions [E, 5], then run the next epoch (none after the last)."""

    def episode_results(self) -> list:
        """Per-env totals of the episode batch so far."""
