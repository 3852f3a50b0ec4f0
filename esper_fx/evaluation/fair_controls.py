"""The controls a grown network must beat: a static network matched on training compute, and the best
fixed growth schedule.

- `static_matched`: per evaluation seed, the architecture another arm ended with (its fossils) trained
  from scratch as a static network for the same *training* FLOPs as that arm's grown run. The static
  network costs more per step than the host did before its seeds grew, so it gets fewer steps: a budget of
  n = round(G / (3·B·F)) steps (`train_steps_budget`), spread evenly over the same epochs, where G is the
  grown run's training FLOPs, B the samples per step and F the static network's forward FLOPs per sample
  (host plus its fossils, `hosts.env.compute`). Its learning rate decays to zero over those n steps. Its epochs may take more steps than the grown run's (`max_train_batches` lifted: a grown run whose
  seeds were culled spent FLOPs that a host-only rebuild needs more steps to match), up to what the
  training split holds. The rounding leaves the two within half a step of each other; the measured ratio
  is kept per seed. Both arms end fully decayed where the grown run decays: its schedule (cosine or wsd) is
  replayed over the static run's own steps (`matched_schedule`); against a constant rate it is a cosine.
- `best_fixed`: one fixed schedule (slot, blueprint, blend, tempo, germination epoch), or no growth at all,
  played in every episode whatever happens, found on tuning seeds that are neither training nor evaluation
  seeds in up to three rounds: every schedule of `schedule_grid` (each slot × blueprint × germination epoch
  — epoch 1 and a quarter in, and under the `immediate` clock also half and three quarters in — with the
  oracle's blend and tempo, and no growth), then every other blend on the `BLEND_FINALISTS` best
  growing schedules of that round (`blend_round`), then, where the lifecycle lets a controller choose the
  tempo, every other tempo on the `BLEND_FINALISTS` best growing schedules so far (`tempo_round`), then,
  where two or more slots are enabled, a second seed (`OracleConfig.then_slot`, `then_blueprint`: germinated
  once the masks allow it after the first, fossilized as the first) in every other enabled slot × every menu
  blueprint on the `BLEND_FINALISTS` best growing one-seed schedules so far (`second_seed_round`). Every row
  keeps its mean accuracy and mean training FLOPs over the tuning seeds. The pick rule (`PickRule`) chooses
  among all rows of all rounds, and orders the rows whose schedules the later rounds refine: `accuracy` (the
  default) the best mean accuracy; `cheapest` the row of least mean training FLOPs among those at most
  `best_fixed_within` pp below the best mean accuracy (`pick_order`). The chosen schedule is then run on the
  evaluation seeds. The budget is (len(grid) + BLEND_FINALISTS × (blends − 1) + BLEND_FINALISTS × (tempos − 1)
  + BLEND_FINALISTS × (slots − 1) × blueprints) × len(tuning seeds) episodes, the last term only with two or
  more slots (55 per tuning seed on a three-slot task with four blueprints under the reference's clock, 61
  under the proportional one), and the table is kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from esper_fx.contracts.actions import BLEND_NAMES, TEMPO_NAMES, growth_name
from esper_fx.contracts.run_settings import option
from esper_fx.config import TrainingConfig
from hosts.models.flops import BACKWARD_FACTOR
from rl.config import SECOND_SEED_FIELDS

STATIC_MATCHED = "static_matched"
BEST_FIXED = "best_fixed"
NO_GROWTH = "no growth"
DEFAULT_TUNING_SEEDS = (800_000,)
MIX_TUNING_SEEDS_PER_TASK = 2  # a task mix: this many tuning seeds per task (each seed draws its own task)
MATCH_TOLERANCE = 0.05  # static_matched's training FLOPs within 5% of the grown run's
BLEND_FINALISTS = 3  # best_fixed's second round tries every other blend on this many of the first's best
PICK_RULES = ("accuracy", "cheapest")  # how best_fixed picks its schedule (`PickRule`)


@dataclass(frozen=True)
class PickRule:
    """How `best_fixed` picks its schedule from the search table, declared once: `esper_fx.compare` takes each
    field as an option (`CompareOptions` inherits them) and `python -m esper_fx.prove` as a flag
    (`--best-fixed-pick`, `--best-fixed-within`). `pick_order` applies it."""

    best_fixed_pick: str = option("accuracy", "how best_fixed picks its schedule from the search: accuracy, the "
                                  "best mean accuracy on the tuning seeds; cheapest, the least mean training "
                                  "FLOPs among the schedules at most best_fixed_within pp below the best (the "
                                  "later rounds refine the first schedules in the same order)",
                                  metavar="|".join(PICK_RULES))
    best_fixed_within: float = option(0.5, "under best_fixed_pick cheapest, how many pp of mean accuracy below the "
                                      "best schedule's a cheaper schedule may give up", metavar="PP")

    def __post_init__(self) -> None:
        if self.best_fixed_pick not in PICK_RULES:
            raise ValueError(f"best_fixed_pick must be one of {list(PICK_RULES)} (got {self.best_fixed_pick!r})")
        within = self.best_fixed_within
        if isinstance(within, bool) or not isinstance(within, (int, float)) or not math.isfinite(within) or within < 0:
            raise ValueError(f"best_fixed_within must be a finite number of pp >= 0 (got {within!r})")
        object.__setattr__(self, "best_fixed_within", float(within))

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.best_fixed_pick, "within_pp": self.best_fixed_within}


# ----------------------------------------------------------------------------------------------
# static_matched
# ----------------------------------------------------------------------------------------------


def matched_steps(episode: Any) -> tuple[int, float]:
    """(training steps, the expected FLOP ratio static / grown) of the compute-matched static rebuild of
    `episode`'s final architecture."""
    units, grown = episode.compute_units, episode.training_flops
    if not units or not np.isfinite(grown) or grown <= 0:
        raise ValueError(f"static_matched: the {episode.arm} episode on seed {episode.seed} has no FLOP count")
    per_sample = units["host"] + sum(units[f] for f in episode.fossils)
    batch = units["train_samples"] / units["train_steps"]
    step_flops = (1 + BACKWARD_FACTOR) * per_sample * batch
    steps = max(1, round(grown / step_flops))
    return steps, steps * step_flops / grown


def matched_schedule(grown_schedule: str) -> str:
    """static_matched's rate schedule over its own budget: the grown run's, decayed; a grown run at a constant
    rate is matched by a cosine to zero (the stricter control), one that decays by the same decay."""
    return "cosine" if grown_schedule == "constant" else grown_schedule


def matched_overrides(source: Sequence[Any], grown_schedule: str = "constant") -> Callable[[int], dict[str, Any]]:
    """Per evaluation seed, the config changes of the static_matched episode (its fossils, its steps, its
    decaying schedule over them: `matched_schedule`)."""
    by_seed = {}
    for e in source:
        steps, _ = matched_steps(e)
        by_seed[e.seed] = {"static_seeds": tuple(e.fossils), "train_steps_budget": steps,
                           "lr_schedule": matched_schedule(grown_schedule), "lr_schedule_steps": None,
                           "max_train_batches": 0}  # the budget, not the per-epoch cap, sets the steps
    return lambda seed: dict(by_seed[seed])


def budget_overrides(source: Sequence[Any], fraction: float, grown_schedule: str = "constant"
                     ) -> Callable[[int], dict[str, Any]]:
    """Per evaluation seed, the config changes of `static_final@fraction` (LEARNING §3): the source's final
    architecture trained on `fraction` of the steps its episode took, spread over the same epochs, its rate
    decayed over those steps as `static_matched`'s is (`matched_schedule`). With `static_final` (the whole
    budget) these episodes draw the static network's accuracy against its training compute
    (`esper_fx.evaluation.iso_accuracy`)."""
    by_seed = {}
    for e in source:
        steps = e.compute_units.get("train_steps") if e.compute_units else None
        if not steps:
            raise ValueError(f"static_final@{fraction:g}: the {e.arm} episode on seed {e.seed} has no step count")
        by_seed[e.seed] = {"static_seeds": tuple(e.fossils), "train_steps_budget": max(1, round(fraction * steps)),
                           "lr_schedule": matched_schedule(grown_schedule), "lr_schedule_steps": None}
    return lambda seed: dict(by_seed[seed])


def flop_ratios(matched: Sequence[Any], source: Sequence[Any]) -> dict[int, float]:
    """Per seed, the measured training FLOPs of static_matched over those of the grown run."""
    grown = {e.seed: e.training_flops for e in source}
    return {e.seed: e.training_flops / grown[e.seed] for e in matched}


# ----------------------------------------------------------------------------------------------
# best_fixed
# ----------------------------------------------------------------------------------------------


def germination_epochs(max_epochs: int, isolated: bool = True, until: int | None = None) -> tuple[int, ...]:
    """Epoch 1 and a quarter into the episode. Under a clock without an isolated phase (`immediate`), where a
    late seed works at once and growing late is what saves compute, also half and three quarters into it,
    each only while a seed germinated then could still be fossilized (`until`: the clock's last such epoch)."""
    if isolated:
        return tuple(sorted({1, max(1, max_epochs // 4)}))
    epochs = {1} | {max(1, int(max_epochs * q)) for q in (0.25, 0.5, 0.75)}
    return tuple(sorted(e for e in epochs if until is None or e <= until or e == 1))


def schedule_grid(config: TrainingConfig) -> list[dict[str, Any] | None]:
    """Every schedule the search tries: None (no growth), then each enabled slot × menu blueprint ×
    germination epoch with the oracle's blend."""
    blueprints = [b for b in config.menu if b != "noop"]
    timings = config.lifecycle_timings
    grid: list[dict[str, Any] | None] = [None]
    for slot in config.enabled_slots:
        for blueprint in blueprints:
            for epoch in germination_epochs(config.max_epochs, timings.isolated, timings.germinate_until()):
                grid.append({"slot": slot, "blueprint": blueprint, "blend": config.oracle.blend,
                             "germinate_epoch": epoch, "tempo": config.oracle.tempo})
    return grid


def schedule_name(schedule: dict[str, Any] | None) -> str:
    """"no growth", the first seed's `growth_name`, and a second seed's " + slot=blueprint" after it."""
    if schedule is None:
        return NO_GROWTH
    name = growth_name(schedule["slot"], schedule["blueprint"], schedule["blend"], schedule["germinate_epoch"],
                       schedule.get("tempo"))
    if two_seeds(schedule):
        name += f" + {schedule['then_slot']}={schedule['then_blueprint']}"
    return name


def two_seeds(schedule: dict[str, Any]) -> bool:
    """Whether a growing schedule of the search grows a second seed (`OracleConfig.two_seeds` on its dict)."""
    return schedule.get("then_slot") is not None


def schedule_arm(name: str, config: TrainingConfig, schedule: dict[str, Any] | None):
    """The evaluate.Arm that plays `schedule` (the oracle with it, or the static host for no growth). A one-seed
    schedule grows one seed whatever second seed `config.oracle` names."""
    from esper_fx.evaluation import episodes as ev

    if schedule is None:
        return ev.Arm.build(name, config, "wait")
    oracle = {**config.oracle.to_dict(), **dict.fromkeys(SECOND_SEED_FIELDS), **schedule}
    return ev.Arm.build(name, config.replace(oracle=oracle), "oracle")


def blend_round(table: Sequence[dict[str, Any]], config: TrainingConfig,
                rule: PickRule = PickRule()) -> list[dict[str, Any]]:
    """The second round: each other blend on the BLEND_FINALISTS best growing schedules of `table` by `rule`
    (`_finalists`; stable order: the first of equals, as in the grid)."""
    return [{**config_, "blend": blend} for config_ in _finalists(table, rule)
            for blend in BLEND_NAMES if blend != config_["blend"]]


def tempo_round(table: Sequence[dict[str, Any]], config: TrainingConfig,
                rule: PickRule = PickRule()) -> list[dict[str, Any]]:
    """The third round: each other tempo the lifecycle allows on the BLEND_FINALISTS best growing schedules
    of `table` by `rule` (none under the reference's clock, which allows the standard tempo alone)."""
    tempos = [TEMPO_NAMES[k] for k in config.lifecycle_timings.tempos]
    if len(tempos) < 2:
        return []
    return [{**config_, "tempo": tempo} for config_ in _finalists(table, rule)
            for tempo in tempos if tempo != config_.get("tempo", "standard")]


def second_seed_round(table: Sequence[dict[str, Any]], config: TrainingConfig,
                      rule: PickRule = PickRule()) -> list[dict[str, Any]]:
    """The last round, where two or more slots are enabled: on the BLEND_FINALISTS best growing one-seed
    schedules of `table` by `rule`, a second seed in each other enabled slot × each menu blueprint but noop
    (`OracleConfig.then_slot`, `then_blueprint`: the first's blend and tempo, germinated once the masks allow
    after the first's epoch)."""
    if len(config.enabled_slots) < 2:
        return []
    one_seed = [row for row in table if row["config"] is None or not two_seeds(row["config"])]
    blueprints = [b for b in config.menu if b != "noop"]
    return [{**config_, "then_slot": slot, "then_blueprint": blueprint} for config_ in _finalists(one_seed, rule)
            for slot in config.enabled_slots if slot != config_["slot"] for blueprint in blueprints]


def _finalists(table: Sequence[dict[str, Any]], rule: PickRule = PickRule()) -> list[dict[str, Any]]:
    """The schedules of the BLEND_FINALISTS first growing rows in `rule`'s order (`pick_order`): under
    `accuracy` the most accurate; under `cheapest` the cheapest of those within the tolerance of the best
    row of `table` (no growth included), then the others by accuracy (stable order: the first of equals)."""
    order = pick_order(table, rule)
    return [table[i]["config"] for i in order if table[i]["config"] is not None][:BLEND_FINALISTS]


def pick_order(table: Sequence[dict[str, Any]], rule: PickRule = PickRule()) -> list[int]:
    """The rows of `table` (each with `accuracy_mean` and, for `cheapest`, `training_flops_mean`) by index, in
    the order `rule` prefers them; its first is the one picked. `accuracy`: by mean accuracy, best first.
    `cheapest`: the rows at most `best_fixed_within` pp below the best mean accuracy by mean training FLOPs,
    least first (a row without a finite FLOP count last among them), then the others by mean accuracy. Sorts
    are stable: of equals, the first in table order (the simpler schedule)."""
    by_accuracy = sorted(range(len(table)), key=lambda i: -table[i]["accuracy_mean"])
    if rule.best_fixed_pick == "accuracy" or not table:
        return by_accuracy
    floor = table[by_accuracy[0]]["accuracy_mean"] - rule.best_fixed_within
    near = [i for i in range(len(table)) if table[i]["accuracy_mean"] >= floor]
    cheap = sorted(near, key=lambda i: _finite_or_inf(table[i].get("training_flops_mean")))
    return cheap + [i for i in by_accuracy if i not in set(near)]


def _finite_or_inf(value: Any) -> float:
    return float(value) if value is not None and math.isfinite(value) else math.inf


def pick(table: Sequence[dict[str, Any]], rule: PickRule = PickRule()) -> dict[str, Any]:
    """The row `rule` picks from `table` (`pick_order`'s first)."""
    if not table:
        raise ValueError("best_fixed: the search table is empty")
    return table[pick_order(table, rule)[0]]


def episode_task(config: TrainingConfig, seed: int) -> str:
    """The task an evaluation (or tuning) episode on `seed` runs: `config.task`, or for a task mix the one its
    env draws (the episode is env 0 of batch 0, so the env's seed is `seed`)."""
    from hosts.tasks import mix_task

    return mix_task(config.task_mix, seed).name if config.task_mix else config.task.value


def default_tuning_seeds(config: TrainingConfig) -> tuple[int, ...]:
    """Where `best_fixed` searches by default: DEFAULT_TUNING_SEEDS, or for a task mix the first seeds from
    there that draw each task, MIX_TUNING_SEEDS_PER_TASK per task (chosen by the task a seed draws, never by
    an outcome: consecutive seeds can miss a task, as 800000–800005 miss shapes16_spatial)."""
    if not config.task_mix:
        return DEFAULT_TUNING_SEEDS
    wanted = dict.fromkeys(config.task_mix, MIX_TUNING_SEEDS_PER_TASK)
    seeds, seed = [], DEFAULT_TUNING_SEEDS[0]
    while any(wanted.values()):
        task = episode_task(config, seed)
        if wanted[task]:
            seeds.append(seed)
            wanted[task] -= 1
        seed += 1
    return tuple(seeds)


def search_row(schedule: dict[str, Any] | None, round_: int, episodes: Sequence[Any]) -> dict[str, Any]:
    """One row of the search table: the schedule, its round, its accuracy and training FLOPs per tuning seed
    and their means."""
    accs = [float(e.accuracy) for e in episodes]
    flops = [float(e.training_flops) for e in episodes]
    return {"schedule": schedule_name(schedule), "round": round_, "config": schedule, "accuracies": accs,
            "accuracy_mean": float(np.mean(accs)), "training_flops": flops,
            "training_flops_mean": float(np.mean(flops))}


def search_best_fixed(config: TrainingConfig, tuning_seeds: Sequence[int], run_many: Callable,
                      say: Callable[[str], None], rule: PickRule = PickRule()
                      ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(the schedule `rule` picks, the search table: one row per schedule with its round, its accuracy and
    training FLOPs per tuning seed and their means). `run_many(arms, seeds)`: every arm's episodes on
    `seeds`; a round's schedules go at once (as Ray tasks, they share the cores). The rounds are numbered in
    the order they ran (a round with no schedule is skipped)."""
    table: list[dict[str, Any]] = []

    def play(schedules: Sequence[dict[str, Any] | None]) -> None:
        if not schedules:
            return
        round_ = max((row["round"] for row in table), default=0) + 1
        results = run_many([schedule_arm(BEST_FIXED, config, schedule) for schedule in schedules], list(tuning_seeds))
        for schedule, episodes in zip(schedules, results):
            table.append(search_row(schedule, round_, episodes))
            say(f"compare: best_fixed search: {schedule_name(schedule)}: {table[-1]['accuracy_mean']:.2f}%")

    play(schedule_grid(config))
    play(blend_round(table, config, rule))
    play(tempo_round(table, config, rule))
    play(second_seed_round(table, config, rule))
    return pick(table, rule)["config"], table


def best_by_task(config: TrainingConfig, table: Sequence[dict[str, Any]], tuning_seeds: Sequence[int],
                 rule: PickRule = PickRule()) -> dict[str, dict[str, Any]]:
    """A task mix: each task's schedule in the search table by `rule` (`pick`), over the tuning seeds that drew
    it (a tuning seed's task is `episode_task`); {} without a mix. A task no tuning seed drew is left out."""
    if not config.task_mix:
        return {}
    tasks = [episode_task(config, seed) for seed in tuning_seeds]
    out = {}
    for task in config.task_mix:
        mine = [i for i, t in enumerate(tasks) if t == task]
        if not mine:
            continue
        rows = [_over_seeds(row, mine) for row in table]
        best = pick(rows, rule)  # the first of equals: the simpler schedule
        out[task] = {"chosen": best["schedule"], "config": best["config"], "accuracy_mean": best["accuracy_mean"],
                     "tuning_seeds": [int(tuning_seeds[i]) for i in mine]}
    return out


def _over_seeds(row: dict[str, Any], mine: Sequence[int]) -> dict[str, Any]:
    """`row` with its means over the tuning seeds at positions `mine` (a row without per-seed FLOPs has none)."""
    flops = row.get("training_flops")
    return {**row, "accuracy_mean": float(np.mean([row["accuracies"][i] for i in mine])),
            "training_flops_mean": float(np.mean([flops[i] for i in mine])) if flops else None}


def fixed_for(task: str) -> str:
    """The arm that plays `task`'s best fixed schedule on every evaluation seed, whatever its task."""
    return f"{BEST_FIXED}[{task}]"


def search_episodes(config: TrainingConfig, tuning_seeds: Sequence[int]) -> int:
    """At most how many episodes the search runs (every round; the later ones may find fewer finalists)."""
    tempos = len(config.lifecycle_timings.tempos)
    slots, blueprints = len(config.enabled_slots), len([b for b in config.menu if b != "noop"])
    second = BLEND_FINALISTS * (slots - 1) * blueprints if slots >= 2 else 0
    per_seed = (len(schedule_grid(config)) + BLEND_FINALISTS * (len(BLEND_NAMES) - 1)
                + BLEND_FINALISTS * (tempos - 1) + second)
    return per_seed * len(tuning_seeds)
