"""best_fixed's pick rule (`fair_controls.PickRule`, `pick_order`) on synthetic search tables, the rounds that
follow it, the two-seed round, and the options that carry the rule from `compare` and `prove`."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_fx.config import TrainingConfig
from esper_fx.evaluation.fair_controls import (BLEND_FINALISTS, NO_GROWTH, PickRule, _finalists, best_by_task,
                                               blend_round, pick, pick_order, schedule_grid, schedule_name,
                                               search_best_fixed, search_episodes, second_seed_round)

CONFIG = dict(task="shapes16", slots=("r0c0", "r0c1", "r0c2"), blueprint_menu=("noop", "conv_light", "depthwise"),
              max_epochs=12)


def _schedule(i: int) -> dict:
    return {"slot": "r0c0", "blueprint": "conv_light", "blend": "sigmoid", "germinate_epoch": i, "tempo": "standard"}


def _table(accs, flops):
    """Rows as the search writes them: row 0 no growth, the others growing schedules."""
    return [{"schedule": f"s{i}", "config": None if i == 0 else _schedule(i), "accuracy_mean": float(a),
             "training_flops_mean": float(f)} for i, (a, f) in enumerate(zip(accs, flops))]


rows = st.integers(1, 12).flatmap(lambda n: st.tuples(
    st.lists(st.sampled_from([40.0, 40.25, 40.5, 41.0, 41.5, 60.0]), min_size=n, max_size=n),
    st.lists(st.sampled_from([1e9, 2e9, 2e9, 3e9, 5e9]), min_size=n, max_size=n)))


@settings(deadline=None, max_examples=200)
@given(rows)
def test_the_accuracy_rule_is_the_search_of_earlier_versions(accs_flops):
    table = _table(*accs_flops)
    assert pick(table) is max(table, key=lambda row: row["accuracy_mean"])  # the first of equals
    assert pick(table, PickRule("accuracy", 3.0)) is pick(table)  # the tolerance is cheapest's alone
    growing = [row for row in table if row["config"] is not None]
    earlier = [row["config"] for row in sorted(growing, key=lambda row: -row["accuracy_mean"])[:BLEND_FINALISTS]]
    assert _finalists(table) == earlier


@settings(deadline=None, max_examples=200)
@given(rows, st.sampled_from([0.0, 0.25, 0.5, 1.0]))
def test_cheapest_picks_the_least_flops_within_the_tolerance_of_the_best(accs_flops, within):
    table = _table(*accs_flops)
    rule = PickRule("cheapest", within)
    chosen = pick(table, rule)
    best = max(row["accuracy_mean"] for row in table)
    near = [row for row in table if row["accuracy_mean"] >= best - within]
    assert chosen["accuracy_mean"] >= best - within
    assert chosen["training_flops_mean"] == min(row["training_flops_mean"] for row in near)
    cheapest = [row for row in near if row["training_flops_mean"] == chosen["training_flops_mean"]]
    assert chosen is cheapest[0]  # ties: the first in table order
    order = pick_order(table, rule)
    assert sorted(order) == list(range(len(table)))  # every row, once
    finalists = _finalists(table, rule)
    growing_near = [row["config"] for row in sorted([r for r in near if r["config"] is not None],
                                                    key=lambda r: r["training_flops_mean"])]
    assert finalists[:len(growing_near)] == growing_near[:BLEND_FINALISTS]  # the cheap ones first


def test_cheapest_by_hand():
    table = _table([50.0, 60.0, 59.6, 59.4, 58.0], [1.0, 9.0, 4.0, 3.0, 2.0])
    assert pick(table)["schedule"] == "s1"
    assert pick(table, PickRule("cheapest", 0.5))["schedule"] == "s2"  # 59.4 is 0.6 pp below the best
    assert pick(table, PickRule("cheapest", 0.6))["schedule"] == "s3"
    assert pick(table, PickRule("cheapest", 20.0))["schedule"] == "s0"  # no growth, cheapest of all
    assert pick(table, PickRule("cheapest", 0.0))["schedule"] == "s1"
    # the finalists: the cheapest growing rows within the tolerance, then the others by accuracy
    assert [c["germinate_epoch"] for c in _finalists(table, PickRule("cheapest", 0.5))] == [2, 1, 3]
    assert [c["germinate_epoch"] for c in _finalists(table)] == [1, 2, 3]
    nan = _table([60.0, 60.0], [float("nan"), 5.0])
    assert pick(nan, PickRule("cheapest", 0.5))["schedule"] == "s1"  # a row without a FLOP count goes last


def test_the_rule_is_checked_by_name():
    with pytest.raises(ValueError, match="best_fixed_pick"):
        PickRule("fastest")
    for bad in (-0.1, float("nan"), "0.5", True):
        with pytest.raises(ValueError, match="best_fixed_within"):
            PickRule("cheapest", bad)
    assert PickRule().to_dict() == {"rule": "accuracy", "within_pp": 0.5}


def test_compare_and_prove_take_the_rule():
    from esper_fx.cli.prove import ProveError, build_parser, pick_options
    from esper_fx.evaluation.comparison import CompareOptions

    assert CompareOptions(best_fixed_pick="cheapest", best_fixed_within=1).best_fixed_within == 1.0
    with pytest.raises(ValueError, match="best_fixed_within"):
        CompareOptions(best_fixed_within=-1)
    parser = build_parser()
    args = parser.parse_args(["--arms", "wait", "best_fixed", "--best-fixed-pick", "cheapest",
                              "--best-fixed-within", "0.3"])
    assert pick_options(args) == {"best_fixed_pick": "cheapest", "best_fixed_within": 0.3}
    assert pick_options(parser.parse_args(["--arms", "best_fixed"])) == {}
    with pytest.raises(ProveError, match="--best-fixed-pick: best_fixed_pick must be one of"):
        pick_options(parser.parse_args(["--arms", "best_fixed", "--best-fixed-pick", "fastest"]))
    with pytest.raises(ProveError, match="--best-fixed-within: no arm"):
        pick_options(parser.parse_args(["--arms", "wait", "--best-fixed-within", "1"]))


def test_the_two_seed_round_adds_a_second_seed_to_the_best_one_seed_schedules():
    config = TrainingConfig(**CONFIG)
    grid = schedule_grid(config)
    table = [{"config": s, "accuracy_mean": 99.0 if s is None else float(i), "training_flops_mean": 1.0}
             for i, s in enumerate(grid)]
    extra = second_seed_round(table, config)
    finalists = [s for s in grid if s is not None][::-1][:BLEND_FINALISTS]
    assert len(extra) == BLEND_FINALISTS * 2 * 2  # two other slots × two blueprints
    for k, schedule in enumerate(finalists):
        mine = extra[k * 4:(k + 1) * 4]
        assert {(s["then_slot"], s["then_blueprint"]) for s in mine} == {
            (slot, b) for slot in CONFIG["slots"] if slot != schedule["slot"] for b in ("conv_light", "depthwise")}
        assert all({k_: v for k_, v in s.items() if not k_.startswith("then_")} == schedule for s in mine)
    # a two-seed row is never a finalist of the round; one slot gives no round
    two = [{"config": extra[0], "accuracy_mean": 1000.0, "training_flops_mean": 1.0}]
    assert second_seed_round(table + two, config) == extra
    assert second_seed_round(table, TrainingConfig(**{**CONFIG, "slots": ("r0c0",)})) == []
    assert schedule_name(extra[0]) == f"{schedule_name(finalists[0])} + {extra[0]['then_slot']}=conv_light"
    assert schedule_name(extra[0]) != schedule_name(finalists[0])


def test_search_episodes_counts_the_two_seed_round():
    config = TrainingConfig(**CONFIG)
    grid = len(schedule_grid(config))
    assert search_episodes(config, [1, 2]) == 2 * (grid + BLEND_FINALISTS * 2 + BLEND_FINALISTS * 2 * 2)
    one = TrainingConfig(**{**CONFIG, "slots": ("r0c0",)})
    assert search_episodes(one, [1]) == len(schedule_grid(one)) + BLEND_FINALISTS * 2
    # the docstring's reference numbers: three slots, four blueprints
    four = TrainingConfig(**{**CONFIG, "blueprint_menu": ("noop", "conv_light", "depthwise", "attention", "norm")})
    assert search_episodes(four, [1]) == 55
    assert search_episodes(TrainingConfig(**{**CONFIG, "blueprint_menu": four.blueprint_menu,
                                             "lifecycle": "proportional"}), [1]) == 61


class _Episode:
    def __init__(self, accuracy, flops):
        self.accuracy, self.training_flops = accuracy, flops


def test_the_search_plays_every_round_and_picks_by_the_rule():
    """The whole search over a fake runner: accuracy and FLOPs from the schedule alone (a later germination,
    cheaper and a little less accurate; a second seed, dearer and more accurate)."""
    config = TrainingConfig(**CONFIG)

    def outcome(oracle):
        two = oracle.then_slot is not None
        return 50.0 - 0.1 * oracle.germinate_epoch + (0.3 if two else 0.0), 10.0 - oracle.germinate_epoch + 5 * two

    def run_many(arms, seeds):
        out = []
        for arm in arms:
            acc, flops = (40.0, 1.0) if arm.controller.name == "wait" else outcome(arm.config.oracle)
            out.append([_Episode(acc, flops) for _ in seeds])
        return out

    best, table = search_best_fixed(config, [1, 2], run_many, lambda line: None)
    assert [row["round"] for row in table] == sorted(row["round"] for row in table)
    assert {row["round"] for row in table} == {1, 2, 3}  # grid, blends, the second seed (one tempo here)
    assert len(table) * 2 == search_episodes(config, [1, 2])
    assert all(row["training_flops"] == [row["training_flops_mean"]] * 2 for row in table)
    assert best["then_slot"] is not None and best["germinate_epoch"] == 1  # the most accurate
    cheap, cheap_table = search_best_fixed(config, [1, 2], run_many, lambda line: None, PickRule("cheapest", 0.6))
    assert "then_slot" not in cheap and cheap["germinate_epoch"] == 3  # 0.5 pp below the best (two seeds), 7 less
    assert cheap_table[0]["schedule"] == NO_GROWTH


def test_best_by_task_follows_the_rule():
    config = TrainingConfig(task="shapes16", task_mix=("shapes16", "shapes16_spatial"), slots=("r0c0",),
                            blueprint_menu=("noop", "conv_light"), max_epochs=12)
    from esper_fx.evaluation.fair_controls import default_tuning_seeds, episode_task

    seeds = list(default_tuning_seeds(config))
    table = [{"schedule": f"s{k}", "config": _schedule(k + 1), "accuracies": [50.0 - 0.1 * k] * len(seeds),
              "accuracy_mean": 50.0 - 0.1 * k, "training_flops": [10.0 - k] * len(seeds),
              "training_flops_mean": 10.0 - k} for k in range(3)]
    by_accuracy = best_by_task(config, table, seeds)
    by_cost = best_by_task(config, table, seeds, PickRule("cheapest", 0.15))
    for task in {episode_task(config, s) for s in seeds}:
        assert by_accuracy[task]["chosen"] == "s0" and by_cost[task]["chosen"] == "s1"


@pytest.mark.parametrize("case", __import__("tests.esper_fx.bad_inputs", fromlist=["PICK_CASES"]).PICK_CASES,
                         ids=lambda case: case.name)
def test_a_bad_pick_flag_or_second_seed_is_one_line_exit_2_and_nothing_written(case, tmp_path):
    from tests.esper_fx import bad_inputs

    with bad_inputs.offline():
        outcome = bad_inputs.run_case(case, tmp_path)
    assert outcome.clean and outcome.code == 2 and not outcome.traceback, outcome.describe()
    assert len(outcome.stderr.strip().splitlines()) == 1, outcome.stderr
