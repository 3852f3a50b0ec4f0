"""End to end on CPU at tiny size: every controller runs, rollouts, events, rollbacks, resume, interrupts."""

import csv
import json
import os
import signal
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import esper_fx
from esper_fx.outputs import checkpoint as ckpt
from esper_fx.controllers import protocol as ctl
from esper_fx.controllers import registry
from esper_fx.controllers import baselines
from esper_fx.training import pools, run_state
from esper_fx.config import TrainingConfig
from tests.esper_fx.stops import signal_at_apply
from tests.esper_fx import tiny

# No TensorBoard and no report (its static-host batch and plots cost more than a tiny run itself), but in the
# end-to-end test of every controller, whose runs write everything a run writes.
TINY = dict(tiny.TINY, tensorboard=False, report=False)


def tiny(**overrides) -> TrainingConfig:
    return TrainingConfig(**{**TINY, **overrides})


def _params_equal(a, b) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb))


def _strip_times(history):
    return [{k: v for k, v in h.to_dict().items() if k not in ("wall_time_s", "timing")} for h in history]


@pytest.mark.parametrize("controller", ["ppo_lstm", "ppo_mlp", "heuristic", "random", "wait"])
def test_every_registered_controller_runs_end_to_end(controller, tmp_path):
    result = esper_fx.run(tiny(controller=controller, tensorboard=True, report=True), run_dir=tmp_path / controller)
    assert len(result.history) == 2
    for entry in result.history:
        assert len(entry.env_accuracies) == 2
        assert all(np.isfinite(entry.env_accuracies))
        assert np.isfinite(entry.avg_reward)
        assert sum(entry.action_counts.values()) == 2 * 3  # E·T decisions per batch
        if controller.startswith("ppo"):
            assert entry.ppo is not None and np.isfinite(entry.ppo["policy_loss"])
        else:
            assert entry.ppo is None
    if controller == "wait":
        assert all(h.action_counts["WAIT"] == 6 for h in result.history)
    run_dir = Path(result.run_dir)
    for name in ("config.json", "events.jsonl", "metrics.csv", "summary.json", "report.html", "tb"):
        assert (run_dir / name).exists(), name
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    batches = [e for e in events if e["event_type"] == "BATCH_COMPLETED"]
    assert [e["batch"] for e in batches] == [0, 1]
    with open(run_dir / "metrics.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 2
    assert json.loads((run_dir / "summary.json").read_text())["episodes"] == 4


def test_rollout_holds_exactly_E_times_T_valid_steps():
    config = tiny(n_episodes=2)
    spec = ctl.ControllerSpec.from_config(config)
    bundle = registry.build("ppo_lstm", spec)
    captured = {}
    original_update = bundle.update

    def spying_update(state, rollout, key):
        captured["rollout"] = rollout
        return original_update(state, rollout, key)

    spy = ctl.Controller(name="spy", act=bundle.act, init=bundle.init, initial_carry=bundle.initial_carry,
                         value=bundle.value, update=spying_update, learns=True)
    esper_fx.run(config, controller=spy, run_dir=False, quiet=True)
    rollout = captured["rollout"]
    assert int(jnp.sum(rollout.valid)) == 2 * 3
    # [fix] the last epoch ends the episode: done, not truncated, nothing bootstrapped (LEARNING.md)
    assert np.all(np.asarray(rollout.dones[:, -1])) and not np.any(np.asarray(rollout.truncated))
    assert not np.any(np.asarray(rollout.dones[:, :-1]))
    assert np.all(np.asarray(rollout.bootstrap) == 0.0)


def test_forced_nan_loss_triggers_rollback_and_the_run_continues():
    config = tiny(n_episodes=2)
    pool = pools.build_pool(config)
    pool.inject_nan(env=1, epoch=2)
    captured = {}
    bundle = registry.build("ppo_lstm", ctl.ControllerSpec.from_config(config))

    def spying_update(state, rollout, key):
        captured["rollout"] = rollout
        return bundle.update(state, rollout, key)

    spy = ctl.Controller(name="spy", act=bundle.act, init=bundle.init, initial_carry=bundle.initial_carry,
                         value=bundle.value, update=spying_update, learns=True)
    result = esper_fx.run(config, controller=spy, pool=pool, run_dir=False, quiet=True)
    assert result.history[0].rollbacks == 1
    kinds = [e["event_type"] for e in result.events if e["env_id"] == 1]
    assert "GOVERNOR_ROLLBACK" in kinds
    rollout = captured["rollout"]
    assert int(rollout.step_count[1]) == 3  # the rolled-back env keeps its transitions [fix]
    assert float(rollout.raw_rewards[1, 1]) <= -10.0 + 1.0  # the panicking step carries the -10
    assert np.isfinite(result.history[0].ppo["policy_loss"])


def test_discard_rolled_back_envs_drops_their_rows():
    config = tiny(n_episodes=2, discard_rolled_back_envs=True)
    pool = pools.build_pool(config)
    pool.inject_nan(env=1, epoch=2)
    result = esper_fx.run(config, pool=pool, run_dir=False, quiet=True)
    assert result.history[0].rollbacks == 1
    assert np.isfinite(result.history[0].ppo["policy_loss"])


def test_resume_is_exact(tmp_path):
    full = esper_fx.run(tiny(n_episodes=8, checkpoint_every=2), run_dir=tmp_path / "full")
    first = esper_fx.run(tiny(n_episodes=4, checkpoint_every=2), run_dir=tmp_path / "split")
    assert len(first.history) == 2
    resumed = esper_fx.run(tiny(n_episodes=8, checkpoint_every=2, resume_path=str(tmp_path / "split")),
                           run_dir=tmp_path / "split")
    assert _strip_times(resumed.history) == _strip_times(full.history)
    assert _params_equal(resumed.controller_state.params, full.controller_state.params)
    assert _params_equal(resumed.best_controller_state.params, full.best_controller_state.params)
    with open(tmp_path / "split" / "metrics.csv") as fh:
        assert [int(r["batch"]) for r in csv.DictReader(fh)] == [0, 1, 2, 3]


def test_resume_rejects_a_different_shape(tmp_path):
    esper_fx.run(tiny(n_episodes=2), run_dir=tmp_path / "r")
    with pytest.raises(ValueError, match="slots"):
        esper_fx.run(tiny(n_episodes=4, slots=["r0c0"], resume_path=str(tmp_path / "r")))
    with pytest.raises(ValueError, match="controller"):
        esper_fx.run(tiny(n_episodes=4, controller="ppo_mlp", resume_path=str(tmp_path / "r")))


def test_half_written_checkpoint_is_ignored(tmp_path):
    esper_fx.run(tiny(n_episodes=4, checkpoint_every=1), run_dir=tmp_path / "r")
    root = tmp_path / "r" / "checkpoints"
    good = ckpt.find_checkpoint(tmp_path / "r").path
    crash = root / ".tmp-batch-000009-deadbeef"
    crash.mkdir()
    (crash / "manifest.json").write_text("{\"checkpoint_version\": 1, \"next_batch_idx\": 10")
    partial = root / "batch-000009"
    partial.mkdir()
    (partial / "manifest.json").write_text("{\"checkpoint_version\": 1}")  # no "complete" flag
    assert ckpt.find_checkpoint(tmp_path / "r").path == good
    (root / "latest").unlink()
    assert ckpt.find_checkpoint(tmp_path / "r").path == good
    assert ckpt.read_manifest(tmp_path / "r")["next_batch_idx"] == 2


def test_sigint_leaves_a_loadable_checkpoint(tmp_path):
    config = tiny(n_episodes=20)
    pool = pools.build_pool(config)
    signal_at_apply(pool, 5, signal.SIGINT)  # second epoch of the second batch
    assert threading.current_thread() is threading.main_thread()
    with pytest.raises(run_state.Interrupted) as info:
        esper_fx.run(config, run_dir=tmp_path / "r", pool=pool)
    assert info.value.checkpoint is not None
    manifest = ckpt.read_manifest(tmp_path / "r")
    assert manifest["next_batch_idx"] == 1
    resumed = esper_fx.run(config.replace(n_episodes=4, resume_path=str(tmp_path / "r")), run_dir=tmp_path / "r")
    assert [h.batch for h in resumed.history] == [0, 1]


def test_custom_two_function_controller_registers_and_runs():
    def init(key, spec):
        return {"bias": jnp.zeros(())}

    def act(state, carry, signals, key):
        return baselines.wait_actions(signals)

    registry.register("always_wait_custom", ctl.make_controller(act, init=init, name="always_wait_custom"))
    assert "always_wait_custom" in registry.names()
    result = esper_fx.run(tiny(n_episodes=2), controller="always_wait_custom", run_dir=False, quiet=True)
    assert result.history[0].action_counts["WAIT"] == 6


def test_history_records_the_seed_params_held_at_the_last_epoch():
    from esper_fx.contracts.actions import LifecycleOp

    def act(state, carry, signals, key):
        wait = baselines.wait_actions(signals)
        germinate = wait.at[:, 3].set(int(LifecycleOp.GERMINATE))
        return jnp.where((signals["epoch"] == 1)[:, None], germinate, wait)

    result = esper_fx.run(tiny(n_episodes=2), controller=ctl.make_controller(act, name="germinate_once"),
                          run_dir=False, quiet=True)
    entry = result.history[0]
    assert entry.seeds_created == 2
    assert len(entry.env_seed_params) == 2 and all(p > 0 for p in entry.env_seed_params)
    table = esper_fx.compare({"g": ctl.make_controller(act, name="germinate_once")}, tiny(n_episodes=2),
                             seeds=[3], progress=None)
    assert table.rows[0]["params_added_mean"] == pytest.approx(entry.env_seed_params[0])  # one blueprint
    assert table.rows[0]["germinated_mean"] == 1
    assert repr(table) == table.to_text()  # a short table, not a dump of every run's events


def test_reward_fn_is_swappable_by_name_and_function():
    sparse = esper_fx.run(tiny(n_episodes=2, controller="wait"), reward_fn="sparse", run_dir=False, quiet=True)
    # sparse pays only at t = T: 1.0 · clip(host_max_acc/100 − 0.1·0/500000, −1, 1) with no seeds
    expected = np.mean(sparse.history[0].host_max_accuracies) / 100.0
    assert sparse.history[0].avg_reward == pytest.approx(expected, abs=1e-5)


def test_cli_relative_run_dir_and_relative_resume(tmp_path, monkeypatch):
    """README's main command uses a relative run directory; orbax needs absolute paths (issue 12, defect 1).
    The command line runs in this process (test_compile_cache.py runs it in fresh interpreters)."""
    from esper_fx.cli.train import main

    (tmp_path / "tiny.json").write_text(json.dumps({**TINY, "n_episodes": 4, "checkpoint_every": 1}))
    monkeypatch.chdir(tmp_path)
    assert main(["--quiet", "--config", "tiny.json", "--run-dir", os.path.join("runs", "rel")]) == 0
    run = tmp_path / "runs" / "rel"
    assert (run / "checkpoints" / "batch-000000" / "manifest.json").exists()  # the periodic checkpoint
    assert (run / "checkpoints" / "final").exists() and (run / "summary.json").exists()
    assert main(["--quiet", "--resume", os.path.join("runs", "rel"), "--episodes", "6"]) == 0
    assert json.loads((run / "summary.json").read_text())["episodes"] == 6


def test_python_api_accepts_a_relative_run_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = esper_fx.run(tiny(n_episodes=2), run_dir="rel")
    assert Path(result.run_dir) == tmp_path / "rel"
    assert (tmp_path / "rel" / "checkpoints" / "final" / "manifest.json").exists()
    resumed = esper_fx.run(tiny(n_episodes=4, resume_path="rel"), run_dir="rel")
    assert [h.batch for h in resumed.history] == [0, 1]
