"""The `ppo_lstm` and `ppo_mlp` controller bundles: rl.ppo behind the controller protocol (BEHAVIOUR §10–§11)."""

from __future__ import annotations

from esper_fx.controllers.protocol import Controller, ControllerSpec
from rl import ppo
from rl.distributions import Masks
from rl.network import ActorCritic


def build_ppo(spec: ControllerSpec, recurrent: bool = True) -> Controller:
    cfg = spec.config.ppo
    network = ActorCritic(num_slots=spec.num_slots, num_blueprints=spec.num_blueprints,
                          recurrent=recurrent, hidden_dim=cfg.lstm_hidden_dim)

    def init(key, _spec=None) -> ppo.TrainState:
        return ppo.init_train_state(key, network, spec.obs_dim, cfg)

    def initial_carry(n_envs: int):
        return network.initial_carry(n_envs)

    def act(state, carry, signals, key):
        out = ppo.act(state, signals["obs_norm"], Masks.from_signals(signals), carry, key,
                      slot_by_op=signals.get("mask_slot_op"))
        return out.actions, {"log_probs": out.log_probs, "value": out.value, "ok": out.ok}, out.carry

    def value(state, carry, signals):
        return ppo.value(state, signals["obs_norm"], carry)

    def update(state, rollout, key):
        return ppo.update(state, rollout, key, cfg, spec.n_envs)

    name = "ppo_lstm" if recurrent else "ppo_mlp"
    return Controller(name=name, act=act, init=init, initial_carry=initial_carry, value=value,
                      update=update, learns=True)


def build_ppo_lstm(spec: ControllerSpec) -> Controller:
    return build_ppo(spec, recurrent=True)


def build_ppo_mlp(spec: ControllerSpec) -> Controller:
    return build_ppo(spec, recurrent=False)


def frozen(bundle: Controller, *, greedy: bool = True) -> Controller:
    """A trained PPO bundle for evaluation: it acts but never learns (no rollout, no update). Greedy takes
    the argmax of every head within its mask; otherwise it samples, as in training. The name says which,
    so the two never share an action stream."""
    if not bundle.learns:
        raise ValueError(f"controller {bundle.name!r} does not learn: there is nothing to freeze")

    def act(state, carry, signals, key):
        out = ppo.act(state, signals["obs_norm"], Masks.from_signals(signals), carry, key, deterministic=greedy,
                      slot_by_op=signals.get("mask_slot_op"))
        return out.actions, {"ok": out.ok}, out.carry

    suffix = "greedy" if greedy else "sampled"
    return Controller(name=f"{bundle.name}_{suffix}", act=act, init=bundle.init,
                      initial_carry=bundle.initial_carry, value=bundle.value, learns=False)
