"""`PoolSettings`: what the env pool and its data feed read of a run.

esper_fx builds it from the run's `TrainingConfig` in one function (`esper_fx.training.pools.pool_settings`),
where each setting is declared and documented once; `hosts` may not import that config. The devices come
resolved (`esper_fx.devices`). Frozen and picklable: the Ray pool sends it to its actors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from esper_fx.contracts.lifecycle import LifecycleTimings


@dataclass(frozen=True)
class PoolSettings:
    """A run's settings as the env pool (`hosts.env.pool.EnvPool`) and its data (`hosts.data.feed`) read them."""

    # the run
    task: str  # the task's name; its data and shared facts serve every task of a mix
    task_mix: tuple[str, ...]  # the tasks an episode draws one of from its env's seed; empty: `task` alone
    seed: int  # the run seed: every env's RNG streams and the data's epoch plans derive from it
    max_epochs: int  # T, an episode's length in epochs
    # the devices, resolved
    policy_device: torch.device  # where the signals are assembled (the controller's device)
    env_devices: tuple[torch.device, ...]  # env i's device, one per env
    amp: bool  # mixed precision on the CUDA envs
    amp_dtype: str  # the autocast dtype: "float16" or "bfloat16"
    # slots, seeds and their lifecycle
    slot_ids: tuple[str, ...]  # every injection point of the task's host, in canonical order (the slot head)
    enabled_slots: tuple[str, ...]  # the slots that may hold a seed
    menu: tuple[str, ...]  # the blueprint menu: blueprint-head index -> blueprint name
    max_seeds: int | None  # GERMINATE is masked once an env has this many seeds; None: no limit
    lifecycle_timings: LifecycleTimings  # the seed lifecycle's clock: its stage durations for this run and task
    cull_age: int  # CULL is masked for seeds younger than this (epochs)
    one_seed_at_a_time: bool  # GERMINATE is masked while a seed is developing
    germination_deadline: bool  # GERMINATE is masked once its seed could not be fossilized before T
    static_seeds: tuple[str, ...]  # "slot=blueprint": seeds planted fossilized before epoch 1
    # the observation
    use_telemetry: bool  # each slot's gradient features are in the observation
    observe_log_params: bool  # the observation's parameter count as ln(1 + count)
    observe_withheld: tuple[str, ...]  # what the observation withholds ("host_params", "curves"), a control
    observe_fit_gap: bool  # the observation ends with the epoch's train_acc − val_acc
    # the learning rate and the training steps of an episode
    lr_schedule: str  # the network's rate within an episode: "constant", "cosine" or "wsd"
    lr_schedule_steps: int | None  # the training steps a cosine or wsd schedule spans; None: the episode's
    lr_warmup_fraction: float  # wsd: the first fraction of the steps warms the rate up
    lr_decay_fraction: float  # wsd: the last fraction of the steps decays the rate linearly to zero
    seed_lr_rewarm_steps: int  # a seed's rate warms up over its first N training steps (0: at once)
    seed_lr_scale: float  # a seed's SGD rate: the task's seed rate times this
    carry_seed_state: bool  # a host-initialised seed starts with the momentum of the host weights it copies
    host_width: float  # the CNN host's channel widths times this
    train_steps_budget: int | None  # at most this many training steps per episode, spread over its epochs
    # the data
    data_path: str  # "device" (the data on every env device) or "loader" (DataLoader workers)
    data_root: str  # where the datasets read from disk live
    data_seed: int  # the seed of the generated datasets
    synthetic_train_samples: int  # a generated dataset's training samples
    synthetic_test_samples: int  # a generated dataset's test samples
    data_split: str  # how the training data is divided across envs: "shared" or "full"
    batch_size_per_env: int | None  # None: the task's batch size
    max_train_batches: int | None  # training steps per epoch at most; None: the task's; 0: unlimited
    num_workers: int | None  # DataLoader workers on the loader path; None: the feed's default
    val_samples: int | None  # the first N validation samples; None: the whole test split
    val_batch_size: int | None  # None: the per-env batch size

    @property
    def n_envs(self) -> int:
        return len(self.env_devices)
