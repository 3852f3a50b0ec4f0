"""One env built for one episode (BEHAVIOUR §7.2 item 3): its task, host and slots, optimizer, governor,
tracker, random stream, GradScaler and stream, and the static seeds of the `static_final` control.

`EnvPool.build_envs` calls `build_env` for every env of its slice with the env's seed
(seed + 10000·b + 1000·i, `hosts.env.pool`).
"""

from __future__ import annotations

import random

import torch

from hosts.env.epoch_compute import AmpSettings
from hosts.env.state import EnvRng, EnvState
from hosts.models.morphogenetic import MorphogeneticModel
from hosts.seeds.governor import Governor
from hosts.seeds.lifecycle import SeedClock
from hosts.settings import PoolSettings
from hosts.signals.tracker import SignalTracker
from hosts.tasks import HOST_MOMENTUM, HOST_WEIGHT_DECAY, TaskSpec, mix_task


def build_env(settings: PoolSettings, i: int, env_seed: int, *, task: TaskSpec, clock: SeedClock,
              amp: AmpSettings, stream) -> EnvState:
    """Env i of an episode, seeded with `env_seed`: the run's `task` (under a task mix, the one the seed
    draws), on `settings.env_devices[i]` and `stream` (None off CUDA), its slots on the run's `clock`."""
    device = settings.env_devices[i]
    task = mix_task(settings.task_mix, env_seed) if settings.task_mix else task
    torch.manual_seed(env_seed)
    random.seed(env_seed)
    model = MorphogeneticModel(task.build_host(settings.host_width), settings.enabled_slots, task.topology, clock=clock).to(device)
    for slot_id in settings.enabled_slots:
        model.slot(slot_id).isolate_gradients = True
    rng = EnvRng(device)
    plant_static_seeds(model, rng, i, settings.static_seeds)
    # fp16: a fused SGD takes the scaler's found-inf flag on the device; any other optimizer makes
    # GradScaler.step read it back to the host (a synchronisation per step).
    host_opt = torch.optim.SGD(model.host_parameters(), lr=task.host_lr, momentum=HOST_MOMENTUM,
                               weight_decay=HOST_WEIGHT_DECAY, fused=True if amp.use_scaler else None)
    return EnvState(
        index=i, device=device, model=model, host_optimizer=host_opt,
        governor=Governor(model, random_guess_loss=task.random_guess_loss),
        tracker=SignalTracker(), rng=rng, seed_lr=task.seed_lr * settings.seed_lr_scale,
        carry_seed_state=settings.carry_seed_state,
        scaler=torch.amp.GradScaler("cuda") if amp.use_scaler else None,
        stream=stream, task=task.name,
    )


def plant_static_seeds(model: MorphogeneticModel, rng: EnvRng, i: int, static_seeds: tuple[str, ...]) -> None:
    """`static_seeds` ("slot=blueprint") built fossilized before epoch 1, their init drawn from the env's
    stream after the host's: the static_final control trains them with the host from the start."""
    host_params = model.host_param_count()
    with rng.activate():
        for entry in static_seeds:
            slot_id, _, blueprint = entry.partition("=")
            model.slot(slot_id).plant_fossil(blueprint, f"env{i}_static_{slot_id}", host_param_count=host_params,
                                             source=model.neighbour_block(slot_id))
