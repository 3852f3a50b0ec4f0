"""Failures are loud and precise: NaN data, a broken controller, a stop by signal at any moment (and a command
line stopped and resumed ends as the uninterrupted run), setup problems found before anything is written
(issue 12)."""

import json
import math
import os
import signal
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import esper_fx
from esper_fx.outputs import checkpoint as ckpt
from esper_fx.cli import run as cli_run
from esper_fx.training import epoch, pools, run_state
from esper_fx.controllers import protocol as ctl
from esper_fx.controllers import registry
from esper_fx.config import TrainingConfig
from esper_fx.contracts.signals import SignalColumn
from esper_fx.errors import ControllerError, DataError, DeviceUnavailableError
from esper_fx.training.run_state import fresh_learner
from esper_fx.cli.train import main
from rl import rewards
from tests.esper_fx.stops import signal_at_apply
from tests.esper_fx import signal_experiment as X
from tests.esper_fx import tiny

TINY = dict(tiny.TINY, device="cpu", tensorboard=False, report=False)  # no test here reads the report or TensorBoard


def tiny(**overrides) -> TrainingConfig:
    return TrainingConfig(**{**TINY, **overrides})


def _nan_reward_at_epoch_2(signals, actions, reward_state, config):
    reward, components, state = rewards.get_reward_fn("shaped")(signals, actions, reward_state, config)
    return reward.at[0].set(jnp.where(signals["epoch"][0] == 2, jnp.nan, reward[0])), components, state


def test_nan_rewards_never_poison_the_normaliser_and_are_reported_loudly(tmp_path, capsys):
    """Issue 12, defect 8: one NaN reward poisoned the reward normaliser for good, silently."""
    config = tiny(checkpoint_every=1)
    result = esper_fx.run(config, reward_fn=_nan_reward_at_epoch_2, run_dir=tmp_path / "r")
    skipped = [e for e in result.events if e["event_type"] == "NONFINITE_SKIPPED"]
    assert [(e["batch"], e["data"], e["severity"]) for e in skipped] == [(0, {"rewards": 1}, "warning"),
                                                                         (1, {"rewards": 1}, "warning")]
    updates = [e for e in result.events if e["event_type"] == "PPO_UPDATE_COMPLETED"]
    assert all(e["severity"] == "warning" and "NaN or inf" in e["message"] for e in updates)
    err = capsys.readouterr().err
    assert "WARNING: batch 0: 1 NaN/inf rewards were left out of the reward normaliser" in err
    assert "WARNING: batch 1: the PPO update stopped at a step" in err
    spec = ctl.ControllerSpec.from_config(config)
    template = fresh_learner(registry.build("ppo_lstm", spec), spec, config.seed)._asdict()
    saved = ckpt.load_trees(ckpt.read_manifest(tmp_path / "r"), template)
    assert all(math.isfinite(v) for v in saved["reward_norm"].stats())
    assert float(saved["reward_norm"].count) == 2 * (2 * 3 - 1)  # every finite reward of both batches
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in (saved["obs_rms"].mean, saved["obs_rms"].var))


def test_an_invalid_action_names_batch_epoch_envs_and_the_cause():
    """Issue 12, defect 15: 'the controller produced an invalid action' hid its cause."""
    with pytest.raises(ControllerError) as info:
        epoch.check_actions(np.array([True, False]), 3, 2, {"params": {"w": jnp.array([1.0, jnp.nan])}},
                           {"float32": jnp.zeros((2, 4))}, {"obs": SignalColumn("float32", 0, 4, (4,))})
    message = str(info.value)
    assert "batch 3 epoch 2" in message and "envs [1]" in message and "NaN or inf" in message
    assert "['params']['w']" in message
    with pytest.raises(ControllerError, match="their observation holds NaN"):
        epoch.check_actions(np.array([False, True]), 0, 1, {"w": jnp.ones(2)}, {"float32": jnp.array([[jnp.nan], [0.0]])},
                           {"obs": SignalColumn("float32", 0, 1, (1,))})
    assert cli_run._error_exit_code(info.value) == cli_run.EXIT_RUN_FAILED


def test_sigterm_checkpoints_the_last_finished_batch_like_ctrl_c(tmp_path):
    """Issue 12, defect 5: SIGTERM (preemption, kill) lost up to checkpoint_every − 1 batches."""
    config = tiny(n_episodes=20, checkpoint_every=10)
    pool = pools.build_pool(config)
    signal_at_apply(pool, 8, signal.SIGTERM)  # second epoch of the third batch
    with pytest.raises(run_state.Interrupted) as info:
        esper_fx.run(config, run_dir=tmp_path / "r", pool=pool)
    assert info.value.signum == signal.SIGTERM and info.value.exit_code == 143
    assert ckpt.read_manifest(tmp_path / "r")["next_batch_idx"] == 2
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored after the run


def _signal_inside_save(monkeypatch, when, signum=signal.SIGINT):
    """Deliver `signum` to this process inside checkpoint writes for which when(final, calls) is true."""
    real = ckpt.save_checkpoint
    calls = {"n": 0}

    def saving(*args, **kwargs):
        calls["n"] += 1
        if when(kwargs.get("final", False), calls["n"]):
            os.kill(os.getpid(), signum)
        return real(*args, **kwargs)

    monkeypatch.setattr(ckpt, "save_checkpoint", saving)


def test_ctrl_c_during_the_final_save_finishes_it_and_reports_the_checkpoint(tmp_path, monkeypatch):
    """Issue 12, defect 14: Ctrl-C during the final save printed a raw traceback and no resume hint."""
    _signal_inside_save(monkeypatch, lambda final, n: final)
    with pytest.raises(run_state.Interrupted) as info:
        esper_fx.run(tiny(n_episodes=2, controller="wait"), run_dir=tmp_path / "r")
    assert info.value.checkpoint and Path(info.value.checkpoint).name == "batch-000000"
    assert (tmp_path / "r" / "checkpoints" / "final").exists()
    monkeypatch.undo()
    resumed = esper_fx.run(tiny(n_episodes=2, controller="wait", resume_path=str(tmp_path / "r")),
                           run_dir=tmp_path / "r")
    assert [h.batch for h in resumed.history] == [0] and (tmp_path / "r" / "summary.json").exists()


def test_ctrl_c_twice_still_ends_with_an_intact_checkpoint(tmp_path, monkeypatch):
    """Issue 12, defect 14: a second Ctrl-C during the interrupt's checkpoint printed a raw traceback."""
    config = tiny(n_episodes=20, controller="wait", checkpoint_every=10)
    pool = pools.build_pool(config)
    signal_at_apply(pool, 5, signal.SIGINT)
    _signal_inside_save(monkeypatch, lambda final, n: n == 1)  # the second Ctrl-C, inside the interrupt's save
    with pytest.raises(run_state.Interrupted) as info:
        esper_fx.run(config, run_dir=tmp_path / "r", pool=pool)
    assert ckpt.find_checkpoint(info.value.checkpoint).skipped == ()
    assert ckpt.read_manifest(tmp_path / "r")["next_batch_idx"] == 1


def _as_ray_does(signum: int) -> None:
    """A signal met inside a library call that catches the stop and raises a plain KeyboardInterrupt (Ray's
    `ray.wait` and `ray.get` do so once a second while they wait)."""
    try:
        os.kill(os.getpid(), signum)  # (its handler runs before the next statement)
    except KeyboardInterrupt:
        raise KeyboardInterrupt from None


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_a_library_turned_into_a_plain_keyboard_interrupt_keeps_its_signal(signum):
    """Issue 39, item 3: a SIGTERM that met Ray's wait came out as a plain KeyboardInterrupt and was recorded
    as SIGINT (exit 130); `stops_kept` gives it back its signal."""
    from esper_fx.stopping import sigterm_stops, stop_signal, stops_kept

    with sigterm_stops(), pytest.raises(KeyboardInterrupt) as info:
        with stops_kept():
            _as_ray_does(signum)
    assert stop_signal(info.value) == signum


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_during_start_up_prints_no_traceback(tmp_path, monkeypatch, capsys, signum, code):
    """Issue 12, defect 14: Ctrl-C during start-up printed a raw traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.json").write_text(json.dumps(TINY))

    def stopped(config, say=print):
        os.kill(os.getpid(), signum)

    monkeypatch.setattr(cli_run, "limit_cpu_threads", stopped)
    assert main(["--config", "c.json", "--run-dir", "r", "--quiet"]) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err and "nothing to resume" in err
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The command line's run the stopped ones are compared with (tests/esper_fx/signal_experiment.py), its
    programs warm in the suite's compilation cache (tests/conftest.py): (work dir, cache, what it observed)."""
    work = tmp_path_factory.mktemp("signals")
    cache = Path(os.environ["JAX_COMPILATION_CACHE_DIR"])
    return work, cache, X.observe(X.reference_run(work, cache))


@pytest.mark.slow
@pytest.mark.parametrize("signum, point", [(signal.SIGTERM, "batch 0 committed"), (signal.SIGKILL, "batch 0 committed"),
                                           (signal.SIGINT, "after a checkpoint")])
def test_a_stopped_and_resumed_run_equals_the_uninterrupted_one(uninterrupted, signum, point):
    """Issue 12: a CLI run stopped by SIGINT, SIGTERM or SIGKILL and then resumed equals an uninterrupted run,
    bit for bit. A few trials of the matrix `python -m tests.esper_fx.signal_experiment` runs whole (SIGINT,
    SIGTERM and SIGKILL at five points)."""
    work, cache, expected = uninterrupted
    trial = X.trial(work, cache, expected, point, signum)
    assert trial.ok, trial.line()
    assert trial.code == X.EXPECTED_CODE[signum] and trial.resumes >= 1


def test_setup_problems_found_by_loading_the_data_are_reported_before_anything_is_written(tmp_path):
    """Issue 12, defect 12: a batch larger than the dataset crashed after config.json and events were written."""
    with pytest.raises(DataError, match="fewer than one step"):
        esper_fx.run(tiny(batch_size_per_env=4096), run_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_an_unavailable_device_is_reported_before_anything_is_written(tmp_path):
    """Issue 12, defect 12: --device cuda:0 on a CPU machine was checked only after the run directory existed."""
    with pytest.raises(DeviceUnavailableError, match="cuda:0"):
        esper_fx.run(tiny(device="cuda:0"), run_dir=tmp_path / "r")
    with pytest.raises(DeviceUnavailableError, match="cuda:1"):
        esper_fx.run(tiny(env_devices=["cpu", "cuda:1"]), run_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_resume_errors_print_plain_values_not_enum_reprs(tmp_path, monkeypatch, capsys):
    """Issue 12, defect 15: resume errors printed `<Task.SHAPES10: 'shapes10'>`."""
    esper_fx.run(tiny(n_episodes=2, controller="wait"), run_dir=tmp_path / "r")
    monkeypatch.chdir(tmp_path)
    assert main(["--resume", "r", "--task", "pytext"]) == 2
    assert main(["--resume", "r", "--data-split", "full"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("<" not in line for line in err)
    assert "task cannot change on resume (the checkpoint has 'shapes10', the command line 'pytext')" in err[0]
    assert "'shared'" in err[1] and "'full'" in err[1]


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_nan_or_inf_observation_is_left_out_of_the_normaliser_with_a_warning(tmp_path, capsys, bad):
    """Issue 22: a NaN in the observation stopped the run (exit 1) where +inf was left out with a warning."""
    config = tiny(n_episodes=2)
    pool = pools.build_pool(config)
    original, calls = pool.signals, {"n": 0}

    def signals():
        out = original()
        calls["n"] += 1
        if calls["n"] == 2:  # epoch 2 of the first batch, env 0
            out["obs"][0, 0] = bad
        return out

    pool.signals = signals
    result = esper_fx.run(config, run_dir=tmp_path / "r", pool=pool)
    assert result.summary["episodes"] == 2
    skipped = [e for e in result.events if e["event_type"] == "NONFINITE_SKIPPED"]
    assert [(e["batch"], e["data"]) for e in skipped] == [(0, {"observation_rows": 1})]
    assert "1 observation rows with NaN/inf" in capsys.readouterr().err
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in (result.obs_rms.mean, result.obs_rms.var))


def test_a_run_directory_in_use_is_one_line_of_advice_before_the_summary(tmp_path, monkeypatch, capsys):
    """Issue 37: the same command again after a stop before the first batch was told "it has no checkpoint
    to resume" although --resume restarts it; a finished run's directory gave its advice twice; and the
    config summary was printed before the refusal."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.json").write_text(json.dumps({**TINY, "n_episodes": 2}))
    (tmp_path / "stopped").mkdir()
    (tmp_path / "stopped" / "config.json").write_text((tmp_path / "c.json").read_text())
    assert main(["--config", "c.json", "--run-dir", "stopped"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert f"stopped before its first checkpoint: pass --resume {tmp_path / 'stopped'} to start it again" in err
    assert main(["--config", "c.json", "--run-dir", "done", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["--config", "c.json", "--run-dir", "done"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and err.count("--resume") == 1
    assert f"pass --resume {tmp_path / 'done'} to continue it" in err
