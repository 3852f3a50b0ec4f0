"""The controller registry: each built-in name loads its constructor from the module a reader can follow,
on first use and once; a registered constructor replaces a built-in one; aliases resolve."""

import pytest

from esper_fx.controllers import registry
from esper_fx.controllers.baselines import build_oracle, build_random, build_static_final, build_wait
from esper_fx.controllers.heuristic import build_heuristic
from esper_fx.controllers.ppo import build_ppo_lstm, build_ppo_mlp


def fresh() -> registry.ControllerRegistry:
    return registry.ControllerRegistry(registry.BUILT_IN, registry.ALIASES)


def test_every_built_in_name_loads_its_constructor():
    reg = fresh()
    expected = {"ppo_lstm": build_ppo_lstm, "ppo_mlp": build_ppo_mlp, "heuristic": build_heuristic,
                "random": build_random, "wait": build_wait, "oracle": build_oracle,
                "static_final": build_static_final}
    assert reg.names() == sorted(expected)
    assert {name: reg.get(name) for name in expected} == expected
    assert reg.get("ppo") is build_ppo_lstm and reg.canonical("ppo") == "ppo_lstm"


def test_a_loader_runs_once_and_a_registered_constructor_replaces_a_built_in_one():
    calls = []

    def loader():
        calls.append(1)
        return build_wait

    reg = registry.ControllerRegistry({"wait": loader}, {})
    assert reg.get("wait") is reg.get("wait") is build_wait and calls == [1]
    reg.register("wait", build_random)
    assert reg.get("wait") is build_random and reg.names() == ["wait"]
    with pytest.raises(ValueError, match="already registered"):
        reg.register("wait", build_oracle, overwrite=False)
    with pytest.raises(ValueError, match="controller must be one of"):
        reg.get("nope")
