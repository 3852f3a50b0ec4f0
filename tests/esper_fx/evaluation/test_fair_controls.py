"""static_matched (a static rebuild matched on training FLOPs) and best_fixed (a searched fixed schedule)."""

import pytest

from esper_fx.evaluation.comparison import compare
from esper_fx.config import TrainingConfig
from esper_fx.contracts.actions import BLEND_NAMES
from esper_fx.evaluation.fair_controls import (BLEND_FINALISTS, NO_GROWTH, blend_round, matched_steps, schedule_grid,
                                               schedule_name)

# shapes16 at a tiny size: a seed germinated at epoch 1 is fossilized by epoch 10 of 12
TINY = dict(task="shapes16", n_envs=1, n_episodes=1, max_epochs=12, synthetic_train_samples=1024,
            synthetic_test_samples=64, batch_size_per_env=32, max_train_batches=2, seed=11, slots=("r0c0",),
            blueprint_menu=("noop", "conv_light"), data_split="full", num_minibatches=1,
            oracle={"slot": "r0c0", "blueprint": "conv_light", "blend": "sigmoid", "germinate_epoch": 1})


@pytest.fixture(scope="module")
def table():
    config = TrainingConfig(**TINY)
    arms = {"wait": "wait", "oracle": "oracle", "static_matched": "static_matched", "best_fixed": "best_fixed"}
    return compare(arms, config, seeds=[5, 6], progress=None, tuning_seeds=[7])


def test_static_matched_spends_the_grown_runs_training_flops_within_5_percent(table):
    grown = {e.seed: e for e in table.episodes["oracle"]}
    assert all(e.germinated == 1 for e in grown.values())  # seeds' FLOPs spent in the grown runs
    for e in table.episodes["static_matched"]:
        ratio = e.training_flops / grown[e.seed].training_flops
        assert abs(ratio - 1) <= 0.05, (e.seed, ratio)
        assert e.fossils == grown[e.seed].fossils and e.germinated == 0
        steps, expected = matched_steps(grown[e.seed])
        assert e.compute_units["train_steps"] == steps
        if e.fossils:  # the grown network costs more per step than the host it grew from
            assert steps < grown[e.seed].compute_units["train_steps"]
        assert ratio == pytest.approx(expected, rel=1e-9)
    assert set(table.controls["static_matched"]["flop_ratio"]) == {"5", "6"}


def test_matched_steps_by_hand():
    from esper_fx.evaluation.episodes import Episode

    # host 100 FLOPs a sample, a fossil of 50; batches of 4; the grown run spent 3·4·(100·90 + 150·30) FLOPs
    grown = 3 * 4 * (100 * 90 + 150 * 30)
    units = {"host": 100.0, "r0c0=conv_light": 50.0, "train_steps": 120.0, "train_samples": 480.0}
    e = Episode("oracle", 1, (50.0,), 0.0, 1, 1, (), ("r0c0=conv_light",), 0.0, 0.0,
                {"training_flops": float(grown)}, units)
    steps, ratio = matched_steps(e)
    assert steps == 90 and ratio == pytest.approx(3 * 4 * 150 * 90 / grown)  # 13500/13500 = 1 exactly
    assert ratio == pytest.approx(1.0)


def test_best_fixed_searches_every_schedule_on_the_tuning_seed_and_keeps_the_table(table):
    search = table.controls["best_fixed"]
    grid = schedule_grid(TrainingConfig(**TINY))
    first = [row for row in search["search"] if row["round"] == 1]
    second = [row for row in search["search"] if row["round"] == 2]
    assert [row["schedule"] for row in first] == [schedule_name(s) for s in grid]
    assert [row["config"] for row in second] == blend_round(first, TrainingConfig(**TINY))
    assert search["search"][0]["schedule"] == NO_GROWTH
    assert search["tuning_seeds"] == [7] and search["budget_episodes"] == len(first) + len(second)
    best = max(search["search"], key=lambda r: r["accuracy_mean"])
    assert search["chosen"] == best["schedule"]
    assert [e.seed for e in table.episodes["best_fixed"]] == [5, 6]


def test_the_blend_round_tries_every_other_blend_on_the_best_growing_schedules():
    config = TrainingConfig(**{**TINY, "slots": ("r0c0", "r0c1", "r0c2"),
                               "blueprint_menu": ("noop", "conv_light", "depthwise")})
    grid = schedule_grid(config)
    assert len(grid) == 1 + 3 * 2 * 2 > BLEND_FINALISTS  # no growth, slot × blueprint × two epochs
    table = [{"config": s, "accuracy_mean": 99.0 if s is None else float(i)} for i, s in enumerate(grid)]
    second = blend_round(table, config)
    finalists = [s for s in grid if s is not None][::-1][:BLEND_FINALISTS]  # the highest accuracies last
    assert len(second) == BLEND_FINALISTS * (len(BLEND_NAMES) - 1)
    for k, schedule in enumerate(finalists):
        tried = second[k * 2:(k + 1) * 2]
        assert {s["blend"] for s in tried} == set(BLEND_NAMES) - {schedule["blend"]}
        assert all({**s, "blend": schedule["blend"]} == schedule for s in tried)  # only the blend changed
    assert all(s is not None for s in second)  # no growth has no blend to vary, however well it did


def test_the_table_gains_parameters_and_training_gflops(table):
    rows = {r["arm"]: r for r in table.rows}
    assert rows["oracle"]["params_mean"] > rows["wait"]["params_mean"] > 0
    assert rows["wait"]["params_mean"] <= rows["static_matched"]["params_mean"] <= rows["oracle"]["params_mean"]
    assert rows["oracle"]["training_gflops_mean"] > rows["wait"]["training_gflops_mean"] > 0
    assert "train GFLOPs" in table.to_text()
    episode = table.to_dict()["episodes"]["oracle"][0]
    assert episode["training_flops"] > 0 and episode["flops"]["validation_flops"] > 0
    assert episode["flops"]["seed_isolated_flops"] > 0  # the germinated seed trained on its own first


def test_tuning_seeds_must_not_be_evaluation_seeds():
    with pytest.raises(ValueError, match="tuning seeds"):
        compare({"best_fixed": "best_fixed"}, TrainingConfig(**TINY), seeds=[5], progress=None, tuning_seeds=[5])


def test_the_immediate_clock_searches_late_germinations_too():
    from esper_fx.evaluation.fair_controls import germination_epochs

    assert germination_epochs(12) == (1, 3)  # an isolating clock: as before
    assert germination_epochs(20, isolated=False, until=18) == (1, 5, 10, 15)
    assert germination_epochs(20, isolated=False, until=12) == (1, 5, 10)  # only while it can still fossilize
    config = TrainingConfig(task="shapes16_spatial", slots=("r0c0",), lifecycle="immediate", max_epochs=20,
                            blueprint_menu=("noop", "copy_block"))
    epochs = [row["germinate_epoch"] for row in schedule_grid(config) if row is not None]
    assert epochs == [1, 5, 10, 15]


def test_without_a_learned_arm_the_static_arms_rebuild_the_oracle_or_else_best_fixed():
    from esper_fx.evaluation.arms import default_source

    assert default_source(["oracle", "best_fixed", "static_final"]) == "oracle"
    assert default_source(["best_fixed", "wait", "static_final"]) == "best_fixed"
    assert default_source(["wait", "static_final"]) == "oracle"  # (refused later: list it first)


def test_every_search_row_keeps_its_training_flops_and_the_rule(table):
    search = table.controls["best_fixed"]
    assert search["pick"] == {"rule": "accuracy", "within_pp": 0.5}
    rows = search["search"]
    for row in rows:
        assert len(row["training_flops"]) == 1 and row["training_flops_mean"] == row["training_flops"][0] > 0
    assert rows[0]["schedule"] == NO_GROWTH  # the static host trains the fewest FLOPs
    assert rows[0]["training_flops_mean"] < min(row["training_flops_mean"] for row in rows[1:])
