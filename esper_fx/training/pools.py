"""The run's env pool: its settings (`pool_settings`, the one place a TrainingConfig becomes what `hosts`
reads), built from the config (in process, or Ray actors), held open for a run and closed after it however
it ends, and what it says about its workers (how many, their time).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import fields
from enum import Enum
from typing import Callable

from esper_fx.config import TrainingConfig
from esper_fx.contracts.pool import EpisodePool
from esper_fx.contracts.run_settings import HostSettings
from esper_fx.devices import env_devices, torch_device
from esper_fx.distributed.auto import choose_workers, fallback_line
from esper_fx.distributed.worker import data_errors
from esper_fx.training import preflight
from hosts.env import EnvPool
from hosts.settings import PoolSettings


def pool_settings(config: TrainingConfig) -> PoolSettings:
    """What the env pool reads of the run: every host setting (`HostSettings`) copied by name, a named choice as
    its plain string, and what the run resolves for the hosts (its devices by `esper_fx.devices`, torch's side
    only)."""
    host = {f.name: getattr(config, f.name) for f in fields(HostSettings)}
    return PoolSettings(
        **{name: value.value if isinstance(value, Enum) else value for name, value in host.items()},
        policy_device=torch_device(config.device), env_devices=env_devices(config), slot_ids=config.slot_ids,
        enabled_slots=config.enabled_slots, menu=config.menu, lifecycle_timings=config.lifecycle_timings,
        cull_age=config.cull_age)


def build_pool(config: TrainingConfig, say: Callable[[str], None] = print,
               progress: Callable[[str], None] | None = None) -> EpisodePool:
    """The run's env pool over its `pool_settings`: in this process (`env_workers` 0), or that many Ray
    actors (`esper_fx.distributed.pool.RayEnvPool`; close it). `auto` decides the number at this point
    (`esper_fx.distributed.auto.choose_workers`); when it chose Ray and Ray cannot start, `say` gets one
    line and the pool is the in-process one. A dataset that cannot be loaded, or that does not fit the
    configuration (a batch larger than the training split), raises DataError, in this process or from a
    worker; a dataset of image files is read here first when Ray workers will (`preflight.check_data`).
    `progress` gets one line before Ray starts."""
    choice = choose_workers(config)
    settings = pool_settings(config)
    if choice.n > 0:
        from esper_fx.distributed.pool import RayEnvPool, RayStartError

        preflight.check_data(config)  # before Ray and any worker start: a bad file is the in-process line
        try:
            return RayEnvPool(settings, choice.n, config.ray_address, say=progress)
        except (ImportError, RayStartError) as exc:
            if not choice.auto:
                raise
            say(fallback_line(exc))
    with data_errors():
        return EnvPool(settings)


@contextmanager
def run_pool(config: TrainingConfig, pool: EpisodePool | None = None, say: Callable[[str], None] = print,
             progress: Callable[[str], None] | None = None):
    """The caller's pool as is, or `build_pool(config, say, progress)`, closed (Ray actors and a local Ray
    stopped) when the run ends, whether it finishes, fails or is stopped."""
    if pool is not None:
        yield pool
        return
    pool = build_pool(config, say, progress)
    try:
        yield pool
    finally:
        pool.close()


def pool_workers(pool: EpisodePool) -> int:
    """The Ray env workers a pool runs (0: the in-process pool)."""
    return int(pool.n_workers)


def worker_time(pool: EpisodePool) -> dict[str, float]:
    """A Ray pool's epochs as its workers timed them: the slowest worker's own time summed over the steps
    (`worker_s`) and the driver's time in those steps (`pool_step_s`); the rest of the run's wall time is
    serial in the driver (docs/PERFORMANCE.md, issue 28). Empty for the in-process pool."""
    stats = pool.stats
    if "step_worker_s" not in stats:
        return {}
    return {"worker_s": float(stats["step_worker_s"]), "pool_step_s": float(stats["step_wall_s"])}
