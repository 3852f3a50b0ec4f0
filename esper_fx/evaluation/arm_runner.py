"""Playing a comparison's arms: the episode runner (in this process, or as Ray tasks at most N at a time),
how many evaluation episodes a comparison runs, and `run_arms`, which builds every arm (the controls
after the arms they rebuild) and runs each on every seed, keeping what finished when stopped."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from esper_fx.config import TrainingConfig
from esper_fx.evaluation.arms import (STATIC_FINAL, build_arm, fossils_of, is_control, is_static_final, per_seed_arms,
                                      source_named, static_source)
from esper_fx.evaluation.fair_controls import (BEST_FIXED, DEFAULT_TUNING_SEEDS, STATIC_MATCHED, PickRule,
                                               best_by_task, budget_overrides, fixed_for, flop_ratios,
                                               matched_overrides, schedule_arm, schedule_name, search_best_fixed,
                                               search_episodes)


def warn(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class EpisodeRunner:
    """How a comparison runs its evaluation episodes: `one(arm, seeds, on_episode)` and `many(arms, seeds,
    on_episode)` (the best_fixed search: every schedule's episodes at once; `on_episode` sees them arm by arm,
    each arm's in seed order), in this process or as Ray tasks."""

    one: Callable[..., list[Any]]
    many: Callable[..., list[list[Any]]]
    workers: int  # episodes at a time as Ray tasks (0: in this process, one after another)
    fell_back: bool = False  # `auto` chose Ray and Ray could not start
    store: Any = None  # where finished episodes are kept (`evaluation.resume`: a resumable comparison), or None


@contextmanager
def episode_runner(config: TrainingConfig, n_episodes: int, say: Callable[[str], None] = warn,
                   progress: Callable[[str], None] | None = None):
    """The evaluation episodes' runner: in this process (`env_workers` 0, or `auto` where Ray does not pay),
    or as Ray tasks (`esper_fx.evaluation.ray_tasks`), `choose_eval_workers(config, n_episodes)` at a time,
    inside a Ray session for the comparison. Under `auto`, a Ray that cannot start leaves one line (`say`)
    and the episodes in this process. `progress` gets one line before Ray starts."""
    from esper_fx.distributed.auto import choose_eval_workers, fallback_line
    from esper_fx.evaluation import episodes as ev

    choice = choose_eval_workers(config, n_episodes)
    session, fell_back = None, False
    if choice.n > 0:
        from esper_fx.distributed.runtime import RaySession, RayStartError
        from esper_fx.training.preflight import check_data

        check_data(config)  # before Ray starts: a bad data file is the in-process run's one line
        try:
            session = RaySession.open(config.ray_address, choice.n, progress)
        except (ImportError, RayStartError) as exc:
            if not choice.auto:
                raise
            say(fallback_line(exc))
            fell_back = True
    if session is None:
        yield EpisodeRunner(ev.run_arm, lambda arms, seeds, on_episode=None: [ev.run_arm(a, seeds, on_episode)
                                                                                for a in arms], 0, fell_back)
        return
    from esper_fx.evaluation.ray_tasks import remote_run_arm, remote_run_arms

    try:
        yield EpisodeRunner(lambda arm, seeds, on_episode=None: remote_run_arm(arm, seeds, on_episode,
                                                                               workers=choice.n),
                            lambda arms, seeds, on_episode=None: remote_run_arms(arms, seeds, on_episode,
                                                                                 workers=choice.n), choice.n)
    finally:
        session.close()


def evaluation_episodes(arms: Mapping[str, Any], config: TrainingConfig, seeds: Sequence[int],
                        tuning_seeds: Sequence[int], train_seeds: Sequence[int] | None = None) -> int:
    """How many evaluation episodes a comparison runs: every arm (with `train_seeds`, every arm of
    `per_seed_arms`) on every seed, and the best_fixed search."""
    if train_seeds is not None:
        arms = per_seed_arms(arms, config, train_seeds)[0]
    fixed = any(is_control(a, BEST_FIXED) for a in arms.values())
    search = search_episodes(config, tuning_seeds) + len(config.task_mix) * len(seeds) if fixed else 0
    return len(arms) * len(seeds) + search


@dataclass(frozen=True)
class ArmsJob:
    """What `run_arms` plays: the arms on `config` and every evaluation seed. `static_final_of`: the arm whose
    networks `static_final` and `static_matched` rebuild (None: the first learned arm); `train_dir`: where the
    learning arms train (None writes nothing); `tuning_seeds`: where `best_fixed` searches; `pick`: how it
    picks its schedule (`fair_controls.PickRule`)."""

    arms: Mapping[str, Any]
    config: TrainingConfig
    seeds: Sequence[int]
    static_final_of: str | None = None
    train_dir: str | None = None
    quiet_training: bool = True
    tuning_seeds: Sequence[int] = DEFAULT_TUNING_SEEDS
    pick: PickRule = PickRule()


@dataclass
class ArmsResult:
    """What `run_arms` built and played: the learning arms' training results (`trained`), the arms that
    learned, in order (`learned`), every arm's episodes (`finished`: arm -> its episodes, in seed order) and
    what the controls chose (`controls`). It fills as the arms play, so a stop keeps what finished."""

    trained: dict[str, Any] = field(default_factory=dict)
    learned: list[str] = field(default_factory=list)
    finished: dict[str, list[Any]] = field(default_factory=dict)
    controls: dict[str, Any] = field(default_factory=dict)


def run_arms(job: ArmsJob, runner: EpisodeRunner, say: Callable[[str], None]) -> ArmsResult:
    """Build (train) every arm, then run each on every seed. Stopped (Ctrl-C, SIGTERM, a learning arm's
    training interrupted), it re-raises with `.partial`: the `ArmsResult` of what finished."""
    from esper_fx.training.run_state import Interrupted

    result = ArmsResult()
    try:
        _play(job, runner, say, result)
    except (KeyboardInterrupt, Interrupted) as stop:
        stop.partial = result
        raise
    return result


def _play(job: ArmsJob, runner: EpisodeRunner, say: Callable[[str], None], result: ArmsResult) -> None:
    """`run_arms`' work, into `result` as it goes."""
    from esper_fx.evaluation import episodes as ev

    arms, config, seeds, tuning_seeds = job.arms, job.config, job.seeds, job.tuning_seeds
    learned, finished, controls = result.learned, result.finished, result.controls
    built, cache = {}, {}
    for name, arm in arms.items():
        if is_static_final(arm) or is_control(arm, STATIC_MATCHED) or is_control(arm, BEST_FIXED):
            continue
        built[name], trained = build_arm(name, arm, config, seeds, job.train_dir, say, job.quiet_training, cache,
                                         resume=runner.store is not None)
        if built[name].policy is not None:
            learned.append(name)
        if trained is not None:
            result.trained[name] = trained
    for name, arm in arms.items():
        if is_static_final(arm):
            source = static_source(job.static_final_of, learned, arms, name)
            budget = arm.get("budget") if isinstance(arm, Mapping) else None
            per_seed = (fossils_of(finished[source]) if budget is None
                        else budget_overrides(finished[source], budget, config.lr_schedule))
            built[name] = ev.Arm.build(name, config, STATIC_FINAL, per_seed=per_seed)
        elif is_control(arm, STATIC_MATCHED):
            source = static_source(job.static_final_of, learned, arms, name, STATIC_MATCHED)
            built[name] = ev.Arm.build(name, config, STATIC_FINAL,
                                       per_seed=matched_overrides(finished[source], config.lr_schedule))
        elif is_control(arm, BEST_FIXED):
            best, table = search_best_fixed(config, tuning_seeds, runner.many, say, job.pick)
            per_task = best_by_task(config, table, tuning_seeds, job.pick)
            controls[BEST_FIXED] = {"tuning_seeds": list(tuning_seeds), "chosen": schedule_name(best),
                                    "pick": job.pick.to_dict(),
                                    "budget_episodes": len(table) * len(tuning_seeds), "search": table,
                                    **({"by_task": per_task} if per_task else {})}
            built[name] = schedule_arm(name, config, best)
        _run_one(name, built[name], seeds, runner, finished, say)
        if is_control(arm, BEST_FIXED):  # a task mix: each task's best schedule, played on every task
            for task, best in per_task.items():
                _run_one(fixed_for(task), schedule_arm(fixed_for(task), config, best["config"]), seeds, runner,
                         finished, say)
        if is_control(arm, STATIC_MATCHED):
            ratios = flop_ratios(finished[name], finished[source])
            key = name if source_named(arm) else STATIC_MATCHED  # several training seeds: one per seed's arm
            controls[key] = {"source": source, "flop_ratio": {str(k): v for k, v in ratios.items()}}


def _run_one(name: str, arm: Any, seeds: list[int], runner: Any, finished: dict, say: Callable[[str], None]) -> None:
    """Every seed of one built arm, kept in `finished` as they come (a stop keeps what finished)."""
    done = finished.setdefault(name, [])

    def on_episode(e):
        done.append(e)
        say(f"compare: {e.arm} seed {e.seed}: accuracy {e.accuracy:.2f}% ({e.wall_s:.1f} s)")

    finished[name] = runner.one(arm, seeds, on_episode=on_episode)
