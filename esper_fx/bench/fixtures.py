"""Inputs shared by the controller benchmarks and the equivalence checks.

One `ControllerPair` holds the JAX controller (`rl.network.ActorCritic` + `rl.ppo.TrainState`) and the
PyTorch reference network with the *same* parameters copied in. Observations, masks and rollouts are
built once as numpy arrays and handed to both sides, so both compute on identical data.

Rollouts are real trajectories: T steps of `rl.ppo.act` threading the carry, so the stored log-probs and
values are the current policy's, every PPO ratio starts at 1 and the KL early stop does not fire (the
update always takes its gradient step, on both sides).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from esper_fx.contracts.actions import NUM_BLENDS, NUM_OPS, NUM_TEMPOS, LifecycleOp
from esper_fx.contracts.blueprints import DEFAULT_NUM_BLUEPRINTS
from esper_fx.contracts.observation import obs_dim
from esper_fx.contracts.tasks import task_facts
from esper_fx.config import TrainingConfig
from esper_fx.bench import torch_reference as T
from rl import distributions as dist
from rl import ppo
from rl import rollout as rollout_lib
from rl.config import PPOConfig
from rl.network import ActorCritic

TASK = "cifar10"  # S = 3, B = 5, D = 80: the default controller shape (shapes10 has the same)
NUM_SLOTS = task_facts(TASK).num_slots
NUM_BLUEPRINTS = DEFAULT_NUM_BLUEPRINTS
OBS_DIM = obs_dim(NUM_SLOTS, telemetry=True, num_blueprints=NUM_BLUEPRINTS)
EPISODE_LENGTH = TrainingConfig().max_epochs
N_ENVS = TrainingConfig().n_envs


@dataclasses.dataclass
class ControllerPair:
    network: ActorCritic
    state: ppo.TrainState
    cfg: PPOConfig
    torch_net: T.TorchActorCritic
    n_envs: int  # the run's env count: the entropy anneal's unit


def make_pair(seed: int, device: torch.device, n_envs: int = N_ENVS) -> ControllerPair:
    """The JAX controller from `seed` and the torch reference with its parameters copied in."""
    network = ActorCritic(num_slots=NUM_SLOTS, num_blueprints=NUM_BLUEPRINTS)
    cfg = PPOConfig(update_epochs=1, num_minibatches=1)  # the timed unit: one gradient step on each side
    state = ppo.init_train_state(jax.random.PRNGKey(seed), network, OBS_DIM, cfg)
    torch_net = T.TorchActorCritic(OBS_DIM, NUM_SLOTS, NUM_BLUEPRINTS)
    T.load_flax_params(torch_net, jax.device_get(state.params))
    return ControllerPair(network, state, cfg, torch_net.to(device), n_envs)


def torch_config(cfg: PPOConfig) -> T.TorchPPOConfig:
    """The reference's hyperparameters, field by field from the JAX PPOConfig."""
    return T.TorchPPOConfig.from_ppo_config(cfg)


def default_masks(n_envs: int, lead_shape: tuple[int, ...] = ()) -> tuple[np.ndarray, ...]:
    """Masks as the loop sees them in a typical state: slot r0c0 only, blueprint 1..B−1, every blend and tempo,
    op WAIT/GERMINATE everywhere, plus FOSSILIZE and CULL on every other env (a seed on probation)."""
    shape = (n_envs,) + lead_shape
    slot = np.zeros(shape + (NUM_SLOTS,), bool)
    slot[..., 0] = True
    blueprint = np.ones(shape + (NUM_BLUEPRINTS,), bool)
    blueprint[..., 0] = False
    blend = np.ones(shape + (NUM_BLENDS,), bool)
    op = np.zeros(shape + (NUM_OPS,), bool)
    op[..., [LifecycleOp.WAIT, LifecycleOp.GERMINATE]] = True
    op[1::2, ..., [LifecycleOp.CULL, LifecycleOp.FOSSILIZE]] = True
    tempo = np.ones(shape + (NUM_TEMPOS,), bool)
    return slot, blueprint, blend, op, tempo


def jax_masks(masks: tuple[np.ndarray, ...]) -> dist.Masks:
    return dist.Masks(*(jnp.asarray(m) for m in masks))


def torch_tensors(arrays, device: torch.device):
    return tuple(torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in arrays)


def random_obs(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape + (OBS_DIM,)).astype(np.float32)


# ------------------------------------------------------------------------------------------
# rollouts
# ------------------------------------------------------------------------------------------


def collect_rollout(pair: ControllerPair, n_envs: int, seed: int, n_steps: int = EPISODE_LENGTH) -> dict:
    """One full episode batch `[E, T]` acted by the JAX policy, as numpy arrays (done + truncated at T)."""
    rng = np.random.default_rng(seed)
    obs = random_obs(rng, n_envs, n_steps)
    masks = default_masks(n_envs)
    masks_j = jax_masks(masks)
    carry = pair.network.initial_carry(n_envs)
    key = jax.random.PRNGKey(seed)
    actions, log_probs, values = [], [], []
    for t in range(n_steps):
        out = ppo.act(pair.state, jnp.asarray(obs[:, t]), masks_j, carry, jax.random.fold_in(key, t))
        carry = out.carry
        actions.append(np.asarray(out.actions))
        log_probs.append(np.asarray(out.log_probs))
        values.append(np.asarray(out.value))
    last = np.zeros((n_envs, n_steps), bool)
    last[:, -1] = True
    bootstrap = np.zeros((n_envs, n_steps), np.float32)
    bootstrap[:, -1] = rng.standard_normal(n_envs)
    return {
        "obs": obs,
        "actions": np.stack(actions, 1).astype(np.int32),
        "log_probs": np.stack(log_probs, 1).astype(np.float32),
        "values": np.stack(values, 1).astype(np.float32),
        "rewards": rng.standard_normal((n_envs, n_steps)).astype(np.float32),
        "dones": last,
        "truncated": last.copy(),
        "bootstrap": bootstrap,
        "masks": tuple(np.repeat(m[:, None], n_steps, axis=1) for m in masks),
    }


def jax_rollout(data: dict, hidden_dim: int = PPOConfig.lstm_hidden_dim) -> rollout_lib.Rollout:
    """The numpy episode batch as a full `rl.rollout.Rollout` (every step valid, zero initial carry)."""
    n_envs, n_steps = data["rewards"].shape
    empty = rollout_lib.init(n_envs, n_steps, OBS_DIM, NUM_SLOTS, NUM_BLUEPRINTS, hidden_dim)
    fields = {name: jnp.asarray(data[name]) for name in
              ("obs", "actions", "log_probs", "values", "rewards", "dones", "truncated", "bootstrap")}
    return empty.replace(
        **fields,
        raw_obs=jnp.asarray(data["obs"]),
        raw_rewards=jnp.asarray(data["rewards"]),
        masks=jax_masks(data["masks"]),
        step_count=jnp.full((n_envs,), n_steps, jnp.int32),
    )


def torch_rollout(data: dict, device: torch.device) -> T.TorchRollout:
    """The same episode batch for the reference (actions as int64 for `gather`)."""
    as_t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    return T.TorchRollout(
        obs=as_t(data["obs"]),
        actions=as_t(data["actions"].astype(np.int64)),
        log_probs=as_t(data["log_probs"]),
        values=as_t(data["values"]),
        rewards=as_t(data["rewards"]),
        dones=as_t(data["dones"]),
        truncated=as_t(data["truncated"]),
        bootstrap=as_t(data["bootstrap"]),
        masks=tuple(as_t(m) for m in data["masks"]),
        valid=torch.ones(data["rewards"].shape, dtype=torch.bool, device=device),
    )


def block(tree: Any) -> Any:
    return jax.block_until_ready(tree)
