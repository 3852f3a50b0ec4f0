"""`reinforce`, the built-in learning controller that is not PPO: `prove --arms reinforce wait best_fixed` trains it,
freezes it through the protocol (`protocol.frozen`) and compares it, with every PPO function made to fail; its run
resumes exactly from a checkpoint; the protocol's greedy verb."""

import json
import shutil

import jax
import numpy as np
import pytest

import esper_fx
import esper_fx.controllers.ppo as ppo_controller
import rl.ppo
from esper_fx.cli import prove
from esper_fx.config import TrainingConfig
from esper_fx.controllers import protocol, registry
from esper_fx.evaluation.episodes import load_policy
from esper_fx.outputs import checkpoint as ckpt
from rl.reinforce import ReinforceState
from tests.esper_fx.evaluation.test_prove import TINY_PROVE

# one slot, one blueprint and the reference's clock (no tempo to choose): best_fixed searches 8 schedules on its
# one tuning seed; everything in this process (the PPO functions are made to fail here, not in Ray workers)
SMALL = ["--set", 'slots=["r0c1"]', "--set", 'blueprint_menu=["noop", "conv_light"]', "--set", "lifecycle=reference",
         "--set", "checkpoint_every=1", "--env-workers", "0", "--tuning-seeds", "7"]


def forbid(module, monkeypatch) -> list[str]:
    """Every function and class `module` defines replaced by one that fails the test when called."""
    def refuse(name):
        def called(*args, **kwargs):
            raise AssertionError(f"{name} was called on reinforce's path")
        return called

    names = [name for name, obj in vars(module).items()
             if callable(obj) and getattr(obj, "__module__", None) == module.__name__]
    for name in names:
        monkeypatch.setattr(module, name, refuse(f"{module.__name__}.{name}"))
    return names


@pytest.fixture(scope="module")
def proved(tmp_path_factory):
    """`prove --arms reinforce wait best_fixed` at a tiny size, in this process, with every function of rl.ppo and
    esper_fx.controllers.ppo failing when called: (exit code, its output directory)."""
    out = tmp_path_factory.mktemp("reinforce") / "p"
    with pytest.MonkeyPatch.context() as monkeypatch:
        forbidden = forbid(rl.ppo, monkeypatch) + forbid(ppo_controller, monkeypatch)
        assert {"act", "update", "policy_step"} <= set(forbidden) and "build_ppo_lstm" in forbidden
        with pytest.raises(AssertionError, match="rl.ppo.update was called"):
            rl.ppo.update(None, None, None, None, None)
        code = prove.main(["--arms", "reinforce", "wait", "best_fixed", "--seed", "5", "--out", str(out),
                           *TINY_PROVE, "--episodes", "4", *SMALL])
    return code, out


def test_prove_trains_reinforce_and_compares_it_with_wait_and_best_fixed_without_ppo(proved):
    code, out = proved
    assert code == 0
    report = json.loads((out / "prove.json").read_text())
    assert set(report["episodes"]) == {"reinforce", "wait", "best_fixed"}
    assert all(len(episodes) == 2 for episodes in report["episodes"].values())
    pairs = {(p["a"], p["b"]) for p in report["pairs"]}
    assert ("reinforce", "wait") in pairs and ("reinforce", "best_fixed") in pairs
    assert report["training"]["reinforce"]["episodes"] == 4
    run_dir = out / "train" / "reinforce"
    assert json.loads((run_dir / "config.json").read_text())["controller"] == "reinforce"  # the run it trained


def test_the_trained_policy_loads_and_learned(proved):
    _, out = proved
    config, policy = load_policy(out / "train" / "reinforce")
    assert config.controller_name == "reinforce"
    state = policy.controller_state
    assert isinstance(state, ReinforceState) and int(state.train_steps) == 2  # one update per batch
    bundle = registry.build("reinforce", protocol.ControllerSpec.from_config(config))
    fresh = bundle.init(jax.random.PRNGKey(0))
    moved = [not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(fresh.params))]
    assert any(moved)


def test_a_reinforce_run_resumes_exactly_from_its_checkpoint(proved, tmp_path):
    _, out = proved
    run_dir = tmp_path / "run"
    shutil.copytree(out / "train" / "reinforce", run_dir, symlinks=True)
    original = ckpt.read_manifest(run_dir)
    first = run_dir / "checkpoints" / "batch-000000"
    assert first.is_dir() and original["next_batch_idx"] == 2
    config = TrainingConfig.from_json(run_dir / "config.json", saved=True)
    resumed = esper_fx.run(config.replace(resume_path=str(first)), run_dir=run_dir, quiet=True)
    assert [h.batch for h in resumed.history] == [0, 1]

    def without_times(row):
        return {k: v for k, v in row.items() if k not in ("wall_time_s", "timing")}

    assert without_times(resumed.history[-1].to_dict()) == without_times(original["history"][-1])
    _, policy = load_policy(out / "train" / "reinforce")
    for a, b in zip(jax.tree.leaves(resumed.controller_state.params), jax.tree.leaves(policy.controller_state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _bundle(greedy_act=None, learns=True):
    def act(state, carry, signals, key):
        return "sampled", {}, carry

    return protocol.Controller(name="mine", act=act, learns=learns, greedy_act=greedy_act)


def test_frozen_acts_greedily_through_the_protocol_and_never_learns():
    greedy = _bundle(greedy_act=lambda state, carry, signals, key: ("greedy", {}, carry))
    assert protocol.frozen(greedy).act(None, (), {}, None)[0] == "greedy"
    assert protocol.frozen(greedy, greedy=False).act(None, (), {}, None)[0] == "sampled"
    assert protocol.frozen(greedy).name == "mine_greedy"
    assert protocol.frozen(greedy, greedy=False).name == "mine_sampled"
    assert not protocol.frozen(greedy).learns
    assert protocol.frozen(_bundle()).act(None, (), {}, None)[0] == "sampled"  # no greedy verb: it acts as it acts
    with pytest.raises(ValueError, match="does not learn"):
        protocol.frozen(_bundle(learns=False))


def test_a_static_arm_of_prove_rebuilds_what_an_earlier_learning_controller_grew():
    config = TrainingConfig.preset("quickstart")
    arms = prove.arm_table(["reinforce", "wait", "static_final"], config, None)
    assert arms == {"reinforce": "reinforce", "wait": "wait", "static_final": "static_final"}
    with pytest.raises(prove.ProveError, match="list 'reinforce' before it"):
        prove.arm_table(["static_final", "reinforce"], config, None)
    with pytest.raises(prove.ProveError, match="list 'oracle' before it"):  # no learning arm: the oracle's
        prove.arm_table(["wait", "static_final"], config, None)


# ----------------------------------------------------------------------------------------------
# issue 71: a reinforce run is named reinforce everywhere it goes
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def reinforce_run(proved, tmp_path):
    """A copy of the trained reinforce run (a test may damage it)."""
    _, out = proved
    run_dir = tmp_path / "reinforce"
    shutil.copytree(out / "train" / "reinforce", run_dir, symlinks=True)
    return run_dir


@pytest.mark.parametrize("flags, needle", [
    ([], "--arms ppo: the --checkpoint run holds a 'reinforce' controller, and ppo plays a PPO one; its arm is named "
         "by its controller (--arms reinforce wait random heuristic oracle static_final)"),
    (["--arms", "wait", "random"], "--checkpoint: no arm of wait random plays the checkpoint's 'reinforce' controller "
                                   "(list reinforce in --arms, or drop --checkpoint)"),
    (["--arms", "reinforce", "--set", "reinforce.hidden_dim=32"], "was trained with reinforce.hidden_dim 64; it "
                                                                  "cannot be evaluated with 32"),
], ids=["default arms", "no arm plays it", "another width"])
def test_a_reinforce_checkpoint_is_played_only_as_reinforce_at_its_own_width(flags, needle, reinforce_run, tmp_path,
                                                                             capsys):
    assert prove.main(["--checkpoint", str(reinforce_run), *flags, "--out", str(tmp_path / "p"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "p").exists()


def test_the_reinforce_arm_plays_a_reinforce_checkpoint_instead_of_training_one(reinforce_run, tmp_path):
    out = tmp_path / "p"
    assert prove.main(["--checkpoint", str(reinforce_run), "--arms", "reinforce", "wait", "--n-eval-seeds", "1",
                       "--env-workers", "0", "--out", str(out), "--quiet"]) == 0
    report = json.loads((out / "prove.json").read_text())
    assert set(report["episodes"]) == {"reinforce", "wait"} and report["training"] == {}
    assert not (out / "train").exists()  # played as trained: nothing trained


def test_a_run_given_a_controller_by_name_records_it_and_resumes(tmp_path):
    from esper_fx.cli.train import resolve_config
    from tests.esper_fx.tiny import TINY

    run_dir = tmp_path / "run"
    result = esper_fx.run(TrainingConfig(**{**TINY, "n_episodes": 2, "tensorboard": False, "report": False,
                                            "env_workers": 0}), controller="reinforce", run_dir=run_dir, quiet=True)
    assert result.config.controller_name == "reinforce"
    assert json.loads((run_dir / "config.json").read_text())["controller"] == "reinforce"
    assert ckpt.read_manifest(run_dir)["config"]["controller"] == "reinforce"
    config, _ = resolve_config(["--resume", str(run_dir), "--episodes", "4"])  # its own checkpoint is accepted
    assert config.controller_name == "reinforce"


def test_a_prove_resume_continues_a_training_run_whose_summary_was_cut_short(reinforce_run, capsys):
    from esper_fx.evaluation.resume import trained_run

    summary = json.loads((reinforce_run / "summary.json").read_text())
    (reinforce_run / "summary.json").write_text(json.dumps(summary)[:100])  # a disk that filled as it was written
    config = TrainingConfig.from_json(reinforce_run / "config.json", saved=True).replace(run_dir=None)
    result = trained_run(config, "reinforce", None, str(reinforce_run), quiet=True)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "summary.json is kept, but it cannot be read" in err[0], err
    assert "continuing that run from its last checkpoint" in err[0]
    assert result.summary["episodes"] == summary["episodes"]
    assert json.loads((reinforce_run / "summary.json").read_text())["episodes"] == summary["episodes"]  # whole again


def test_one_gamma_shapes_the_reward_and_discounts_the_returns_of_reinforce():
    """`learner.gamma` is the one γ of a `reinforce` run: the reward's potential shaping and the returns its update
    discounts read it (earlier versions shaped with `ppo.gamma` and discounted with `reinforce.gamma`)."""
    from rl.reinforce import discounted_returns
    from tests.rl.test_ppo import B, D, E, S, T, collect, gaussian_obs, gaussian_reward

    config = TrainingConfig(controller="reinforce", learner={"gamma": 0.8}, n_envs=E)
    assert config.reward.gamma == 0.8 and config.learner.gamma == 0.8
    spec = protocol.ControllerSpec(obs_dim=D, num_slots=S, num_blueprints=B, n_envs=E, max_epochs=T,
                                   topology=config.topology, menu=config.menu, config=config)
    bundle = registry.build("reinforce", spec)
    actor = rl.ppo.init_train_state(jax.random.PRNGKey(3), rl.ppo.ActorCritic(S, B), D, config.ppo)
    ro = collect(actor, jax.random.PRNGKey(4), gaussian_obs, gaussian_reward)  # any policy's rollout will do
    _, metrics = bundle.update(bundle.init(jax.random.PRNGKey(5)), ro, jax.random.PRNGKey(6))

    def mean_return(gamma):
        returns = discounted_returns(ro.rewards, ro.dones, ro.truncated, ro.bootstrap, ro.valid, gamma)
        return float(np.sum(np.where(ro.valid, returns, 0.0)) / np.sum(ro.valid))

    assert float(metrics["mean_return"]) == pytest.approx(mean_return(0.8), rel=1e-5)
    assert abs(mean_return(0.8) - mean_return(0.99)) > 1e-3  # the test can tell the two γ apart


def test_an_earlier_versions_reinforce_gamma_becomes_the_learners():
    """A saved config of an earlier version: `reinforce.gamma` (what a reinforce run discounted with) is the
    learner's γ of a reinforce run; `ppo.gamma` that of every other run."""
    old = {"controller": "reinforce", "ppo": {"gamma": 0.99, "gae_lambda": 0.9}, "reinforce": {"gamma": 0.7}}
    config = TrainingConfig.from_saved(old)
    assert (config.learner.gamma, config.learner.gae_lambda, config.reward.gamma) == (0.7, 0.9, 0.7)
    assert TrainingConfig.from_saved({**old, "controller": "ppo"}).learner.gamma == 0.99
    with pytest.raises(ValueError, match="'ppo.gamma' is an old place of learner.gamma, given as well"):
        TrainingConfig.from_dict({"ppo": {"gamma": 0.9}, "learner": {"gamma": 0.9}})


def test_a_resume_of_an_earlier_versions_checkpoint_says_which_keys_moved_in_one_line(capsys):
    from esper_fx.cli.train import note_earlier_version

    note_earlier_version({"controller": "reinforce", "ppo": {"gamma": 0.99, "horizon_bootstrap": False},
                          "reinforce": {"gamma": 0.7}})
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("esper_fx.train: note: the checkpoint was written by an earlier")
    assert "'reinforce.gamma' is now 'learner.gamma'" in err[0] and "'ppo.gamma'" not in err[0]
    assert "'ppo.horizon_bootstrap' is now 'learner.horizon_bootstrap'" in err[0]
    note_earlier_version(TrainingConfig().to_dict())  # today's keys: nothing to say
    assert capsys.readouterr().err == ""
