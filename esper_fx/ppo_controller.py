"""The `ppo_lstm` and `ppo_mlp` controller bundles: rl.ppo behind the controller protocol (SPEC §10–§11)."""

from __future__ import annotations

from esper_fx import contracts as C
from esper_fx.controllers import Controller, ControllerSpec
from rl import ppo
from rl.distributions import Masks
from rl.network import ActorCritic


def signal_masks(signals) -> Masks:
    return Masks(*(signals[f"mask_{head}"] for head in C.ACTION_HEADS))


def build_ppo(spec: ControllerSpec, recurrent: bool = True) -> Controller:
    cfg = ppo.PPOConfig.from_training_config(spec.config)
    network = ActorCritic(num_slots=spec.num_slots, num_blueprints=spec.num_blueprints,
                          recurrent=recurrent, hidden_dim=spec.config.lstm_hidden_dim)

    def init(key, _spec=None) -> ppo.TrainState:
        return ppo.init_train_state(key, network, spec.obs_dim, cfg)

    def initial_carry(n_envs: int):
        return network.initial_carry(n_envs)

    def act(state, carry, signals, key):
        out = ppo.act(state, signals["obs_norm"], signal_masks(signals), carry, key)
        return out.actions, {"log_probs": out.log_probs, "value": out.value, "ok": out.ok}, out.carry

    def value(state, carry, signals):
        return ppo.value(state, signals["obs_norm"], carry)

    def update(state, rollout, key):
        return ppo.update(state, rollout, key, cfg)

    name = "ppo_lstm" if recurrent else "ppo_mlp"
    return Controller(name=name, act=act, init=init, initial_carry=initial_carry, value=value,
                      update=update, learns=True)
