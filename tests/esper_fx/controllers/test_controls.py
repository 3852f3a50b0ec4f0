"""The controls of LEARNING.md §3: the oracle's schedule, static_final's architecture, independent action
streams per arm, and greedy evaluation of a trained policy."""

import jax.numpy as jnp
import numpy as np
import pytest

import esper_fx
from esper_fx.controllers import protocol as ctl
from esper_fx.controllers import registry
from esper_fx.training import step
from esper_fx.config import TrainingConfig
from esper_fx.evaluation.episodes import Arm, Policy, run_arm

# shapes16 at a tiny size; 12 epochs let a seed germinated at epoch 1 reach PROBATIONARY and be fossilized
TINY16 = dict(task="shapes16", n_envs=1, n_episodes=1, max_epochs=12, synthetic_train_samples=256,
              synthetic_test_samples=64, batch_size_per_env=32, max_train_batches=2, seed=11,
              slots=("r0c0", "r0c1", "r0c2"), data_split="full", num_minibatches=1)


def tiny16(**overrides) -> TrainingConfig:
    return TrainingConfig(**{**TINY16, **overrides})


def _lifecycle(result):
    return [(e["event_type"], e.get("epoch"), e.get("slot_id"), e.get("data", {}))
            for e in result.events if e["event_type"] in ("SEED_GERMINATED", "SEED_FOSSILIZED", "SEED_CULLED")]


def test_oracle_reproduces_its_schedule_exactly():
    config = tiny16(controller="oracle", oracle={"slot": "r0c1", "blueprint": "depthwise", "blend": "linear",
                                                 "germinate_epoch": 2})
    result = esper_fx.run(config, run_dir=False, quiet=True)
    events = _lifecycle(result)
    assert events[0][:3] == ("SEED_GERMINATED", 2, "r0c1")
    assert events[0][3]["blueprint"] == "depthwise" and events[0][3]["blend"] == "linear"
    assert all(kind != "SEED_CULLED" for kind, *_ in events)  # never culls
    stage_changes = [e for e in result.events if e["event_type"] == "SEED_STAGE_CHANGED"
                     and e["data"].get("to_stage") == "PROBATIONARY"]
    fossilized = [e for e in events if e[0] == "SEED_FOSSILIZED"]
    if stage_changes:  # fossilized at the first epoch it is allowed: the epoch after it became PROBATIONARY
        assert fossilized and fossilized[0][1] == stage_changes[0]["epoch"] + 1
    counts = result.history[0].action_counts
    assert counts["GERMINATE"] == 1 and counts["CULL"] == 0


def test_oracle_rejects_a_schedule_outside_the_run():
    with pytest.raises(ValueError, match="oracle.slot"):
        tiny16(controller="oracle", slots=("r0c1",), oracle={"slot": "r0c0"})
    with pytest.raises(ValueError, match="oracle.germinate_epoch"):
        tiny16(controller="oracle", oracle={"germinate_epoch": 13})
    with pytest.raises(ValueError, match="oracle.blueprint"):
        tiny16(controller="oracle", oracle={"blueprint": "conv_heavy"})


def test_static_final_builds_the_fossilized_architecture_of_a_run():
    grown = Arm.build("oracle", tiny16()).run(5)
    assert grown.fossils == ("r0c0=conv_light",), "the oracle must fossilize on this seed for the test to mean anything"
    static = Arm.build("static_final", tiny16(), per_seed=lambda seed: {"static_seeds": grown.fossils}).run(5)
    assert static.params_added == grown.params_added == 2336  # conv_light at 16 channels
    assert static.fossils == grown.fossils  # the same slot holds the same blueprint, FOSSILIZED
    assert static.germinated == 0 and static.fossilized == 0 and static.culled == 0  # built, not grown
    wait = Arm.build("wait", tiny16()).run(5)
    assert wait.val_accs != static.val_accs  # the seed is part of the network from the first step


def test_static_seeds_are_checked():
    with pytest.raises(ValueError, match="static_seeds"):
        tiny16(static_seeds=("r0c0",))
    with pytest.raises(ValueError, match="static_seeds"):
        tiny16(static_seeds=("r0c0=conv_light", "r0c0=norm"))
    with pytest.raises(ValueError, match="static_seeds"):
        tiny16(static_seeds=("r0c0=bogus",))


def test_two_controllers_under_one_run_seed_draw_different_action_noise():
    root = jnp.asarray(step.init_key(np.asarray([0, 7], np.uint32)))  # any key
    a = step.act_key(root, "ppo_lstm", 0, 1)
    b = step.act_key(root, "ppo_mlp", 0, 1)
    assert not np.array_equal(np.asarray(a), np.asarray(b))
    config = tiny16(max_epochs=6)
    first = esper_fx.run(config, controller="random", run_dir=False, quiet=True)
    renamed = ctl.Controller(name="random_twin", act=registry.build("random", ctl.ControllerSpec.from_config(config)).act)
    second = esper_fx.run(config, controller=renamed, run_dir=False, quiet=True)
    assert first.history[0].head_counts != second.history[0].head_counts
    again = esper_fx.run(config, controller="random", run_dir=False, quiet=True)
    assert again.history[0].head_counts == first.history[0].head_counts  # each stream is reproducible


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny ppo_lstm run with its run directory: (config, result)."""
    config = tiny16(controller="ppo_lstm", n_envs=2, n_episodes=2, max_epochs=4)
    return config, esper_fx.run(config, run_dir=tmp_path_factory.mktemp("trained") / "run", quiet=True)


def test_greedy_evaluation_of_a_trained_policy_is_deterministic_and_learns_nothing(trained):
    config, trained = trained
    arm = Arm.trained("ppo", config, Policy(trained.controller_state, trained.obs_rms))
    assert not arm.controller.learns and arm.controller.name == "ppo_lstm_greedy"
    first, second = run_arm(arm, [101, 101])
    assert first.val_accs == second.val_accs and first.germinated == second.germinated
    sampled = Arm.trained("ppo_sampled", config, Policy(trained.controller_state, trained.obs_rms), greedy=False)
    assert sampled.controller.name == "ppo_lstm_sampled"


def test_an_episode_records_every_epoch_and_its_metric():
    episode = Arm.build("wait", tiny16(max_epochs=5)).run(3)
    assert len(episode.val_accs) == 5
    assert episode.accuracy == pytest.approx(np.mean(episode.val_accs[-3:]))
    assert episode.params_added == 0 and episode.fossils == ()


def test_a_policy_loaded_from_the_run_directory_acts_like_the_trained_one(trained):
    from esper_fx.evaluation.episodes import load_policy

    config, trained = trained
    loaded_config, policy = load_policy(trained.run_dir)
    assert loaded_config.to_dict() == {**config.to_dict(), "run_dir": str(trained.run_dir)}
    direct = Arm.trained("ppo", config, Policy(trained.controller_state, trained.obs_rms)).run(202)
    from_disk = Arm.trained("ppo", loaded_config, policy).run(202)
    assert direct.val_accs == from_disk.val_accs and direct.fossils == from_disk.fossils


def test_the_reference_horizon_bootstraps_the_last_epoch():
    config = tiny16(controller="ppo_lstm", n_envs=2, n_episodes=2, max_epochs=3, horizon_bootstrap=True)
    spec = ctl.ControllerSpec.from_config(config)
    bundle = registry.build("ppo_lstm", spec)
    captured = {}

    def spying_update(state, rollout, key):
        captured["rollout"] = rollout
        return bundle.update(state, rollout, key)

    spy = ctl.Controller(name="ppo_lstm", act=bundle.act, init=bundle.init, initial_carry=bundle.initial_carry,
                         value=bundle.value, update=spying_update, learns=True)
    esper_fx.run(config, controller=spy, run_dir=False, quiet=True)
    rollout = captured["rollout"]
    assert np.all(np.asarray(rollout.truncated[:, -1])) and np.all(np.asarray(rollout.dones[:, -1]))
    assert np.all(np.asarray(rollout.bootstrap[:, -1]) != 0.0)  # V of the post-action signals
