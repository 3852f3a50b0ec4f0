"""`esper_fx.compare`: arms on the same evaluation seeds, compared seed by seed (LEARNING.md §3).

    table = esper_fx.compare({"ppo": "ppo_lstm", "static": "wait", "oracle": "oracle"}, config,
                             seeds=range(900_000, 900_008))
    table              # renders as an HTML table in Jupyter, plain text elsewhere
    table.rows         # one dict per arm: accuracy mean ± sd, parameters added, seeds per episode
    table.pairs        # paired differences with 95% intervals and a verdict ("beats", "ties", "loses")
    table.episodes     # arm -> [evaluate.Episode per seed]

An arm is
- a controller that does not learn (a registered name, a Controller bundle or a constructor): run on
  every seed;
- a controller that learns (`"ppo_lstm"`, `"ppo_mlp"`, or a learning bundle): trained once on `config`
  (its training episodes never use an evaluation seed), then its greedy policy is run on every seed;
- a `Trained` (a training configuration and a `Policy`, e.g. from `episodes.load_policy`): run greedily;
- `"static_final"`: per seed, the architecture another arm ended with (its fossils), built fossilized
  before epoch 1 and trained from scratch as a static network (`static_final_of`, default: the first
  learned arm, else "oracle");
- `"static_matched"`: the same architecture trained for the same training FLOPs as that arm's grown run,
  its learning rate decayed by a cosine over its own steps; `"best_fixed"`: the best fixed schedule found
  on `tuning_seeds` (`esper_fx.evaluation.fair_controls`; the search table is kept in `table.controls`), the
  most accurate or, with `best_fixed_pick="cheapest"`, the cheapest within `best_fixed_within` pp of it;
- a dict of the above under "controller", with "reward_fn", "config" overrides and "greedy" (False samples).

With `train_seeds` (several training seeds, `esper_fx.evaluation.across_seeds`) every learning arm is
trained once per seed (`config.seed` = S, written to `<train_dir>/<arm>-seed<S>`) and each policy runs on
every evaluation seed as `<arm>[seed=S]`; `static_final` and `static_matched` rebuild each seed's network
(`static_final[seed=S]`); the other arms run once. The pairs are taken within each training seed, and
`table.aggregate` holds the first learned arm against every other across training seeds.

`python -m esper_fx.prove` is this function with a command line, files and a plot.

With `resume=DIR` every finished episode is kept in DIR as it finishes and the learning arms train in
`DIR/train` (unless `train_dir` says otherwise); a call stopped anywhere and made again with the same
arguments and `resume=DIR` reuses every finished training run and episode, continues a stopped training run
with train's own resume, and returns the table an unbroken call returns (`esper_fx.evaluation.resume`).

Stopped by Ctrl-C or SIGTERM (a `KeyboardInterrupt`, or `run_state.Interrupted` from a learning arm's training),
`compare` re-raises the same exception with `.partial`: a `ComparisonTable` (`partial=True`) of the
episodes that finished, paired over the seeds both arms of a pair finished.

With `config.env_workers` N > 0 the evaluation episodes run as Ray tasks, at most N at a time
(`esper_fx.evaluation.ray_tasks`), and the learning arms train with N Ray env workers; under `auto` (the
default) the episodes run one per usable core at a time and training takes `auto`'s own choice
(`esper_fx.distributed.auto`); 0 keeps everything in this process. The best_fixed search sends all its
schedules' episodes at once. The per-seed numbers are those of a serial comparison either way. Ray is
joined at `config.ray_address`, or started for the comparison.

Its parts: the arms and how they are built (`esper_fx.evaluation.arms`), playing them
(`esper_fx.evaluation.arm_runner`), the table it returns (`esper_fx.evaluation.comparison_table`) and the
seed checks (`esper_fx.evaluation.seed_sets`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from bridge.jax_env import ensure_jax_env
from esper_fx.config import TrainingConfig
from esper_fx.evaluation.arm_runner import (ArmsJob, ArmsResult, EpisodeRunner, episode_runner, evaluation_episodes,
                                            run_arms)
from esper_fx.evaluation.arms import is_control, per_seed_arms, trained_seeds_of
from esper_fx.evaluation.comparison_table import ComparisonTable, table_of
from esper_fx.evaluation.fair_controls import BEST_FIXED, PickRule, default_tuning_seeds
from esper_fx.evaluation.seed_sets import check_seeds, check_train_seeds, check_training_seeds, check_tuning_seeds
from esper_fx.training import compile_cache
from esper_fx.training.threads import limit_cpu_threads

BASELINE = "wait"


@dataclass(frozen=True)
class CompareOptions(PickRule):
    """`compare`'s options, each passed to it by keyword (`compare(arms, config, seeds, resume=DIR)`).

    `baseline`: every arm is paired against it (when it is an arm), beside the first learned arm against
    every other. `static_final_of`: the arm whose networks `static_final` and `static_matched` rebuild
    (default: the first learned arm, else "oracle"). `train_dir`: where the learning arms' runs are written
    (`<train_dir>/<arm>`; None writes nothing). `progress`: gets one line per event (None: silent);
    `quiet_training`: the learning arms train without their console. `tuning_seeds`: where `best_fixed`
    searches (disjoint from training and evaluation seeds; default `fair_controls.default_tuning_seeds(config)`).
    `best_fixed_pick`, `best_fixed_within`: how `best_fixed` picks its schedule from the search (declared, with
    their help, on `fair_controls.PickRule`, which this class inherits; a bad value is a ValueError naming it).
    `train_seeds`: one trained controller per seed (`per_seed_arms`), pairs within each seed and the aggregate
    across them (`table.aggregate`); default the seeds of an arm's `TrainedSeeds` (controllers trained
    earlier, one per seed), if an arm holds one. `resume`: the directory where finished episodes and training
    runs are kept, and reused by a call that continues a stopped one (module docstring).
    """

    baseline: str | None = BASELINE
    static_final_of: str | None = None
    train_dir: str | None = None
    progress: Callable[[str], None] | None = print
    quiet_training: bool = True
    tuning_seeds: Sequence[int] | None = None
    train_seeds: Sequence[int] | None = None
    resume: str | os.PathLike | None = None


def compare(arms: Mapping[str, Any], config: TrainingConfig, seeds: Sequence[int] = (900_000,),
            **options: Any) -> ComparisonTable:
    """Train the learning arms on `config`, run every arm on every seed, and pair them (module docstring).
    `options`, by keyword (`CompareOptions` says what each does): baseline, static_final_of, train_dir,
    progress, quiet_training, tuning_seeds, best_fixed_pick, best_fixed_within, train_seeds, resume; another
    keyword is a TypeError."""
    opts = CompareOptions(**options)
    ensure_jax_env(warn=False)
    if not arms:
        raise ValueError("compare needs at least one arm")
    seeds = check_seeds(seeds)
    layout = None
    train_seeds, train_dir = opts.train_seeds, opts.train_dir
    if train_seeds is None:
        train_seeds = trained_seeds_of(arms)
    if train_seeds is not None:
        train_seeds = check_train_seeds(train_seeds)
        arms, layout = per_seed_arms(arms, config, train_seeds, opts.static_final_of)
    tuning_seeds = default_tuning_seeds(config) if opts.tuning_seeds is None else opts.tuning_seeds
    fixed = any(is_control(arm, BEST_FIXED) for arm in arms.values())
    if fixed:
        tuning_seeds = [int(s) for s in tuning_seeds]
    if train_seeds is not None:  # every training seed's run, not config's
        check_training_seeds(config, train_seeds, seeds, tuning_seeds if fixed else None)
    elif fixed:
        check_tuning_seeds(config, tuning_seeds, seeds)
    store = None
    if opts.resume is not None:
        from esper_fx.evaluation.resume import EpisodeStore

        store = EpisodeStore(opts.resume)
        train_dir = os.path.join(os.fspath(opts.resume), "train") if train_dir is None else train_dir
    say = opts.progress or (lambda line: None)
    limit_cpu_threads(config, say)  # as the command line does (`training.threads`)
    compile_cache.enable_once()  # and warm like it, unless the process chose otherwise
    with episode_runner(config, evaluation_episodes(arms, config, seeds, tuning_seeds), progress=say) as runner:
        if runner.fell_back:  # said once: the learning arms train in process too, without trying Ray again
            config = config.replace(env_workers=0)
        if store is not None:
            from esper_fx.evaluation.resume import kept_runner

            runner = kept_runner(runner, store)
        job = ArmsJob(arms, config, seeds, opts.static_final_of, train_dir, opts.quiet_training, tuning_seeds,
                      PickRule(opts.best_fixed_pick, opts.best_fixed_within))
        return _compare(job, runner, say, opts.baseline, layout)


def _compare(job: ArmsJob, runner: EpisodeRunner, say: Callable[[str], None], baseline: str | None,
             layout: Any = None) -> ComparisonTable:
    """`run_arms`' episodes paired into the table; stopped, the exception's `.partial` is the table of what
    finished (`partial=True`)."""
    from esper_fx.training.run_state import Interrupted

    try:
        result = run_arms(job, runner, say)
    except (KeyboardInterrupt, Interrupted) as stop:
        done = getattr(stop, "partial", None) or ArmsResult()  # (a stop before any arm began: nothing)
        stop.partial = table_of(done.finished, done.trained, done.learned, baseline, job.seeds, partial=True,
                                controls=done.controls, layout=layout)
        raise
    return table_of(result.finished, result.trained, result.learned, baseline, job.seeds, controls=result.controls,
                    layout=layout)
