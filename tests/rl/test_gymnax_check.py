"""The standard-env check (issue 69, item 5) in its tiny form: `rl`'s PPO/LSTM trained on gymnax's CartPole-v1 and
its velocity-hidden variant, in one jitted scan, rows that hold several episodes. The 500k-step readings it
exists for are in docs/PERFORMANCE.md ("The controller on a standard environment")."""

import math

import numpy as np
import pytest

pytest.importorskip("gymnax")

from rl import gymnax_check  # noqa: E402


@pytest.mark.parametrize("variant", gymnax_check.VARIANTS)
def test_a_tiny_run_trains_and_reports_its_curve(variant):
    cfg = gymnax_check.CheckConfig(variant=variant, total_steps=3 * 4 * 64, num_steps=64)
    train = gymnax_check.make_train(cfg)
    import jax

    run, metrics = train(jax.random.PRNGKey(0))
    episodes = np.asarray(metrics["episodes"])
    assert episodes.shape == (3,) and np.all(episodes > cfg.num_envs)  # every row held several episodes
    returns = np.asarray(metrics["mean_return"])
    assert np.all(np.isfinite(returns)) and np.all(returns >= 1.0)
    assert np.all(np.isfinite(np.asarray(metrics["approx_kl"])))
    assert int(run.train.train_steps) == 3
    points = gymnax_check.curve(metrics, cfg)
    assert [s for s, _ in points] == [256, 512, 768]
    assert not math.isnan(gymnax_check.last_tenth(points))


def test_the_command_prints_each_seed_and_writes_its_curve(tmp_path, capsys):
    out = tmp_path / "c.json"
    assert gymnax_check.main(["--steps", "512", "--num-steps", "64", "--seeds", "1", "--json", str(out)]) == 0
    assert "cartpole seed 1:" in capsys.readouterr().out
    import json

    kept = json.loads(out.read_text())
    assert kept["config"]["total_steps"] == 512 and len(kept["seeds"]["1"]["curve"]) == 2


def test_a_run_shorter_than_one_update_is_refused():
    with pytest.raises(ValueError, match="less than one update"):
        gymnax_check.CheckConfig(total_steps=10)
