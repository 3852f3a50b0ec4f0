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


def _signals(epoch, occupied, stages, germinate=True, fossilize=False, slots=3):
    """One env's signals as the oracle reads them; `occupied` / `stages` per slot."""
    from esper_fx.contracts.actions import LifecycleOp

    op = np.zeros((1, 4), bool)
    op[0, int(LifecycleOp.WAIT)], op[0, int(LifecycleOp.GERMINATE)] = True, germinate
    op[0, int(LifecycleOp.FOSSILIZE)] = fossilize
    by_op = np.ones((1, 4, slots), bool)
    by_op[0, int(LifecycleOp.GERMINATE)] = ~np.asarray(occupied) if germinate else True
    return {"epoch": jnp.asarray([epoch], jnp.int32), "slot_occupied": jnp.asarray([occupied]),
            "slot_stage": jnp.asarray([stages], jnp.int32), "mask_op": jnp.asarray(op),
            "mask_slot_op": jnp.asarray(by_op)}


def test_the_two_seed_oracle_acts_once_per_epoch_in_its_order():
    from esper_fx.contracts.actions import HEAD_BLUEPRINT, HEAD_OP, HEAD_SLOT, LifecycleOp
    from esper_fx.contracts.stages import SeedStage
    from esper_fx.controllers.baselines import two_seed_actions

    first = (0, 1, 2, 3, 1)  # slot 0, blueprint 1, blend 2, epoch 3, tempo 1
    none, prob = 0, int(SeedStage.PROBATIONARY)
    act = lambda signals, done=False: two_seed_actions(signals, jnp.asarray([done]), first, 2, 4)  # noqa: E731
    ops = lambda a: (int(a[0, HEAD_SLOT]), int(a[0, HEAD_BLUEPRINT]), LifecycleOp(int(a[0, HEAD_OP])))  # noqa: E731
    # before and at the first seed's epoch the second waits; the first germinates at its epoch
    a, done = act(_signals(2, [False] * 3, [none] * 3))
    assert ops(a)[2] == LifecycleOp.WAIT and not bool(done[0])
    a, done = act(_signals(3, [False] * 3, [none] * 3))
    assert ops(a) == (0, 1, LifecycleOp.GERMINATE) and not bool(done[0])
    # after it: the second, in its slot with its blueprint, the first's blend and tempo, once
    a, done = act(_signals(4, [True, False, False], [3, none, none]))
    assert ops(a) == (2, 4, LifecycleOp.GERMINATE) and bool(done[0])
    assert int(a[0, 2]) == 2 and int(a[0, 4]) == 1
    a, _ = act(_signals(5, [True, False, False], [3, none, none]), done=True)
    assert ops(a)[2] == LifecycleOp.WAIT  # a second seed culled is not grown again
    # not while the masks forbid a germination (one seed at a time) or in an occupied slot
    a, done = act(_signals(5, [True, False, False], [3, none, none], germinate=False))
    assert ops(a)[2] == LifecycleOp.WAIT and not bool(done[0])
    # the first seed's fossilization comes first, then the second's, then the second germination
    a, done = act(_signals(6, [True, False, True], [prob, none, prob], fossilize=True), done=True)
    assert ops(a)[::2] == (0, LifecycleOp.FOSSILIZE)
    a, done = act(_signals(7, [True, False, True], [7, none, prob], fossilize=True), done=True)
    assert ops(a)[::2] == (2, LifecycleOp.FOSSILIZE)
    a, done = act(_signals(7, [True, False, False], [prob, none, none], fossilize=True))
    assert ops(a)[::2] == (0, LifecycleOp.FOSSILIZE) and not bool(done[0])


@pytest.mark.parametrize("one_at_a_time", [False, True])
def test_the_two_seed_oracle_grows_its_second_seed_in_a_real_episode(one_at_a_time):
    oracle = {"slot": "r0c1", "blueprint": "conv_light", "then_slot": "r0c2", "then_blueprint": "depthwise"}
    config = tiny16(controller="oracle", oracle=oracle, one_seed_at_a_time=one_at_a_time,
                    **({} if not one_at_a_time else {"lifecycle": "proportional"}))
    result = esper_fx.run(config, run_dir=False, quiet=True)
    events = _lifecycle(result)
    germinated = [(epoch, slot, data["blueprint"], data["blend"]) for kind, epoch, slot, data in events
                  if kind == "SEED_GERMINATED"]
    assert germinated[0] == (1, "r0c1", "conv_light", "sigmoid")
    if one_at_a_time:  # the epoch after the first seed's slot was freed (fossilized or culled)
        freed = next(epoch for kind, epoch, slot, _ in events if slot == "r0c1" and kind != "SEED_GERMINATED")
        assert germinated[1] == (freed + 1, "r0c2", "depthwise", "sigmoid")
    else:  # the first epoch after the first seed's at which the masks allow it
        assert germinated[1] == (2, "r0c2", "depthwise", "sigmoid")
    assert len(germinated) == 2 and all(kind != "SEED_CULLED" or data.get("auto") for kind, *_, data in events)
    probationary = [e for e in result.events if e["event_type"] == "SEED_STAGE_CHANGED"
                    and e["data"].get("to_stage") == "PROBATIONARY"]
    counts = result.history[0].action_counts
    assert counts["GERMINATE"] == 2 and counts["CULL"] == 0
    assert counts["FOSSILIZE"] == len(probationary)  # each seed fossilized at the first epoch it is allowed


def test_a_second_seed_is_checked_and_left_out_of_the_json_when_unset():
    from rl.config import OracleConfig

    assert "then_slot" not in OracleConfig().to_dict() and "then_blueprint" not in OracleConfig().to_dict()
    two = tiny16(oracle={"then_slot": "r0c1", "then_blueprint": "depthwise"})
    assert TrainingConfig.from_dict(two.to_dict()).oracle == two.oracle
    assert two.oracle.to_dict()["then_slot"] == "r0c1" and two.oracle.two_seeds
    with pytest.raises(ValueError, match="oracle.then_blueprint"):
        tiny16(oracle={"then_slot": "r0c1"})
    with pytest.raises(ValueError, match="oracle.then_slot"):
        tiny16(oracle={"then_slot": "r0c0", "then_blueprint": "depthwise"})  # the first seed's slot
    with pytest.raises(ValueError, match="oracle.then_slot"):  # checked against the run when the oracle plays
        tiny16(controller="oracle", slots=("r0c0", "r0c1"), oracle={"then_slot": "r0c2", "then_blueprint": "depthwise"})
    with pytest.raises(ValueError, match="oracle.then_blueprint"):
        tiny16(controller="oracle", oracle={"then_slot": "r0c1", "then_blueprint": "conv_heavy"})
