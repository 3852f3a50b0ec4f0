"""`PoolSettings`: what the env pool and its data feed read of a run.

Its settings are `esper_fx.contracts.run_settings.HostSettings`, the one declaration of every setting the hosts
read, which `esper_fx.config.TrainingConfig` inherits too (`hosts` may not import that config); to them it adds
what the run resolves for the hosts (devices, slots, menu, lifecycle clock, cull age).
`esper_fx.training.pools.pool_settings` builds it from a config, every host setting copied by name. Frozen and
picklable: the Ray pool sends it to its actors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from esper_fx.contracts.lifecycle import LifecycleTimings
from esper_fx.contracts.run_settings import HostSettings


@dataclass(frozen=True, kw_only=True)
class PoolSettings(HostSettings):
    """A run's settings as the env pool (`hosts.env.pool.EnvPool`) and its data (`hosts.data.feed`) read them:
    the host settings (each named enum as its plain string), and what the run resolves for them below."""

    # the devices, resolved
    policy_device: torch.device  # where the signals are assembled (the controller's device)
    env_devices: tuple[torch.device, ...]  # env i's device, one per env
    # slots, seeds and their lifecycle, resolved
    slot_ids: tuple[str, ...]  # every injection point of the task's host, in canonical order (the slot head)
    enabled_slots: tuple[str, ...]  # the slots that may hold a seed
    menu: tuple[str, ...]  # the blueprint menu: blueprint-head index -> blueprint name
    lifecycle_timings: LifecycleTimings  # the seed lifecycle's clock: its stage durations for this run and task
    cull_age: int  # CULL is masked for seeds younger than this (epochs)

    @property
    def n_envs(self) -> int:
        return len(self.env_devices)

    @property
    def carry_seed_state(self) -> bool:
        """A host-initialised seed starts with the momentum of the host weights it copies."""
        return self.seed_optimizer_state == "carry"
