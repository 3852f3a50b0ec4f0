"""The controller registry: each built-in name loads its constructor from the module `esper_fx/controller_names.py`
names, on first use and once; a registered constructor replaces a built-in one and its name is accepted by the
configuration; aliases resolve."""

import pytest

from esper_fx.config import TrainingConfig
from esper_fx import controller_names
from esper_fx.controllers import registry
from esper_fx.controllers.baselines import build_oracle, build_random, build_static_final, build_wait
from esper_fx.controllers.heuristic import build_heuristic
from esper_fx.controllers.ppo import build_ppo_lstm, build_ppo_mlp
from esper_fx.controllers.reinforce import build_reinforce


@pytest.fixture
def fresh(monkeypatch):
    """The registry as a new process has it: the built-in names, nothing loaded or registered yet."""
    monkeypatch.setattr(controller_names.NAMES, "_names", set(controller_names.BUILT_IN))
    monkeypatch.setattr(registry, "_constructors", {})


def test_every_built_in_name_loads_its_constructor(fresh):
    expected = {"ppo_lstm": build_ppo_lstm, "ppo_mlp": build_ppo_mlp, "heuristic": build_heuristic,
                "random": build_random, "wait": build_wait, "oracle": build_oracle,
                "static_final": build_static_final, "reinforce": build_reinforce}
    assert registry.names() == sorted(expected)
    assert {name: registry.get(name) for name in expected} == expected
    assert registry.get("ppo") is build_ppo_lstm and registry.NAMES.canonical("ppo") == "ppo_lstm"


def test_a_constructor_loads_once_and_a_registered_one_replaces_a_built_in_one(fresh):
    assert registry.get("wait") is registry.get("wait") is build_wait
    registry.register("wait", build_random)
    assert registry.get("wait") is build_random and "wait" in registry.names()
    with pytest.raises(ValueError, match="controller must be one of"):
        registry.get("nope")


def test_a_registered_name_is_a_valid_config_controller(fresh):
    with pytest.raises(ValueError, match="controller must be one of"):
        TrainingConfig(controller="my_rule")
    registry.register("my_rule", build_wait)
    assert TrainingConfig(controller="my_rule").controller == "my_rule"
