"""`PoolConfig`: every setting the env pool reads, as plain values.

`hosts` imports nothing from `esper_fx` but the contracts, so the pool does not take the run's
`TrainingConfig`. `PoolConfig.from_config(config)` copies the same-named fields from any object that has
them (an `esper_fx.config.TrainingConfig` does); enum values become their strings. Every field is
required: the defaults live with the run's configuration, not here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import Any


@dataclass(frozen=True)
class PoolConfig:
    task: str
    n_envs: int
    max_epochs: int  # episode length T
    seed: int  # run seed: env i of batch b seeds with seed + 10000·b + 1000·i; the data plans too
    slot_ids: tuple[str, ...]  # every injection point of the task's host, canonical order (the slot head)
    enabled_slots: tuple[str, ...]  # the slots that get a SeedSlot, canonical order
    menu: tuple[str, ...]  # blueprint-head index -> blueprint name
    max_seeds: int | None
    min_cull_age: int  # CULL is masked for seeds younger than this (epochs)
    one_seed_at_a_time: bool  # GERMINATE is masked while a seed is developing (not yet fossilized)
    germination_deadline: bool  # GERMINATE is masked once a new seed could not be fossilized in time
    static_seeds: tuple[str, ...]  # "slot=blueprint": planted fossilized when an env is built
    lr_schedule: str  # esper_fx.contracts.LR_SCHEDULES: the SGD lr of host and seeds within an episode
    lr_schedule_steps: int | None  # steps a cosine decays over; None: max_epochs × steps per epoch
    train_steps_budget: int | None  # training steps per episode at most, spread evenly over its epochs
    use_telemetry: bool
    device: str  # the policy device the signals are built on
    env_devices: tuple[str, ...] | None  # env i runs on env_devices[i % len]; None: the policy device
    amp: bool
    amp_dtype: str
    # data (hosts.data.feed.DataFeed.from_config reads these)
    data_path: str
    data_root: str
    data_seed: int
    data_split: str
    synthetic_train_samples: int
    synthetic_test_samples: int
    batch_size_per_env: int | None
    max_train_batches: int | None
    num_workers: int | None
    val_samples: int | None
    val_batch_size: int | None

    @classmethod
    def from_config(cls, config: Any) -> "PoolConfig":
        """A PoolConfig (returned as is) or the same-named attributes of any other config object."""
        if isinstance(config, cls):
            return config
        return cls(**{f.name: _plain(getattr(config, f.name)) for f in dataclasses.fields(cls)})

    def replace(self, **changes: Any) -> "PoolConfig":
        return dataclasses.replace(self, **changes)


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list):
        return tuple(value)
    return value
