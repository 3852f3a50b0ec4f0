"""Controllers as bundles of pure JAX functions (ARCHITECTURE §3); `controllers/registry.py` names them.

A controller bundle has five functions over pytrees, and a learning one a sixth:

    init(key, spec)                      -> state
    initial_carry(n_envs)                -> carry        (LSTM state, heuristic decision state, or ())
    act(state, carry, signals, key)      -> (actions [E, 5] int32, aux, new_carry)
    value(state, carry, signals)         -> [E] float32  (bootstrap at truncation)
    update(state, rollout, key)          -> (new_state, metrics)
    greedy_act(state, carry, signals, key) -> like act    (acting without exploration: evaluation)

`signals` is the host's signals pytree (esper_fx.contracts.signals.SIGNAL_FIELDS) as jax arrays, plus
"obs_norm": the observation normalised with the run's frozen statistics. `aux` carries per-head
log-probs [E, 5] ("log_probs") and values [E] ("value") for learning controllers, and may carry "ok" [E]
(bool: the policy had a valid action and finite logits for every head). `greedy_act` is how a trained
controller is evaluated (`frozen`); it defaults to `act`, which is right for a controller that does not
sample, and a learning controller that samples declares its own (PPO's takes every head's argmax within its
mask). `frozen(bundle)` turns any learning controller into the one evaluation plays: it acts (greedily, or
sampling as in training) and never learns.

The registry (`esper_fx.controllers.registry`; its names in `esper_fx/controller_names.py`, which the configuration
reads without jax) maps names to constructors `constructor(spec) -> Controller`; `get(name)` returns the
constructor, `build(name_or_bundle, spec)` a ready bundle, `register(name, constructor)` adds one. The built-in
bundles: `wait` and `random` (baselines), `oracle` (a fixed growth schedule) and `static_final` (a static
architecture) in `esper_fx.controllers.baselines`, `ppo_lstm` / `ppo_mlp` in `esper_fx.controllers.ppo`, `heuristic` in
`esper_fx.controllers.heuristic`, `reinforce` (REINFORCE with a learned baseline, written as a user writes a
learning controller) in `esper_fx.controllers.reinforce`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from esper_fx.contracts.actions import head_sizes
from esper_fx.config import TrainingConfig


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
        return head_sizes(self.num_slots, self.num_blueprints)


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
    """A bundle of pure functions; `learns` says whether the loop keeps a rollout and calls update;
    `greedy_act` (same signature as `act`; None: `act` itself) is how it acts when evaluated greedily."""

    name: str
    act: Callable[..., tuple[jax.Array, Any, Any]]
    init: Callable[[jax.Array, ControllerSpec], Any] = _no_state
    initial_carry: Callable[[int], Any] = _empty_carry
    value: Callable[..., jax.Array] = _no_value
    update: Callable[..., tuple[Any, dict]] = _no_update
    learns: bool = False
    greedy_act: Callable[..., tuple[jax.Array, Any, Any]] | None = None

    @property
    def act_greedily(self) -> Callable[..., tuple[jax.Array, Any, Any]]:
        """`greedy_act`, or `act` for a controller that declares none."""
        return self.act if self.greedy_act is None else self.greedy_act


def frozen(bundle: Controller, *, greedy: bool = True) -> Controller:
    """A trained learning controller as evaluation plays it: it acts but never learns (no rollout, no
    update), with `bundle.act_greedily` (greedy) or `bundle.act` (sampling, as in training). The name says
    which (`<name>_greedy`, `<name>_sampled`), so the two never share an action stream."""
    if not bundle.learns:
        raise ValueError(f"controller {bundle.name!r} does not learn: there is nothing to freeze")
    suffix = "greedy" if greedy else "sampled"
    return Controller(name=f"{bundle.name}_{suffix}", act=bundle.act_greedily if greedy else bundle.act,
                      init=bundle.init, initial_carry=bundle.initial_carry, value=bundle.value, learns=False)


def make_controller(act: Callable, init: Callable | None = None, name: str = "custom") -> Controller:
    """A non-learning controller from one or two pure functions.

    `act(state, carry, signals, key)` may return just the actions [E, 5], or the full
    `(actions, aux, new_carry)` triple; `init(key, spec)` builds its (static) state.
    """

    def full_act(state, carry, signals, key):
        out = act(state, carry, signals, key)
        if isinstance(out, tuple) and len(out) == 3:
            return out
        return jnp.asarray(out, jnp.int32), {}, carry

    return Controller(name=name, act=full_act, init=init or _no_state)

