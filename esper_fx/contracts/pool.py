"""The env pool as the loop drives it: the `EpisodePool` protocol every pool follows.

It names every member the run uses of a pool, so the run never probes for one: a pool that has nothing to
say (the in-process pool has no workers to wait for, count or time) has it all the same, as a no-op or an
empty value."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class EpisodePool(Protocol):
    """E envs in lock-step, one batch of episodes at a time, one step per host epoch. Three pools have these
    members: `hosts.env.EnvPool` (in this process; torch signals, `(ApplyResult, next signals)` per step),
    `esper_fx.distributed.pool.RayEnvPool` (the same envs in Ray actors, the same results) and
    `esper_fx.training.bridged_pool.BridgedPool` (wraps either; packed jax signals out, an `EpochResult` per step)."""

    steps_per_epoch: int  # training steps per env per epoch
    n_workers: int  # the Ray env workers the pool runs (0: the envs run in this process)
    # seconds in the pool's phases summed over its life: env builds, training, validation ("build_s",
    # "train_s", "validate_s") and, with workers, the slowest worker's whole calls ("work_s")
    phase_s: dict[str, float]
    # what the workers' round trips cost (bytes, calls, "step_wall_s", "step_worker_s", ...); {} in process
    stats: dict[str, float]

    def begin(self, batch_index: int, n_active: int | None = None) -> Any:
        """Start episode batch `batch_index` with its first `n_active` envs (all by default): fresh envs,
        then the first epoch; returns its signals."""

    def step(self, actions: Any, bootstrap: bool = ...) -> Any:
        """Execute the epoch's actions [E, 5], then run the next epoch (none after the last)."""

    def prefetch(self, batch_index: int, n_active: int | None = None) -> None:
        """Start batch `batch_index` ahead while the driver updates, where the pool can (Ray's workers);
        a no-op otherwise."""

    def episode_results(self) -> list:
        """Per-env totals of the episode batch so far."""

    def wait_ready(self) -> Any:
        """Wait until the pool's workers are up (a no-op for a pool without workers)."""

    def close(self) -> None:
        """Release what the pool holds (Ray actors, a local Ray); idempotent, a no-op where it holds nothing."""
