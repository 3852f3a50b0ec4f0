"""The growth settings end to end (issue 54): a PPO run with a host that starts small, host-initialised
blueprints, the immediate clock, a seed's own rate, carried momentum and the fit gap in the observation trains,
resumes to the unbroken run's numbers, and gives the same run on Ray workers as in process; `compare` plays the
oracle's growth against the static curve."""

import jax
import numpy as np
import pytest

import esper_fx
from esper_fx.config import TrainingConfig
from esper_fx.distributed import auto
from esper_fx.evaluation.arms import budget_arms
from esper_fx.evaluation import iso_accuracy

# shapes16_spatial's host (three equal 3x3 blocks, as fashion_growth's) on generated images, at half width
GROWTH = dict(
    task="shapes16_spatial", n_envs=2, max_epochs=4, n_episodes=4, synthetic_train_samples=256,
    synthetic_test_samples=64, batch_size_per_env=32, max_train_batches=3, seed=3, device="cpu", checkpoint_every=1,
    num_minibatches=1, tensorboard=False, report=False, slots=("r0c0", "r0c1"), lifecycle="immediate",
    lr_schedule="wsd", blueprint_menu=("noop", "copy_block", "widen"), host_width=0.5, seed_lr_scale=0.5,
    seed_optimizer_state="carry", observe_fit_gap=True, env_workers=0,
)


def config(**overrides) -> TrainingConfig:
    return TrainingConfig(**{**GROWTH, **overrides})


def _history(result):
    return [{k: v for k, v in h.to_dict().items() if k not in ("wall_time_s", "timing")} for h in result.history]


def _same_params(a, b) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb))


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory):
    return esper_fx.run(config(), run_dir=tmp_path_factory.mktemp("growth") / "run", quiet=True)


def test_a_growth_run_trains_and_germinates_host_copies(unbroken):
    assert len(unbroken.history) == 2
    assert unbroken.controller_state is not None
    assert sum(h.seeds_created for h in unbroken.history) >= 1
    germinated = [e for e in unbroken.events if e["event_type"] == "SEED_GERMINATED"]
    assert {e["data"]["blueprint"] for e in germinated} <= {"copy_block", "widen"}


def test_a_growth_run_resumes_to_the_unbroken_runs_numbers(unbroken, tmp_path):
    first = esper_fx.run(config(n_episodes=2), run_dir=tmp_path / "run", quiet=True)
    assert len(first.history) == 1
    resumed = esper_fx.run(config(resume_path=str(tmp_path / "run")), quiet=True)
    assert _history(resumed) == _history(unbroken)
    assert _same_params(resumed.controller_state.params, unbroken.controller_state.params)


@pytest.mark.slow
def test_a_growth_run_on_ray_workers_is_the_in_process_run(unbroken, monkeypatch, tmp_path):
    pytest.importorskip("ray")
    monkeypatch.setattr(auto, "RAY_MIN_ENV_EPOCHS", 1)  # the tiny run pays Ray's start-up here
    result = esper_fx.run(config(env_workers=2), run_dir=tmp_path / "ray", quiet=True)
    assert result.summary["timing"]["env_workers"] == 2
    assert _history(result) == _history(unbroken)
    assert _same_params(result.controller_state.params, unbroken.controller_state.params)


def test_compare_plays_the_oracles_growth_against_the_static_curve():
    cfg = config(n_episodes=1, oracle={"slot": "r0c0", "blueprint": "copy_block", "blend": "linear",
                                       "germinate_epoch": 1, "tempo": "standard"})
    arms = {"oracle": "oracle", "wait": "wait", "static_final": "static_final",
            **budget_arms([0.5])}
    table = esper_fx.compare(arms, cfg, seeds=[900_000, 900_001], progress=None)
    assert [e.germinations for e in table.episodes["oracle"]] == [("r0c0=copy_block/linear@1",)] * 2
    grown = {e.seed: e for e in table.episodes["oracle"]}
    static = {e.seed: e for e in table.episodes["static_final"]}
    half = {e.seed: e for e in table.episodes["static_final@0.5"]}
    for seed, e in half.items():  # the curve rebuilds what the oracle ended with (a 4-epoch episode may cull it)
        assert e.fossils == static[seed].fossils == grown[seed].fossils
        assert e.training_flops == pytest.approx(0.5 * static[seed].training_flops, rel=0.1)
    (entry,) = [s for s in table.savings if s["arm"] == "oracle"]
    assert entry["curve"] == "static_final" and entry["n"] == 2
    fraction = sum(e.training_flops for e in grown.values()) / sum(e.training_flops for e in static.values())
    assert entry["flops_fraction"] == pytest.approx(fraction)
    assert "iso_accuracy_saving" in table.to_dict()
    assert table.ceilings == iso_accuracy.ceilings(table.episodes)  # wait beside the curve: its ceiling, if it has one
    assert ("growth_ceiling" in table.to_dict()) == bool(table.ceilings)
