"""A task mix in `compare`/`prove`: the table per task, each task's arms paired over its own seeds."""

from __future__ import annotations

import pytest

from esper_fx.contracts.events import EventType
from esper_fx.evaluation.comparison_table import by_task, choices, table_of
from esper_fx.evaluation.episodes import Episode, culls, germinations
from esper_fx.outputs.events import Event


def _episode(arm: str, seed: int, acc: float, task: str, grown: tuple[str, ...] = ()) -> Episode:
    return Episode(arm, seed, (acc,) * 3, 0.0, len(grown), len(grown), (), (), 0.0, 0.0, task=task,
                   germinations=grown)


def test_each_task_gets_its_rows_and_pairs_over_its_own_seeds():
    tasks = {1: "a", 2: "a", 3: "a", 4: "b", 5: "b", 6: "b"}
    ppo = [_episode("ppo", s, 52.0 + 0.1 * (s - 2) if t == "a" else 40.0, t, ("r0c0=conv_light/gated@1",) if t == "a" else ())
           for s, t in tasks.items()]
    wait = [_episode("wait", s, 50.0 if t == "a" else 41.0 + s, t) for s, t in tasks.items()]
    table = table_of({"ppo": ppo, "wait": wait}, {}, ["ppo"], "wait", list(tasks))
    assert set(table.by_task) == {"a", "b"}
    a, b = table.by_task["a"], table.by_task["b"]
    assert a["seeds"] == [1, 2, 3] and b["seeds"] == [4, 5, 6]
    assert [r["accuracy_mean"] for r in a["rows"]] == pytest.approx([52.0, 50.0])
    assert a["pairs"][0]["mean"] == pytest.approx(2.0) and a["pairs"][0]["n"] == 3
    assert a["pairs"][0]["verdict"] == "beats" and b["pairs"][0]["verdict"] == "loses"
    assert b["pairs"][0]["mean"] == pytest.approx(-6.0)
    text = table.to_text()
    assert "task a (3 seeds):" in text and "germinated: r0c0=conv_light/gated@1 ×3" in text
    assert "task b (3 seeds):" in text and "germinated: none ×3" in text
    assert table.to_dict()["by_task"]["a"]["pairs"][0]["a"] == "ppo"


def test_one_task_adds_no_per_task_table():
    eps = {"ppo": [_episode("ppo", 1, 50.0, "shapes16")], "wait": [_episode("wait", 1, 49.0, "shapes16")]}
    assert by_task(eps, "wait", "ppo") == {}
    assert "task " not in table_of(eps, {}, ["ppo"], "wait", [1]).to_text()


def test_choices_count_the_decisions_most_frequent_first():
    eps = [_episode("x", s, 0.0, "a", g) for s, g in ((1, ("r0c1=norm/linear@2",)), (2, ()),
                                                       (3, ("r0c1=norm/linear@2",)), (4, ("r0c0=a/b@1",)))]
    assert choices(eps, [1, 2, 3]) == "r0c1=norm/linear@2 ×2, none ×1"


def test_germinations_read_the_episodes_events_in_order():
    events = [Event(EventType.SEED_GERMINATED, slot_id="r0c2", epoch=4, data={"blueprint": "norm", "blend": "linear"}),
              Event(EventType.SEED_CULLED, slot_id="r0c2", epoch=8),
              Event(EventType.SEED_GERMINATED, slot_id="r0c0", epoch=9, data={"blueprint": "conv_light",
                                                                              "blend": "gated"})]
    assert germinations(events) == ("r0c2=norm/linear@4", "r0c0=conv_light/gated@9")


def test_culls_read_who_culled_each_seed_and_when():
    events = [Event(EventType.SEED_GERMINATED, slot_id="r0c2", epoch=2, data={"blueprint": "norm", "blend": "linear"}),
              Event(EventType.SEED_CULLED, slot_id="r0c2", epoch=5, data={"reason": "probation_timeout", "auto": True}),
              Event(EventType.SEED_CULLED, slot_id="r0c0", epoch=7, data={"reason": "", "auto": False}),
              Event(EventType.SEED_CULLED, slot_id="r0c1", epoch=9, data={"reason": "governor_rollback"})]
    got = culls(events)
    assert got == ("r0c2@5: probation_timeout", "r0c0@7: controller", "r0c1@9: governor_rollback")
    episode = Episode("oracle", 1, (50.0,) * 3, 0.0, 1, 0, got, (), 0.0, 0.0)
    assert episode.culled == 3 and episode.to_dict()["culls"] == list(got) and episode.to_dict()["culled"] == 3


def test_a_task_mix_tunes_best_fixed_on_two_seeds_per_task_by_default():
    from esper_fx.config import TrainingConfig
    from esper_fx.evaluation.fair_controls import DEFAULT_TUNING_SEEDS, default_tuning_seeds

    assert default_tuning_seeds(TrainingConfig.preset("quickstart")) == DEFAULT_TUNING_SEEDS
    from hosts.tasks import mix_task

    mixed = TrainingConfig.preset("mixed")
    seeds = default_tuning_seeds(mixed)
    drawn = [mix_task(mixed.task_mix, s).name for s in seeds]
    assert sorted(drawn) == sorted(mixed.task_mix * 2)  # two seeds of each task
    assert seeds[0] == 800_000 and list(seeds) == sorted(set(seeds))


def test_each_task_gets_the_best_schedule_of_the_tuning_seeds_that_drew_it():
    from esper_fx.config import TrainingConfig
    from esper_fx.evaluation.fair_controls import best_by_task, default_tuning_seeds, fixed_for
    from hosts.tasks import mix_task

    config = TrainingConfig.preset("mixed")
    seeds = default_tuning_seeds(config)
    tasks = [mix_task(config.task_mix, s).name for s in seeds]
    # schedule k scores 10 on the seeds of task k (and 0 elsewhere): each task's best is its own schedule
    table = [{"schedule": f"s{k}", "config": {"k": k},
              "accuracies": [10.0 if t == task else 0.0 for t in tasks]} for k, task in enumerate(config.task_mix)]
    best = best_by_task(config, table, seeds)
    drawn = sorted(set(tasks))
    assert sorted(best) == drawn
    for task in drawn:
        k = config.task_mix.index(task)
        assert best[task]["chosen"] == f"s{k}" and best[task]["accuracy_mean"] == 10.0
        assert best[task]["tuning_seeds"] == [s for s, t in zip(seeds, tasks) if t == task]
    assert best_by_task(TrainingConfig.preset("quickstart"), table, seeds) == {}
    assert fixed_for("shapes16") == "best_fixed[shapes16]"


def test_an_episodes_task_is_the_configs_or_its_seeds_draw():
    from esper_fx.config import TrainingConfig
    from esper_fx.evaluation.fair_controls import episode_task
    from hosts.tasks import mix_task

    mixed = TrainingConfig.preset("mixed")
    assert [episode_task(mixed, s) for s in range(900_000, 900_008)] == \
        [mix_task(mixed.task_mix, s).name for s in range(900_000, 900_008)]
    assert episode_task(TrainingConfig.preset("quickstart"), 900_000) == "shapes16"
