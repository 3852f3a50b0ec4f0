"""Several training seeds in one comparison (issue 36): the arms per seed, the pairs within each seed, the
aggregate across seeds, prove.json's layout and the figure, on episodes with known numbers."""

import json

import numpy as np
import pytest

from esper_fx.config import TrainingConfig
from esper_fx.evaluation import across_seeds, stats
from esper_fx.evaluation.arms import Trained, TrainedSeeds, per_seed_arms, trained_seeds_of
from esper_fx.evaluation.comparison import compare
from esper_fx.evaluation.comparison_table import table_of
from esper_fx.evaluation.episodes import Episode
from esper_fx.evaluation.seed_sets import check_training_seeds

SEEDS = [900_000, 900_001, 900_002]
LAYOUT = {"ppo": {42: "ppo[seed=42]", 7: "ppo[seed=7]"}, "wait": {42: "wait", 7: "wait"},
          "static_final": {42: "static_final[seed=42]", 7: "static_final[seed=7]"}}
ACCURACY = {"ppo[seed=42]": [50.0, 52.0, 51.0], "ppo[seed=7]": [40.0, 45.0, 41.0], "wait": [20.0, 21.0, 22.0],
            "static_final[seed=42]": [49.0, 53.0, 50.0], "static_final[seed=7]": [43.0, 44.0, 42.0]}


def _episode(arm: str, seed: int, accuracy: float) -> Episode:
    return Episode(arm, seed, (accuracy,) * 3, 10.0, 1, 1, (), ("r0c0=conv_light",), 1.0, 836.0,
                   {"training_flops": 1e9})


def _episodes(accuracy=ACCURACY):
    return {arm: [_episode(arm, s, a) for s, a in zip(SEEDS, values)] for arm, values in accuracy.items()}


def _table(episodes=None, partial=False):
    return table_of(_episodes() if episodes is None else episodes, {}, ["ppo[seed=42]", "ppo[seed=7]"], "wait",
                    SEEDS, partial=partial, layout=LAYOUT)


def test_learned_and_static_arms_run_once_per_training_seed_the_others_once():
    config = TrainingConfig.preset("quickstart")
    arms = {"ppo": {"controller": "ppo_lstm", "greedy": True}, "wait": "wait", "oracle": "oracle",
            "static_final": "static_final", "best_fixed": "best_fixed"}
    out, layout = per_seed_arms(arms, config, [3, 4])
    assert list(out) == ["ppo[seed=3]", "ppo[seed=4]", "wait", "oracle", "static_final[seed=3]",
                         "static_final[seed=4]", "best_fixed"]
    assert out["ppo[seed=4]"] == {"controller": "ppo_lstm", "greedy": True, "config": {"seed": 4}}
    assert out["static_final[seed=4]"] == {"controller": "static_final", "of": "ppo[seed=4]"}
    assert out["wait"] == "wait" and layout["wait"] == {3: "wait", 4: "wait"}
    assert layout["static_final"] == {3: "static_final[seed=3]", 4: "static_final[seed=4]"}
    assert across_seeds.run_dir_name("ppo[seed=-4]") == "ppo-seed-4" and across_seeds.run_dir_name("ppo") == "ppo"


def test_training_seeds_need_an_arm_that_learns_and_is_not_trained_yet():
    config = TrainingConfig.preset("quickstart")
    with pytest.raises(ValueError, match="no arm learns"):
        per_seed_arms({"wait": "wait", "static_final": "static_final"}, config, [1])
    trained = Trained(config, None)
    with pytest.raises(ValueError, match="trained already"):
        per_seed_arms({"ppo": {"controller": trained}}, config, [1])


def test_controllers_trained_earlier_play_as_their_seeds_arms():
    config = TrainingConfig.preset("quickstart")
    runs = TrainedSeeds({7: Trained(config.replace(seed=7), "policy 7"),
                         3: Trained(config.replace(seed=3), "policy 3")})
    arms = {"ppo": {"controller": runs, "greedy": True}, "wait": "wait", "static_final": "static_final"}
    assert trained_seeds_of(arms) == [7, 3] and trained_seeds_of({"wait": "wait"}) is None
    out, layout = per_seed_arms(arms, config, [3, 7])
    assert list(out) == ["ppo[seed=3]", "ppo[seed=7]", "wait", "static_final[seed=3]", "static_final[seed=7]"]
    assert out["ppo[seed=7]"] == {"controller": runs.by_seed[7], "greedy": True}  # that seed's own policy
    assert out["static_final[seed=3]"] == {"controller": "static_final", "of": "ppo[seed=3]"}
    assert layout["ppo"] == {3: "ppo[seed=3]", 7: "ppo[seed=7]"}
    with pytest.raises(ValueError, match=r"training seeds \[3, 7\], not of \[3, 8\]"):
        per_seed_arms(arms, config, [3, 8])
    other = TrainedSeeds({3: runs.by_seed[3]})
    with pytest.raises(ValueError, match="different training seeds"):
        trained_seeds_of({"ppo": {"controller": runs}, "ppo_sampled": {"controller": other, "greedy": False}})


@pytest.mark.parametrize("train_seeds, needle", [
    ([], "one or more distinct"), ([3, 3], "one or more distinct"), ([2**63], "training seed 9223372036854775808"),
    ([-(2**63) - 1], "signed 64-bit"),
])
def test_compare_refuses_bad_training_seeds_before_anything_runs(train_seeds, needle):
    with pytest.raises(ValueError, match=needle):
        compare({"ppo": "ppo_lstm", "wait": "wait"}, TrainingConfig.preset("quickstart"), SEEDS,
                train_seeds=train_seeds)


def test_every_training_seed_keeps_off_the_evaluation_seeds():
    config = TrainingConfig.preset("quickstart", n_episodes=4, n_envs=2)
    check_training_seeds(config, [3, 5], [8, 900_000])
    with pytest.raises(ValueError, match="from seed 5"):  # seed 5's env 1 of batch 0 is 1005
        check_training_seeds(config, [3, 5], [1005])


def test_pairs_are_taken_within_each_training_seed():
    table = _table()
    pairs = [(p["a"], p["b"]) for p in table.pairs]
    assert pairs == [("ppo[seed=42]", "wait"), ("static_final[seed=42]", "wait"),
                     ("ppo[seed=42]", "static_final[seed=42]"), ("ppo[seed=7]", "wait"),
                     ("static_final[seed=7]", "wait"), ("ppo[seed=7]", "static_final[seed=7]")]
    assert table.pair("ppo[seed=7]", "static_final[seed=7]")["mean"] == pytest.approx((-3 + 1 - 1) / 3)


def test_the_aggregate_pairs_each_learned_arm_with_its_own_seeds_arms():
    table = _table()
    assert [(g["a"], g["b"]) for g in table.aggregate] == [("ppo", "wait"), ("ppo", "static_final")]
    static = table.aggregate[1]
    # seed 42: +1, -1, +1 (mean 1/3); seed 7: -3, +1, -1 (mean -1)
    assert static["per_seed"] == {"42": pytest.approx(1 / 3), "7": pytest.approx(-1.0)}
    assert static["mean"] == pytest.approx((1 / 3 - 1) / 2)
    assert static["p_improvement"] == pytest.approx(3 / 6)
    expected = stats.across_training_seeds([ACCURACY["ppo[seed=42]"], ACCURACY["ppo[seed=7]"]],
                                           [ACCURACY["static_final[seed=42]"], ACCURACY["static_final[seed=7]"]])
    assert (static["low"], static["high"], static["verdict"]) == (expected.low, expected.high, expected.verdict)
    wait = table.aggregate[0]
    assert wait["iqm_b"] == pytest.approx(21.0) and wait["p_improvement"] == 1.0 and wait["verdict"] == "beats"
    assert wait["iqm_a"] == pytest.approx(stats.iqm(ACCURACY["ppo[seed=42]"] + ACCURACY["ppo[seed=7]"]))


def test_the_text_shows_each_seeds_rows_and_the_aggregate():
    text = _table().to_text()
    for arm in ACCURACY:
        assert f"\n{arm} " in text
    assert "across training seeds 42 7" in text
    assert "ppo vs static_final: -0.33 [" in text and "P(ppo > static_final) 0.50" in text
    assert "per training seed +0.33 -1.00" in text
    assert "ppo vs static_final: -0.33 [" in _table()._repr_html_()


def test_prove_json_keeps_every_episode_the_layout_and_the_aggregate():
    report = json.loads(json.dumps(_table().to_dict()))
    assert report["train_seeds"] == [42, 7]
    assert report["arms_by_train_seed"]["ppo"] == {"42": "ppo[seed=42]", "7": "ppo[seed=7]"}
    assert set(report["episodes"]) == set(ACCURACY)
    assert [g["b"] for g in report["aggregate"]] == ["wait", "static_final"]


def test_a_table_without_training_seeds_keeps_todays_layout():
    episodes = {arm: eps for arm, eps in _episodes().items() if arm in ("ppo[seed=42]", "wait")}
    report = table_of(episodes, {}, ["ppo[seed=42]"], "wait", SEEDS).to_dict()
    assert set(report) == {"seeds", "partial", "rows", "pairs", "controls", "by_task", "episodes"}


def test_a_stopped_comparison_aggregates_the_training_seeds_that_finished():
    episodes = _episodes()
    del episodes["ppo[seed=7]"], episodes["static_final[seed=7]"]  # stopped before seed 7 was evaluated
    episodes["static_final[seed=42]"] = episodes["static_final[seed=42]"][:2]
    table = _table(episodes, partial=True)
    static = table.aggregate[1]
    assert static["train_seeds"] == [42] and static["n"] == 2 and static["mean"] == pytest.approx(0.0)
    assert table.aggregate[0]["train_seeds"] == [42] and table.aggregate[0]["n"] == 3


def test_the_figure_marks_each_training_seeds_mean(tmp_path):
    fig = _table().plot(tmp_path / "spread.png")
    ax = fig.axes[0]
    from matplotlib.collections import PathCollection

    means = sorted(round(float(p.get_offsets()[0][1]), 3) for p in ax.collections
                   if isinstance(p, PathCollection) and len(p.get_offsets()) == 1)  # per seed's mean; wait's
    expected = sorted(round(float(np.mean(v)), 3) for v in ACCURACY.values())
    assert means == expected
    assert (tmp_path / "spread.png").stat().st_size > 0
    assert any("(ppo -0.3 pp, ties)" in t.get_text() for t in ax.get_xticklabels())


def test_a_task_mix_pairs_each_task_within_each_training_seed():
    import dataclasses

    episodes = {arm: [dataclasses.replace(e, task="blind" if e.seed % 2 == 0 else "spatial") for e in eps]
                for arm, eps in _episodes().items()}
    table = _table(episodes)
    blind = table.by_task["blind"]
    assert blind["seeds"] == [900_000, 900_002] and len(blind["rows"]) == len(ACCURACY)
    pairs = {(p["a"], p["b"]) for p in blind["pairs"]}
    assert ("ppo[seed=7]", "static_final[seed=7]") in pairs and ("ppo[seed=7]", "static_final[seed=42]") not in pairs
    assert ("wait", "ppo[seed=42]") not in pairs and ("ppo[seed=42]", "wait") in pairs
