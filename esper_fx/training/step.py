"""The jitted controller step of one epoch, and the random streams of a run (BEHAVIOUR §7.3 step 9, §7.5).

Everything one episode batch carries from epoch to epoch is one pytree, `EpisodeState`: the
controller's carry, the reward normaliser, the reward state, the rollout, the running reward sum and
which envs the governor rolled back (their `panic` signal, the one field that carries a rollback).
`make_step` builds the one jitted function of an epoch:

    episode, out = step(episode, controller_state, obs_rms, packed_signals, root_key, clock)

unpack the signals (one [E, W] buffer per dtype, `contracts.signals.unpack_signals`) -> derive the epoch's key
from (root key, controller name, b, t) -> normalise the observation with the frozen statistics -> act ->
reward -> normalise the reward -> append to the rollout (learning controllers only). `clock` is the int32
pair (b, t), t = 1..T, the step's only per-epoch input besides the signals; `out.decision` packs the
actions and the validity flags into one [E, 6] array, the one thing the loop reads back. `make_bootstrap`
values the post-action signals of the last epoch; `make_new_episode` builds an episode's starting state in
one call. Every random stream of batch b derives from (root key, b) — the action stream also from the
controller's name — so a resumed run repeats the uninterrupted one.
"""

from __future__ import annotations

import zlib
from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp

from esper_fx.contracts.actions import HEAD_OP
from esper_fx.contracts.signals import SignalColumn, unpack_signals
from rl import rollout as rollout_lib
from rl import distributions as dist
from rl.distributions import Masks
from rl.normalize import RewardNormalizer, RunningMeanStd
from rl.rewards import RewardState

INIT_STREAM = 0x5EED  # the controller's init key: fold_in(root key, INIT_STREAM)
UPDATE_STREAM = 1_000_003  # batch b's update key: fold_in(fold_in(root key, UPDATE_STREAM), b)


def init_key(root_key: jax.Array) -> jax.Array:
    return jax.random.fold_in(root_key, INIT_STREAM)


def arm_stream(name: str) -> int:
    """A stable 31-bit number for a controller's name: its action noise stream."""
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF


def act_key(root_key: jax.Array, name: str, batch_idx: int | jax.Array, epoch: int | jax.Array) -> jax.Array:
    """The action key of epoch `epoch` (1..T) of batch `batch_idx` for the controller called `name`; the
    indices are python ints or int32 scalars (inside the jitted step). Two controllers under one run seed
    never share action noise (LEARNING.md §3: paired arms, independent streams)."""
    arm = jax.random.fold_in(root_key, arm_stream(name))
    return jax.random.fold_in(jax.random.fold_in(arm, batch_idx), epoch)


def update_key(root_key: jax.Array, batch_idx: int) -> jax.Array:
    return jax.random.fold_in(jax.random.fold_in(root_key, UPDATE_STREAM), batch_idx)


class EpisodeState(NamedTuple):
    """What one episode batch carries from epoch to epoch (E envs)."""

    carry: Any  # the controller's carry: (h, c) for the LSTM, heuristic state, or ()
    reward_norm: RewardNormalizer  # persists across batches: the loop takes it back after the batch
    reward_state: RewardState  # PBRS memory [E, S]
    rollout: Any  # rl.rollout.Rollout [E, T, ...] for a learning controller, else ()
    reward_sum: jax.Array  # [E] raw reward summed over the epochs so far
    rolled_back: jax.Array  # [E] bool: the `panic` signal of some epoch so far was set (the governor rolled back)


class StepOut(NamedTuple):
    """What one epoch's step produced besides the new episode state."""

    actions: jax.Array  # [E, 5] int32
    reward: jax.Array  # [E] raw
    components: dict  # reward term -> [E]
    ok: jax.Array  # [E] bool: the policy had a valid action and finite logits for every head
    decision: jax.Array  # [E, 6] int32: the actions, then ok as 0 / 1 (read back once per epoch)


def new_episode(controller: Any, spec: Any, reward_norm: RewardNormalizer, n_envs: int) -> EpisodeState:
    """A fresh episode batch of `n_envs` envs; the reward normaliser carries over from the last batch."""
    carry = controller.initial_carry(n_envs)
    rollout = _new_rollout(spec, carry, n_envs) if controller.learns else ()
    return EpisodeState(carry, reward_norm, RewardState.init(n_envs, spec.num_slots), rollout,
                        jnp.zeros((n_envs,), jnp.float32), jnp.zeros((n_envs,), bool))


def make_new_episode(controller: Any, spec: Any) -> Callable:
    """`new_episode` jitted for a run: `fn(reward_norm, n_envs)` builds every array in one call (one
    compilation per env count, or one load from the persistent cache, instead of one per array)."""
    return jax.jit(lambda reward_norm, n_envs: new_episode(controller, spec, reward_norm, n_envs),
                   static_argnums=1)


def _new_rollout(spec: Any, carry: Any, n_envs: int) -> rollout_lib.Rollout:
    leaves = jax.tree_util.tree_leaves(carry)
    hidden = leaves[0].shape[-1] if leaves else None
    return rollout_lib.init(n_envs, spec.max_epochs, spec.obs_dim, spec.num_slots, spec.num_blueprints,
                            hidden_dim=hidden)


def make_step(controller: Any, reward_fn: Callable, reward_config: Any, columns: Mapping[str, SignalColumn],
              max_epochs: int, horizon_bootstrap: bool = False) -> Callable:
    """unpack -> key -> normalise -> act -> reward -> normalise the reward -> append; one jitted function
    per run. `columns` is the packing of the signals, `max_epochs` the episode length T. The last epoch's
    transition is terminal, or with `horizon_bootstrap` a truncation whose bootstrap value the loop sets
    after the lifecycle step (`with_bootstrap`)."""

    def step(episode: EpisodeState, cstate: Any, obs_rms: RunningMeanStd, packed: dict, root_key: jax.Array,
             clock: jax.Array) -> tuple[EpisodeState, StepOut]:
        signals = unpack_signals(packed, columns)
        key = act_key(root_key, controller.name, clock[0], clock[1])
        t, is_last = clock[1] - 1, clock[1] == max_epochs
        obs_norm = obs_rms.normalize(signals["obs"])
        actions, aux, carry = controller.act(cstate, episode.carry, {**signals, "obs_norm": obs_norm}, key)
        actions = actions.astype(jnp.int32)
        reward, components, reward_state = reward_fn(signals, actions, episode.reward_state, reward_config)
        reward_norm, rollout = episode.reward_norm, episode.rollout
        if controller.learns:
            reward_norm, reward_n = reward_norm.update_and_normalize(reward)
            transition = _transition(signals, obs_norm, actions, aux, reward, reward_n, episode.carry, is_last,
                                     horizon_bootstrap)
            rollout = rollout_lib.append(rollout, t, transition)
        ok = aux.get("ok", jnp.ones(actions.shape[:1], bool)) if isinstance(aux, dict) else \
            jnp.ones(actions.shape[:1], bool)
        new = EpisodeState(carry, reward_norm, reward_state, rollout, episode.reward_sum + reward,
                           episode.rolled_back | signals["panic"])
        decision = jnp.concatenate([actions, ok[:, None].astype(jnp.int32)], axis=1)
        return new, StepOut(actions, reward, components, ok, decision)

    return jax.jit(step)


def _transition(signals: dict, obs_norm: jax.Array, actions: jax.Array, aux: dict, reward: jax.Array,
                reward_n: jax.Array, carry: Any, is_last: jax.Array, horizon_bootstrap: bool) -> rollout_lib.StepData:
    """One epoch's row of the rollout; the last epoch is done, and truncated (bootstrap set later) only with
    `horizon_bootstrap`."""
    flags = jnp.full(reward.shape, is_last)
    truncated = flags if horizon_bootstrap else jnp.zeros_like(flags)
    return rollout_lib.StepData(
        obs=obs_norm, raw_obs=signals["obs"], actions=actions, log_probs=aux["log_probs"], values=aux["value"],
        rewards=reward_n, raw_rewards=reward, dones=flags, truncated=truncated, bootstrap=jnp.zeros_like(reward),
        masks=_masks_used(signals, actions), carry=carry,
    )


def _masks_used(signals: dict, actions: jax.Array) -> Masks:
    """The masks the actions were drawn under: the signals' head masks, the slot's narrowed to the slots the
    taken op can act on (`mask_slot_op`) — a learning controller draws the op first whenever the signals
    carry it (`dist.sample_heads_op_first`), so the mask follows from the signals and the op."""
    masks = Masks.from_signals(signals)
    if "mask_slot_op" not in signals:
        return masks
    return dist.condition_slot(masks, signals["mask_slot_op"], actions[..., HEAD_OP])


def make_bootstrap(controller: Any, columns: Mapping[str, SignalColumn]) -> Callable:
    """V(post-action signals of the last epoch) `[E]`, from the carry after the last step; the signals
    arrive packed like the step's."""

    def bootstrap(cstate: Any, carry: Any, obs_rms: RunningMeanStd, packed: dict) -> jax.Array:
        signals = unpack_signals(packed, columns)
        return controller.value(cstate, carry, {**signals, "obs_norm": obs_rms.normalize(signals["obs"])})

    return jax.jit(bootstrap)


def with_bootstrap(episode: EpisodeState, values: jax.Array) -> EpisodeState:
    """The rollout's bootstrap at the last step set to `values` (the truncation of BEHAVIOUR §7.5)."""
    rollout = episode.rollout
    last = rollout.max_steps - 1
    return episode._replace(rollout=rollout.replace(bootstrap=rollout.bootstrap.at[:, last].set(values)))
