"""Controllers as bundles of pure JAX functions, and the registry that names them (ARCHITECTURE §3).

A controller bundle has five functions over pytrees:

    init(key, spec)                      -> state
    initial_carry(n_envs)                -> carry        (LSTM state, heuristic decision state, or ())
    act(state, carry, signals, key)      -> (actions [E, 4] int32, aux, new_carry)
    value(state, carry, signals)         -> [E] float32  (bootstrap at truncation)
    update(state, rollout, key)          -> (new_state, metrics)

`signals` is the host's signals pytree (esper_fx.contracts.SIGNAL_FIELDS) as jax arrays, plus
"obs_norm": the observation normalised with the run's frozen statistics. `aux` carries per-head
log-probs [E, 4] ("log_probs") and values [E] ("value") for learning controllers.

The registry (`esper_fx.controller_registry`, jax-free so the configuration can check names) maps names
to constructors `constructor(spec) -> Controller`; `get(name)` returns the constructor,
`build(name_or_bundle, spec)` a ready bundle, `register(name, constructor)` adds one. The built-in
bundles: `wait` and `random` (baselines), `oracle` (a fixed growth schedule) and `static_final` (a static
architecture) here, `ppo_lstm` / `ppo_mlp` in `esper_fx.ppo_controller`, `heuristic` in
`esper_fx.heuristic_controller`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from esper_fx import contracts
from esper_fx.config import TrainingConfig
from esper_fx.controller_registry import REGISTRY, Constructor
from rl.config import MASKED_LOGIT


class ControllerSpec(NamedTuple):
    """Static facts a controller is built for (hashable, so it can close over jitted functions)."""

    obs_dim: int
    num_slots: int
    num_blueprints: int
    n_envs: int
    max_epochs: int
    topology: str
    menu: tuple[str, ...]
    config: TrainingConfig

    @classmethod
    def from_config(cls, config: TrainingConfig) -> "ControllerSpec":
        return cls(
            obs_dim=config.state_dim, num_slots=config.num_slots, num_blueprints=config.num_blueprints,
            n_envs=config.n_envs, max_epochs=config.max_epochs, topology=config.topology,
            menu=config.menu, config=config,
        )

    @property
    def head_sizes(self) -> tuple[int, int, int, int]:
        return contracts.head_sizes(self.num_slots, self.num_blueprints)


def _no_update(state, rollout, key):
    return state, {}


def _no_value(state, carry, signals):
    return jnp.zeros(signals["obs"].shape[0], jnp.float32)


def _empty_carry(n_envs: int):
    return ()


def _no_state(key, spec):
    return ()


@dataclass(frozen=True)
class Controller:
    """A bundle of pure functions; `learns` says whether the loop keeps a rollout and calls update."""

    name: str
    act: Callable[..., tuple[jax.Array, Any, Any]]
    init: Callable[[jax.Array, ControllerSpec], Any] = _no_state
    initial_carry: Callable[[int], Any] = _empty_carry
    value: Callable[..., jax.Array] = _no_value
    update: Callable[..., tuple[Any, dict]] = _no_update
    learns: bool = False


def make_controller(act: Callable, init: Callable | None = None, name: str = "custom") -> Controller:
    """A non-learning controller from one or two pure functions.

    `act(state, carry, signals, key)` may return just the actions [E, 4], or the full
    `(actions, aux, new_carry)` triple; `init(key, spec)` builds its (static) state.
    """

    def full_act(state, carry, signals, key):
        out = act(state, carry, signals, key)
        if isinstance(out, tuple) and len(out) == 3:
            return out
        return jnp.asarray(out, jnp.int32), {}, carry

    return Controller(name=name, act=full_act, init=init or _no_state)


# ----------------------------------------------------------------------------------------------
# Baselines: wait and random
# ----------------------------------------------------------------------------------------------


def first_true(mask: jax.Array) -> jax.Array:
    """Index of the first True entry along the last axis (0 if none)."""
    return jnp.argmax(mask, axis=-1).astype(jnp.int32)


def wait_actions(signals) -> jax.Array:
    """Op WAIT on the first enabled slot; blueprint 1 and blend 0 (irrelevant for WAIT)."""
    slot = first_true(signals["mask_slot"])
    ones = jnp.ones_like(slot)
    return jnp.stack([slot, ones, jnp.zeros_like(slot), jnp.full_like(slot, int(contracts.LifecycleOp.WAIT))], -1)


def uniform_masked_sample(key: jax.Array, mask: jax.Array) -> jax.Array:
    """One uniform draw per row over the True entries of `mask` [E, n]."""
    logits = jnp.where(mask, 0.0, MASKED_LOGIT)
    return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


def random_actions(signals, key: jax.Array) -> jax.Array:
    """Uniform over the allowed entries of each head; the op first, then the slot among those the op can act
    on (`mask_slot_op`, when the signals carry it)."""
    keys = jax.random.split(key, len(contracts.ACTION_HEADS))
    heads = {h: uniform_masked_sample(k, signals[f"mask_{h}"]) for k, h in zip(keys, contracts.ACTION_HEADS)}
    if "mask_slot_op" in signals:
        by_op = jnp.take_along_axis(signals["mask_slot_op"], heads["op"][:, None, None], axis=1)[:, 0]
        heads["slot"] = uniform_masked_sample(keys[contracts.HEAD_SLOT], by_op)
    return jnp.stack([heads[h] for h in contracts.ACTION_HEADS], axis=-1)


def build_wait(spec: ControllerSpec) -> Controller:
    return Controller(name="wait", act=lambda state, carry, signals, key: (wait_actions(signals), {}, carry))


def build_random(spec: ControllerSpec) -> Controller:
    return Controller(
        name="random", act=lambda state, carry, signals, key: (random_actions(signals, key), {}, carry)
    )


# ----------------------------------------------------------------------------------------------
# Controls: a fixed growth schedule, and a static architecture
# ----------------------------------------------------------------------------------------------


def oracle_actions(signals, slot: int, blueprint: int, blend: int, germinate_epoch: int) -> jax.Array:
    """GERMINATE (slot, blueprint, blend) at `germinate_epoch` into an empty slot; FOSSILIZE that slot whenever
    it holds a PROBATIONARY seed; WAIT otherwise. Never CULL. Indices are head indices."""
    epoch = jnp.asarray(signals["epoch"])
    empty = ~jnp.asarray(signals["slot_occupied"])[:, slot]
    stage = jnp.asarray(signals["slot_stage"])[:, slot]
    germinate = (epoch == germinate_epoch) & empty & signals["mask_op"][:, int(contracts.LifecycleOp.GERMINATE)]
    fossilize = (stage == int(contracts.SeedStage.PROBATIONARY)) & signals["mask_op"][:, int(contracts.LifecycleOp.FOSSILIZE)]
    op = jnp.where(germinate, int(contracts.LifecycleOp.GERMINATE),
                   jnp.where(fossilize, int(contracts.LifecycleOp.FOSSILIZE), int(contracts.LifecycleOp.WAIT)))
    column = lambda v: jnp.full_like(epoch, v)  # noqa: E731
    return jnp.stack([column(slot), column(blueprint), column(blend), op], -1).astype(jnp.int32)


def build_oracle(spec: ControllerSpec) -> Controller:
    """`oracle`: the schedule of `config.oracle` (slot, blueprint, blend, germinate_epoch)."""
    cfg, config = spec.config.oracle, spec.config
    cfg.check_against(config.enabled_slots, spec.menu, spec.max_epochs)
    indices = (config.slot_ids.index(cfg.slot), spec.menu.index(cfg.blueprint), contracts.BLEND_NAMES.index(cfg.blend),
               cfg.germinate_epoch)
    return Controller(name="oracle",
                      act=lambda state, carry, signals, key: (oracle_actions(signals, *indices), {}, carry))


def build_static_final(spec: ControllerSpec) -> Controller:
    """`static_final`: never acts; the architecture comes from `config.static_seeds`, planted fossilized
    before epoch 1 (the grown architecture of a run, trained from scratch as a static network)."""
    return Controller(name="static_final",
                      act=lambda state, carry, signals, key: (wait_actions(signals), {}, carry))


# ----------------------------------------------------------------------------------------------
# The registry's public face
# ----------------------------------------------------------------------------------------------


def get(name: str) -> Constructor:
    """The constructor registered under `name` (`ppo` is an alias of `ppo_lstm`)."""
    return REGISTRY.get(name)


def register(name: str, constructor: Constructor | Controller) -> None:
    """Register a constructor `spec -> Controller` (or a ready Controller bundle) under `name`."""
    if isinstance(constructor, Controller):
        bundle = constructor
        constructor = lambda spec, _b=bundle: _b  # noqa: E731 - a ready bundle ignores the spec
    REGISTRY.register(name, constructor)


def names() -> list[str]:
    return REGISTRY.names()


def build(controller: str | Controller | Constructor, spec: ControllerSpec) -> Controller:
    """Resolve a name, a constructor or a bundle into a ready Controller for `spec`."""
    if isinstance(controller, Controller):
        return controller
    if isinstance(controller, str):
        return get(controller)(spec)
    if callable(controller):
        bundle = controller(spec)
        if not isinstance(bundle, Controller):
            raise TypeError(f"controller constructor returned {type(bundle).__name__}, expected Controller")
        return bundle
    raise TypeError(f"controller must be a name, a Controller or a constructor (got {controller!r})")
