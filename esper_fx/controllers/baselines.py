"""The built-in controllers that do not learn: the baselines `wait` and `random`, and the controls `oracle`
(a fixed growth schedule) and `static_final` (a static architecture)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from esper_fx.contracts.actions import (ACTION_HEADS, BLEND_NAMES, DEFAULT_TEMPO, HEAD_OP, HEAD_SLOT, TEMPO_NAMES,
                                       LifecycleOp)
from esper_fx.contracts.stages import SeedStage
from esper_fx.controllers.protocol import Controller, ControllerSpec
from rl.config import MASKED_LOGIT


# ----------------------------------------------------------------------------------------------
# Baselines: wait and random
# ----------------------------------------------------------------------------------------------


def first_true(mask: jax.Array) -> jax.Array:
    """Index of the first True entry along the last axis (0 if none)."""
    return jnp.argmax(mask, axis=-1).astype(jnp.int32)


def wait_actions(signals) -> jax.Array:
    """Op WAIT on the first enabled slot; blueprint 1, blend 0 and the standard tempo (irrelevant for WAIT)."""
    slot = first_true(signals["mask_slot"])
    ones = jnp.ones_like(slot)
    return jnp.stack([slot, ones, jnp.zeros_like(slot), jnp.full_like(slot, int(LifecycleOp.WAIT)),
                      jnp.full_like(slot, DEFAULT_TEMPO)], -1)


def uniform_masked_sample(key: jax.Array, mask: jax.Array) -> jax.Array:
    """One uniform draw per row over the True entries of `mask` [E, n]."""
    logits = jnp.where(mask, 0.0, MASKED_LOGIT)
    return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


def random_actions(signals, key: jax.Array) -> jax.Array:
    """Uniform over the allowed entries of each head; the op first, then the slot among those the op can act
    on (`mask_slot_op`, when the signals carry it)."""
    keys = jax.random.split(key, len(ACTION_HEADS))
    heads = {h: uniform_masked_sample(k, signals[f"mask_{h}"]) for k, h in zip(keys, ACTION_HEADS)}
    if "mask_slot_op" in signals:
        by_op = jnp.take_along_axis(signals["mask_slot_op"], heads["op"][:, None, None], axis=1)[:, 0]
        heads["slot"] = uniform_masked_sample(keys[HEAD_SLOT], by_op)
    return jnp.stack([heads[h] for h in ACTION_HEADS], axis=-1)


def build_wait(spec: ControllerSpec) -> Controller:
    return Controller(name="wait", act=lambda state, carry, signals, key: (wait_actions(signals), {}, carry))


def build_random(spec: ControllerSpec) -> Controller:
    return Controller(
        name="random", act=lambda state, carry, signals, key: (random_actions(signals, key), {}, carry)
    )


# ----------------------------------------------------------------------------------------------
# Controls: a fixed growth schedule, and a static architecture
# ----------------------------------------------------------------------------------------------


def oracle_actions(signals, slot: int, blueprint: int, blend: int, germinate_epoch: int,
                   tempo: int = DEFAULT_TEMPO) -> jax.Array:
    """GERMINATE (slot, blueprint, blend, tempo) at `germinate_epoch` into an empty slot; FOSSILIZE that slot
    whenever it holds a PROBATIONARY seed; WAIT otherwise. Never CULL. Indices are head indices."""
    epoch = jnp.asarray(signals["epoch"])
    empty = ~jnp.asarray(signals["slot_occupied"])[:, slot]
    stage = jnp.asarray(signals["slot_stage"])[:, slot]
    germinate = (epoch == germinate_epoch) & empty & signals["mask_op"][:, int(LifecycleOp.GERMINATE)]
    fossilize = (stage == int(SeedStage.PROBATIONARY)) & signals["mask_op"][:, int(LifecycleOp.FOSSILIZE)]
    op = jnp.where(germinate, int(LifecycleOp.GERMINATE),
                   jnp.where(fossilize, int(LifecycleOp.FOSSILIZE), int(LifecycleOp.WAIT)))
    column = lambda v: jnp.full_like(epoch, v)  # noqa: E731
    return jnp.stack([column(slot), column(blueprint), column(blend), op, column(tempo)], -1).astype(jnp.int32)


def second_seed_germinates(signals, then_slot: int, germinate_epoch: int, done: jax.Array) -> jax.Array:
    """[E] bool: whether the second seed germinates now: once (`done` [E]: it did already), after
    `germinate_epoch`, into `then_slot` while it is empty and the masks allow a germination there."""
    epoch = jnp.asarray(signals["epoch"])
    germinate = int(LifecycleOp.GERMINATE)
    allowed = signals["mask_op"][:, germinate] & ~jnp.asarray(signals["slot_occupied"])[:, then_slot]
    if "mask_slot_op" in signals:
        allowed = allowed & signals["mask_slot_op"][:, germinate, then_slot]
    return (epoch > germinate_epoch) & allowed & ~done


def two_seed_actions(signals, done: jax.Array, first: tuple[int, ...], then_slot: int,
                     then_blueprint: int) -> tuple[jax.Array, jax.Array]:
    """(actions [E, 5], the new `done`): the first seed's schedule as `oracle_actions` plays it (`first`: its
    arguments), and in an epoch where that waits, FOSSILIZE `then_slot` when it holds a PROBATIONARY seed, else
    the second seed's germination (`second_seed_germinates`: `then_blueprint` with the first's blend and tempo).
    An epoch acts once: the first seed's ops come first, then a fossilization, then the second germination
    (under `one_seed_at_a_time`, the default, the second waits for the first's fossil anyway)."""
    slot, _, blend, germinate_epoch, tempo = first
    actions = oracle_actions(signals, *first)
    waits = actions[:, HEAD_OP] == int(LifecycleOp.WAIT)
    stage = jnp.asarray(signals["slot_stage"])[:, then_slot]
    fossilize = waits & (stage == int(SeedStage.PROBATIONARY)) & signals["mask_op"][:, int(LifecycleOp.FOSSILIZE)]
    germinate = waits & ~fossilize & second_seed_germinates(signals, then_slot, germinate_epoch, done)
    column = lambda v: jnp.full_like(actions[:, 0], v)  # noqa: E731
    second = jnp.stack([column(then_slot), column(then_blueprint), column(blend),
                        jnp.where(germinate, int(LifecycleOp.GERMINATE), int(LifecycleOp.FOSSILIZE)),
                        column(tempo)], -1).astype(jnp.int32)
    return jnp.where((fossilize | germinate)[:, None], second, actions), done | germinate


def build_oracle(spec: ControllerSpec) -> Controller:
    """`oracle`: the schedule of `config.oracle` (slot, blueprint, blend, germinate_epoch, tempo; and a second
    seed's `then_slot` and `then_blueprint`, when set: `two_seed_actions`, its carry [E] whether the second
    seed germinated)."""
    cfg, config = spec.config.oracle, spec.config
    cfg.check_against(config.enabled_slots, spec.menu, spec.max_epochs)
    indices = (config.slot_ids.index(cfg.slot), spec.menu.index(cfg.blueprint), BLEND_NAMES.index(cfg.blend),
               cfg.germinate_epoch, TEMPO_NAMES.index(cfg.tempo))
    if not cfg.two_seeds:
        return Controller(name="oracle",
                          act=lambda state, carry, signals, key: (oracle_actions(signals, *indices), {}, carry))
    then = (config.slot_ids.index(cfg.then_slot), spec.menu.index(cfg.then_blueprint))

    def act(state, carry, signals, key):
        actions, done = two_seed_actions(signals, carry, indices, *then)
        return actions, {}, done

    return Controller(name="oracle", act=act, initial_carry=lambda n_envs: jnp.zeros((n_envs,), bool))


def build_static_final(spec: ControllerSpec) -> Controller:
    """`static_final`: never acts; the architecture comes from `config.static_seeds`, planted fossilized
    before epoch 1 (the grown architecture of a run, trained from scratch as a static network)."""
    return Controller(name="static_final",
                      act=lambda state, carry, signals, key: (wait_actions(signals), {}, carry))
