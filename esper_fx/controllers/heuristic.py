"""The `heuristic` controller bundle: rl.heuristic.decide behind the controller protocol (BEHAVIOUR §13).

Its carry is the per-env decision state (reset at every episode start); it never learns, ignores
masks and max_seeds as the reference does, and always germinates into an empty enabled slot.
"""

from __future__ import annotations

from esper_fx.controllers.protocol import Controller, ControllerSpec
from rl import heuristic


def build_heuristic(spec: ControllerSpec) -> Controller:
    params = heuristic.HeuristicParams.from_training_config(spec.config)

    def initial_carry(n_envs: int) -> heuristic.HeuristicState:
        return heuristic.init_state(n_envs, spec.num_blueprints)

    def act(state, carry, signals, key):
        actions, new_carry = heuristic.decide(carry, signals, params)
        return actions, {}, new_carry

    return Controller(name="heuristic", act=act, initial_carry=initial_carry)
