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

    def act(state, carry, signals, key, deterministic: bool = False):
        out = ppo.act(state, signals["obs_norm"], Masks.from_signals(signals), carry, key,
                      deterministic=deterministic, slot_by_op=signals.get("mask_slot_op"))
        return out.actions, {"log_probs": out.log_probs, "value": out.value, "ok": out.ok}, out.carry

    def greedy_act(state, carry, signals, key):
        """The argmax of every head within its mask (evaluation, `protocol.frozen`)."""
        return act(state, carry, signals, key, deterministic=True)

    def value(state, carry, signals):
        return ppo.value(state, signals["obs_norm"], carry)

    def update(state, rollout, key):
        return ppo.update(state, rollout, key, cfg, spec.n_envs, spec.config.learner)

    name = "ppo_lstm" if recurrent else "ppo_mlp"
    return Controller(name=name, act=act, init=init, initial_carry=initial_carry, value=value,
                      update=update, learns=True, greedy_act=greedy_act)


def build_ppo_lstm(spec: ControllerSpec) -> Controller:
    return build_ppo(spec, recurrent=True)


def build_ppo_mlp(spec: ControllerSpec) -> Controller:
    return build_ppo(spec, recurrent=False)

