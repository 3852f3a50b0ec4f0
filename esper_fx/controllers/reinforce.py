"""The `reinforce` controller bundle: rl.reinforce (REINFORCE with a learned baseline) behind the controller protocol.

Written as a user writes a learning controller: a constructor `spec -> Controller` whose functions are pure JAX —
`init` (the state: parameters and optimiser), `act` (sampling; its aux carries the per-head log-probs and the
value the loop stores in the rollout), `greedy_act` (every head's argmax: evaluation), `value` (the bootstrap),
`update` (one step on the batch's rollout) — with `learns=True`; its settings are `config.reinforce`
(`rl.config.ReinforceConfig`) and the run's `config.learner` (its γ). It shares the action heads, masks and
sampling with every other policy and nothing with PPO.
"""

from __future__ import annotations

from esper_fx.controllers.protocol import Controller, ControllerSpec
from rl import reinforce
from rl.distributions import Masks


def build_reinforce(spec: ControllerSpec) -> Controller:
    cfg = spec.config.reinforce
    network = reinforce.make_network(spec.num_slots, spec.num_blueprints, cfg)

    def init(key, _spec=None) -> reinforce.ReinforceState:
        return reinforce.init_state(key, network, spec.obs_dim, cfg)

    def act(state, carry, signals, key, deterministic: bool = False):
        actions, log_probs, value, ok = reinforce.act(state, signals["obs_norm"], Masks.from_signals(signals), key,
                                                      signals.get("mask_slot_op"), deterministic)
        return actions, {"log_probs": log_probs, "value": value, "ok": ok}, carry

    def greedy_act(state, carry, signals, key):
        return act(state, carry, signals, key, deterministic=True)

    def value(state, carry, signals):
        return reinforce.value(state, signals["obs_norm"])

    def update(state, rollout, key):
        return reinforce.update(state, rollout, cfg, spec.config.learner)

    return Controller(name="reinforce", act=act, greedy_act=greedy_act, init=init, value=value, update=update,
                      learns=True)
