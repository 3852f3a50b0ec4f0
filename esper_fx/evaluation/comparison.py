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
  on `tuning_seeds` (`esper_fx.evaluation.fair_controls`; the search table is kept in `table.controls`);
- a dict of the above under "controller", with "reward_fn", "config" overrides and "greedy" (False samples).

With `train_seeds` (several training seeds, `esper_fx.evaluation.across_seeds`) every learning arm is
trained once per seed (`config.seed` = S, written to `<train_dir>/<arm>-seed<S>`) and each policy runs on
every evaluation seed as `<arm>[seed=S]`; `static_final` and `static_matched` rebuild each seed's network
(`static_final[seed=S]`); the other arms run once. The pairs are taken within each training seed, and
`table.aggregate` holds the first learned arm against every other across training seeds.

`python -m esper_fx.prove` is this function with a command line, files and a plot.

Stopped by Ctrl-C or SIGTERM (a `KeyboardInterrupt`, or `loop.Interrupted` from a learning arm's training),
`compare` re-raises the same exception with `.partial`: a `ComparisonTable` (`partial=True`) of the
episodes that finished, paired over the seeds both arms of a pair finished.

With `config.env_workers` N > 0 the evaluation episodes run as Ray tasks, at most N at a time
(`esper_fx.evaluation.ray_tasks`), and the learning arms train with N Ray env workers; under `auto` (the
default) the episodes run one per usable core at a time and training takes `auto`'s own choice
(`esper_fx.distributed.auto`); 0 keeps everything in this process. The best_fixed search sends all its
schedules' episodes at once. The per-seed numbers are those of a serial comparison either way. Ray is
joined at `config.ray_address`, or started for the comparison.
"""

from __future__ import annotations

import html
from collections import Counter
import math
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np

from esper_fx.config import SEED_MAX, SEED_MIN, TrainingConfig
from esper_fx.evaluation import across_seeds, stats
from esper_fx.training import compile_cache
from esper_fx.training.threads import limit_cpu_threads
from esper_fx.evaluation.fair_controls import (BEST_FIXED, DEFAULT_TUNING_SEEDS, STATIC_MATCHED, best_by_task,
                                               default_tuning_seeds, fixed_for, flop_ratios, matched_overrides,
                                               schedule_arm, schedule_name, search_best_fixed, search_episodes)

STATIC_FINAL = "static_final"
BASELINE = "wait"
MAX_EVAL_SEEDS = 100_000  # one episode per arm and seed: far beyond any useful comparison, small in memory


class Trained(NamedTuple):
    """A trained learning controller: its training configuration and its policy (`episodes.Policy`)."""

    config: TrainingConfig
    policy: Any


@dataclass
class ComparisonTable:
    rows: list[dict[str, Any]]
    pairs: list[dict[str, Any]]
    episodes: dict[str, list[Any]] = field(default_factory=dict)
    trained: dict[str, Any] = field(default_factory=dict)  # arm -> the training RunResult
    seeds: list[int] = field(default_factory=list)
    partial: bool = False  # stopped before every arm ran on every seed: the episodes that finished
    controls: dict[str, Any] = field(default_factory=dict)  # best_fixed's search, static_matched's FLOP ratios
    by_task: dict[str, dict[str, Any]] = field(default_factory=dict)  # a task mix: per task, its rows and pairs
    arms_by_train_seed: dict[str, dict[int, str]] = field(default_factory=dict)  # arm -> {training seed: row}
    aggregate: list[dict[str, Any]] = field(default_factory=list)  # across training seeds (across_seeds)

    @property
    def train_seeds(self) -> list[int]:
        """The training seeds of a comparison over several (the layout's), else []."""
        return list(next(iter(self.arms_by_train_seed.values()), ()))

    def row(self, arm: str) -> dict[str, Any]:
        for r in self.rows:
            if r["arm"] == arm:
                return r
        raise KeyError(arm)

    def pair(self, a: str, b: str) -> dict[str, Any]:
        for p in self.pairs:
            if (p["a"], p["b"]) == (a, b):
                return p
        raise KeyError((a, b))

    def to_text(self) -> str:
        w = max([16] + [len(r["arm"]) for r in self.rows]) if self.train_seeds else 16  # (seeds: arm[seed=S])
        header = (f"{'arm':<{w}} {'accuracy % (mean ± sd)':>23} {'params':>8} {'params added':>12} "
                  f"{'train GFLOPs':>12} {'germinated':>10} {'fossilized':>10} {'culled':>7}")
        lines = [f"{len(self.seeds)} evaluation seeds; accuracy = validation accuracy averaged over the last epochs"
                 + ("; PARTIAL: stopped early, only the finished episodes" if self.partial else ""),
                 header, "-" * len(header)]
        for r in self.rows:
            acc = f"{r['accuracy_mean']:.2f} ± {r['accuracy_sd']:.2f}"
            lines.append(f"{r['arm']:<{w}} {acc:>23} {r['params_mean']:>8.0f} {r['params_added_mean']:>12.0f} "
                         f"{r['training_gflops_mean']:>12.2f} {r['germinated_mean']:>10.2f} "
                         f"{r['fossilized_mean']:>10.2f} {r['culled_mean']:>7.2f}")
        if self.pairs:
            lines += ["", "paired differences (a − b, pp, 95% interval over seeds):"]
            lines += [f"  {p['a']} vs {p['b']}: {p['mean']:+.2f} [{p['low']:+.2f}, {p['high']:+.2f}]  "
                      f"{p['a']} {p['verdict']} {p['b']}" for p in self.pairs]
        for task, part in self.by_task.items():
            lines += ["", f"task {task} ({len(part['seeds'])} seeds):"]
            lines += [f"  {r['arm']:<16} {r['accuracy_mean']:6.2f} ± {r['accuracy_sd']:5.2f}  germinated: "
                      f"{choices(self.episodes[r['arm']], part['seeds'])}" for r in part["rows"]]
            lines += [f"  {p['a']} vs {p['b']}: {p['mean']:+.2f} [{p['low']:+.2f}, {p['high']:+.2f}]  {p['verdict']}"
                      for p in part["pairs"]]
        if self.train_seeds:
            lines += ["", *across_seeds.text(self.aggregate, self.train_seeds)]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:  # the text table, not a dump of every episode
        return self.to_text()

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{h}</th>" for h in ("arm", "accuracy % (mean ± sd)", "params", "params added",
                                                  "training GFLOPs", "germinated / episode", "fossilized / episode",
                                                  "culled / episode"))
        body = "".join(
            "<tr>" + "".join(f"<td>{c}</td>" for c in (
                html.escape(r["arm"]), f"{r['accuracy_mean']:.2f} ± {r['accuracy_sd']:.2f}",
                f"{r['params_mean']:.0f}", f"{r['params_added_mean']:.0f}", f"{r['training_gflops_mean']:.2f}", f"{r['germinated_mean']:.2f}", f"{r['fossilized_mean']:.2f}",
                f"{r['culled_mean']:.2f}")) + "</tr>" for r in self.rows)
        pairs = "".join(f"<li>{html.escape(p['a'])} vs {html.escape(p['b'])}: {p['mean']:+.2f} pp "
                        f"[{p['low']:+.2f}, {p['high']:+.2f}] — <b>{p['verdict']}</b></li>" for p in self.pairs)
        seeds = "".join(f"<li>{html.escape(across_seeds.line(g))}</li>" for g in self.aggregate)
        return (f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
                + (f"<ul>{pairs}</ul>" if pairs else "") + (f"<ul>{seeds}</ul>" if seeds else ""))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (an unbounded interval, from one seed, is null)."""
        pairs = [_json_pair(p) for p in self.pairs]
        by_task = {task: {**part, "pairs": [_json_pair(p) for p in part["pairs"]]}
                   for task, part in self.by_task.items()}
        out = {"seeds": self.seeds, "partial": self.partial, "rows": self.rows, "pairs": pairs,
               "controls": self.controls, "by_task": by_task,
               "episodes": {arm: [e.to_dict() for e in eps] for arm, eps in self.episodes.items()}}
        if self.train_seeds:  # several training seeds: which row is whose, and the aggregate
            out.update(train_seeds=self.train_seeds,
                       arms_by_train_seed={arm: {str(t): name for t, name in by_seed.items()}
                                           for arm, by_seed in self.arms_by_train_seed.items()},
                       aggregate=[_json_pair(a) for a in self.aggregate])
        return out

    def plot(self, path=None, title: str | None = None):
        """Accuracy per arm per seed, each seed's arms joined by a line (paired); the arm means marked. With
        several training seeds: the spread across them (`across_seeds.spread`)."""
        if self.train_seeds:
            return across_seeds.spread(self, path=path, title=title)
        return paired_arms(self, path=path, title=title)


def _json_pair(pair: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in pair.items()}


def choices(episodes: Sequence[Any], seeds: Sequence[int], attr: str = "germinations") -> str:
    """An arm's growth decisions on these seeds, most frequent first: "r0c0=conv_light/gated@1 ×5, none ×3"
    (`attr` "fossils": what it grew)."""
    keep = set(seeds)
    counts = Counter("+".join(getattr(e, attr, ())) or "none" for e in episodes if e.seed in keep)
    return ", ".join(f"{name} ×{n}" for name, n in counts.most_common())


def paired_arms(table: Any, path=None, title: str | None = None) -> Any:
    """The paired-arms figure of `compare` and `prove`: accuracy per arm per evaluation seed; saved to `path`
    when given.

    Each seed is one grey line joining its arms (so a seed-by-seed gain reads as a line going up), each arm's
    mean is a black bar, and arms that beat the baseline are labelled. Built on `matplotlib.figure.Figure`
    (no pyplot state), so it renders under any backend; matplotlib loads only when a figure is drawn.
    """
    from matplotlib.figure import Figure

    arms = [r["arm"] for r in table.rows]
    acc = np.array([[e.accuracy for e in table.episodes[a]] for a in arms])  # [arms, seeds]
    fig = Figure(figsize=(max(5.0, 1.3 * len(arms) + 2), 4.2), layout="constrained")
    ax = fig.add_subplot()
    xs = np.arange(len(arms))
    tasks = [getattr(e, "task", "") for e in table.episodes[arms[0]]]
    colours = {t: f"C{i}" for i, t in enumerate(sorted(set(tasks)))} if len(set(tasks)) > 1 else {}
    for column, task in zip(acc.T, tasks):  # a task mix: each seed's line in its task's colour
        ax.plot(xs, column, color=colours.get(task, "0.6"), linewidth=0.9, marker="o", markersize=3.5, alpha=0.7)
    for task, colour in colours.items():
        mine = [i for i, t in enumerate(tasks) if t == task]
        ax.hlines(acc[:, mine].mean(axis=1), xs - 0.18, xs + 0.18, color=colour, linewidth=2.0,
                  label=f"{task} ({len(mine)} seeds)")
    ax.hlines(acc.mean(axis=1), xs - 0.25, xs + 0.25, color="black", linewidth=2.5, label="mean over seeds")
    verdicts = {p["a"]: p["verdict"] for p in table.pairs if p["b"] == "wait"}
    labels = [f"{a}\n({verdicts[a]} wait)" if a in verdicts else a for a in arms]
    ax.set_xticks(xs, labels, fontsize=8)
    ax.set_ylabel("validation accuracy, last epochs (%)")
    ax.set_title(title or f"{acc.shape[1]} evaluation seeds, one line per seed")
    ax.legend(loc="best", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


# ----------------------------------------------------------------------------------------------
# the comparison
# ----------------------------------------------------------------------------------------------


def compare(arms: Mapping[str, Any], config: TrainingConfig, seeds: Sequence[int] = (900_000,), *,
            baseline: str | None = BASELINE, static_final_of: str | None = None, train_dir: str | None = None,
            progress: Callable[[str], None] | None = print, quiet_training: bool = True,
            tuning_seeds: Sequence[int] | None = None, train_seeds: Sequence[int] | None = None) -> ComparisonTable:
    """Train the learning arms on `config`, run every arm on every seed, and pair them (module docstring).

    Pairs: every arm against `baseline` (when it is an arm), and the first learned arm against every other.
    `train_dir`: where the learning arms' runs are written (`<train_dir>/<arm>`; None writes nothing).
    `tuning_seeds`: where `best_fixed` searches (disjoint from training and evaluation seeds; default
    `fair_controls.default_tuning_seeds(config)`). `train_seeds`: one trained controller per seed
    (`per_seed_arms`), pairs within each seed and the aggregate across them (`table.aggregate`).
    """
    if not arms:
        raise ValueError("compare needs at least one arm")
    seeds = check_seeds(seeds)
    layout = None
    if train_seeds is not None:
        train_seeds = check_train_seeds(train_seeds)
        arms, layout = per_seed_arms(arms, config, train_seeds, static_final_of)
    tuning_seeds = default_tuning_seeds(config) if tuning_seeds is None else tuning_seeds
    fixed = any(_is_control(arm, BEST_FIXED) for arm in arms.values())
    if fixed:
        tuning_seeds = [int(s) for s in tuning_seeds]
    if train_seeds is not None:  # every training seed's run, not config's
        check_training_seeds(config, train_seeds, seeds, tuning_seeds if fixed else None)
    elif fixed:
        check_tuning_seeds(config, tuning_seeds, seeds)
    say = progress or (lambda line: None)
    limit_cpu_threads(config, say)  # as the command line does (`training.threads`)
    compile_cache.enable_once()  # and warm like it, unless the process chose otherwise
    with episode_runner(config, evaluation_episodes(arms, config, seeds, tuning_seeds)) as runner:
        if runner.fell_back:  # said once: the learning arms train in process too, without trying Ray again
            config = config.replace(env_workers=0)
        return _compare(arms, config, seeds, baseline, static_final_of, train_dir, say, quiet_training, runner,
                        tuning_seeds, layout)


def warn(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class EpisodeRunner:
    """How a comparison runs its evaluation episodes: `one(arm, seeds, on_episode)` and `many(arms, seeds)`
    (the best_fixed search: every schedule's episodes at once), in this process or as Ray tasks."""

    one: Callable[..., list[Any]]
    many: Callable[[Sequence[Any], Sequence[int]], list[list[Any]]]
    workers: int  # episodes at a time as Ray tasks (0: in this process, one after another)
    fell_back: bool = False  # `auto` chose Ray and Ray could not start


@contextmanager
def episode_runner(config: TrainingConfig, n_episodes: int, say: Callable[[str], None] = warn):
    """The evaluation episodes' runner: in this process (`env_workers` 0, or `auto` where Ray does not pay),
    or as Ray tasks (`esper_fx.evaluation.ray_tasks`), `choose_eval_workers(config, n_episodes)` at a time,
    inside a Ray session for the comparison. Under `auto`, a Ray that cannot start leaves one line (`say`)
    and the episodes in this process."""
    from esper_fx.distributed.auto import choose_eval_workers, fallback_line
    from esper_fx.evaluation import episodes as ev

    choice = choose_eval_workers(config, n_episodes)
    session, fell_back = None, False
    if choice.n > 0:
        from esper_fx.distributed.runtime import RaySession, RayStartError
        from esper_fx.training.preflight import check_data

        check_data(config)  # before Ray starts: a bad data file is the in-process run's one line
        try:
            session = RaySession.open(config.ray_address, choice.n)
        except (ImportError, RayStartError) as exc:
            if not choice.auto:
                raise
            say(fallback_line(exc))
            fell_back = True
    if session is None:
        yield EpisodeRunner(ev.run_arm, lambda arms, seeds: [ev.run_arm(a, seeds) for a in arms], 0, fell_back)
        return
    from esper_fx.evaluation.ray_tasks import remote_run_arm, remote_run_arms

    try:
        yield EpisodeRunner(lambda arm, seeds, on_episode=None: remote_run_arm(arm, seeds, on_episode, workers=choice.n),
                            lambda arms, seeds: remote_run_arms(arms, seeds, workers=choice.n), choice.n)
    finally:
        session.close()


def evaluation_episodes(arms: Mapping[str, Any], config: TrainingConfig, seeds: Sequence[int],
                        tuning_seeds: Sequence[int], train_seeds: Sequence[int] | None = None) -> int:
    """How many evaluation episodes a comparison runs: every arm (with `train_seeds`, every arm of
    `per_seed_arms`) on every seed, and the best_fixed search."""
    if train_seeds is not None:
        arms = per_seed_arms(arms, config, train_seeds)[0]
    fixed = any(_is_control(a, BEST_FIXED) for a in arms.values())
    search = search_episodes(config, tuning_seeds) + len(config.task_mix) * len(seeds) if fixed else 0
    return len(arms) * len(seeds) + search


def _compare(arms, config, seeds, baseline, static_final_of, train_dir, say, quiet_training, runner,
             tuning_seeds=DEFAULT_TUNING_SEEDS, layout=None):
    from esper_fx.training.run_state import Interrupted

    trained, learned, finished, controls = {}, [], {}, {}  # finished: arm -> its episodes so far
    try:
        _run_arms(arms, config, seeds, static_final_of, train_dir, say, quiet_training, runner, trained, learned,
                  finished, tuning_seeds, controls)
    except (KeyboardInterrupt, Interrupted) as stop:
        stop.partial = table_of(finished, trained, learned, baseline, seeds, partial=True, controls=controls,
                                layout=layout)
        raise
    return table_of(finished, trained, learned, baseline, seeds, controls=controls, layout=layout)


def table_of(episodes: Mapping[str, list[Any]], trained: dict[str, Any], learned: list[str], baseline: str | None,
             seeds: list[int], partial: bool = False, controls: dict[str, Any] | None = None,
             layout: dict[str, dict[int, str]] | None = None) -> ComparisonTable:
    """The table of the arms' episodes (arms without any left out). `layout` (several training seeds, from
    `per_seed_arms`): the pairs within each training seed, and the aggregate across them."""
    episodes = {name: list(eps) for name, eps in episodes.items() if eps}
    rows = [summarize_arm(name, eps) for name, eps in episodes.items()]
    learned_arm = learned[0] if learned else None
    if layout is not None:
        return _per_seed_table(episodes, rows, trained, learned_arm, baseline, seeds, partial, controls, layout)
    return ComparisonTable(rows, paired(episodes, baseline, learned_arm), episodes, trained, seeds, partial,
                           dict(controls or {}), by_task(episodes, baseline, learned_arm))


def _per_seed_table(episodes, rows, trained, learned_arm, baseline, seeds, partial, controls,
                    layout) -> ComparisonTable:
    """The table of several training seeds: each seed's pairs (its learned arm against the arms it shares
    with the others and its own), per task too, and the aggregate of the first learned arm across seeds."""
    layout = across_seeds.complete(layout, episodes)
    learned = across_seeds.base_of(layout, learned_arm)
    views = across_seeds.views(episodes, layout, learned)
    pairs = _unique(p for view, mine in views for p in paired(view, baseline, mine))
    tasks = by_task(episodes, baseline, None)
    for view, mine in views:
        for task, part in by_task(view, baseline, mine).items():
            tasks[task]["pairs"] = _unique(tasks[task]["pairs"] + part["pairs"])
    aggregate = across_seeds.aggregate(episodes, layout, learned) if learned is not None else []
    return ComparisonTable(rows, pairs, episodes, trained, seeds, partial, dict(controls or {}), tasks, layout,
                           aggregate)


def _unique(pairs: Any) -> list[dict[str, Any]]:
    """Pairs without repeats (an arm every training seed shares is paired with the baseline once)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for p in pairs:
        out.setdefault((p["a"], p["b"]), p)
    return list(out.values())


def by_task(episodes: Mapping[str, list[Any]], baseline: str | None, learned: str | None) -> dict[str, dict[str, Any]]:
    """A task mix's table per task (its seeds, its rows, its pairs); empty when every episode ran one task.
    An evaluation seed runs the same task in every arm (`hosts.tasks.mix_task`), so each task's pairs are
    paired too."""
    tasks = sorted({getattr(e, "task", "") for eps in episodes.values() for e in eps})
    if len(tasks) < 2:
        return {}
    out = {}
    for task in tasks:
        part = {name: [e for e in eps if e.task == task] for name, eps in episodes.items()}
        part = {name: eps for name, eps in part.items() if eps}
        seeds = sorted({e.seed for eps in part.values() for e in eps})
        out[task] = {"seeds": seeds, "rows": [summarize_arm(name, eps) for name, eps in part.items()],
                     "pairs": paired(part, baseline, learned)}
    return out


def _run_arms(arms, config, seeds, static_final_of, train_dir, say, quiet_training, runner, trained, learned,
              finished, tuning_seeds=DEFAULT_TUNING_SEEDS, controls=None) -> None:
    """Build (train) every arm, then run each on every seed; `trained`, `learned`, `finished` and `controls`
    fill as they go (so a stop keeps what finished)."""
    from esper_fx.evaluation import episodes as ev

    built, cache, controls = {}, {}, {} if controls is None else controls
    for name, arm in arms.items():
        if _is_static_final(arm) or _is_control(arm, STATIC_MATCHED) or _is_control(arm, BEST_FIXED):
            continue
        built[name], result = _build_arm(name, arm, config, seeds, train_dir, say, quiet_training, cache)
        if built[name].policy is not None:
            learned.append(name)
        if result is not None:
            trained[name] = result
    for name, arm in arms.items():
        if _is_static_final(arm):
            source = _static_source(static_final_of, learned, arms, name)
            built[name] = ev.Arm.build(name, config, STATIC_FINAL, per_seed=_fossils_of(finished[source]))
        elif _is_control(arm, STATIC_MATCHED):
            source = _static_source(static_final_of, learned, arms, name, STATIC_MATCHED)
            built[name] = ev.Arm.build(name, config, STATIC_FINAL,
                                       per_seed=matched_overrides(finished[source], config.lr_schedule))
        elif _is_control(arm, BEST_FIXED):
            best, table = search_best_fixed(config, tuning_seeds, runner.many, say)
            per_task = best_by_task(config, table, tuning_seeds)
            controls[BEST_FIXED] = {"tuning_seeds": list(tuning_seeds), "chosen": schedule_name(best),
                                    "budget_episodes": len(table) * len(tuning_seeds), "search": table,
                                    **({"by_task": per_task} if per_task else {})}
            built[name] = schedule_arm(name, config, best)
        _run_one(name, built[name], seeds, runner, finished, say)
        if _is_control(arm, BEST_FIXED):  # a task mix: each task's best schedule, played on every task
            for task, best in per_task.items():
                _run_one(fixed_for(task), schedule_arm(fixed_for(task), config, best["config"]), seeds, runner,
                         finished, say)
        if _is_control(arm, STATIC_MATCHED):
            ratios = flop_ratios(finished[name], finished[source])
            key = name if _source_named(arm) else STATIC_MATCHED  # several training seeds: one per seed's arm
            controls[key] = {"source": source, "flop_ratio": {str(k): v for k, v in ratios.items()}}


def _run_one(name: str, arm: Any, seeds: list[int], runner: Any, finished: dict, say: Callable[[str], None]) -> None:
    """Every seed of one built arm, kept in `finished` as they come (a stop keeps what finished)."""
    done = finished.setdefault(name, [])

    def on_episode(e):
        done.append(e)
        say(f"compare: {e.arm} seed {e.seed}: accuracy {e.accuracy:.2f}% ({e.wall_s:.1f} s)")

    finished[name] = runner.one(arm, seeds, on_episode=on_episode)


def _is_control(arm: Any, kind: str) -> bool:
    return arm == kind or (isinstance(arm, Mapping) and arm.get("controller") == kind)


def _is_static_final(arm: Any) -> bool:
    return _is_control(arm, STATIC_FINAL)


def _static_source(static_final_of: str | None, learned: list[str], arms: Mapping[str, Any], name: str,
                   kind: str = STATIC_FINAL) -> str:
    """The arm whose architecture the static arm `name` rebuilds: its own "of" (one training seed's learned
    arm, `per_seed_arms`), else `static_final_of`, else the first learned arm, else "oracle"."""
    source = _source_named(arms[name]) or static_final_of or (learned[0] if learned else "oracle")
    names = list(arms)
    if source not in arms or names.index(source) > names.index(name):
        raise ValueError(f"{kind} needs the arm whose architecture it rebuilds ({source!r}) listed before it")
    return source


def _source_named(arm: Any) -> str | None:
    return arm.get("of") if isinstance(arm, Mapping) else None


def _fossils_of(source: list[Any]) -> Callable[[int], dict[str, Any]]:
    by_seed = {e.seed: tuple(e.fossils) for e in source}
    return lambda seed: {"static_seeds": by_seed[seed]}


def _build_arm(name: str, arm: Any, config: TrainingConfig, seeds: list[int], train_dir: str | None,
               say: Callable[[str], None], quiet: bool, cache: dict):
    """(evaluate.Arm, the training RunResult or None). Arms trained alike share one run (`cache`)."""
    from esper_fx.evaluation import episodes as ev
    from esper_fx.training.loop import run

    spec = _arm_spec(name, arm)
    greedy = spec.get("greedy", True)
    if isinstance(spec.get("controller"), Trained):
        return ev.Arm.trained(name, spec["controller"].config, spec["controller"].policy, greedy=greedy), None
    arm_config, bundle = _bundle(spec, config)
    if not bundle.learns:
        return ev.Arm.build(name, arm_config, bundle), None
    check_disjoint(arm_config, seeds)
    key = (bundle.name, repr(sorted((spec.get("config") or {}).items())), repr(spec.get("reward_fn")))
    if key not in cache:
        say(f"compare: training {name} ({bundle.name}, {arm_config.n_episodes} episodes)")
        run_dir = False if train_dir is None else f"{train_dir}/{across_seeds.run_dir_name(name)}"
        cache[key] = run(arm_config, controller=bundle, reward_fn=spec.get("reward_fn"), run_dir=run_dir,
                         quiet=quiet)
    result = cache[key]
    policy = ev.Policy(result.controller_state, result.obs_rms)
    return ev.Arm(name, arm_config, ev.frozen(bundle, greedy=greedy), policy=policy), result


def _arm_spec(name: str, arm: Any) -> Mapping[str, Any]:
    """An arm as a dict of controller, reward_fn, config and greedy (a bare controller: its controller)."""
    spec = arm if isinstance(arm, Mapping) else {"controller": arm}
    unknown = set(spec) - {"controller", "reward_fn", "config", "greedy"}
    if unknown:
        raise ValueError(f"arm {name!r}: unknown keys {sorted(unknown)}; use controller, reward_fn, config, greedy")
    return spec


def _bundle(spec: Mapping[str, Any], config: TrainingConfig) -> tuple[TrainingConfig, Any]:
    """(the arm's config, its controller bundle) of an arm that is not a `Trained`."""
    from esper_fx.controllers import protocol as ctl

    arm_config = config.replace(**dict(spec.get("config") or {}))
    controller = spec.get("controller", arm_config.controller_name)
    return arm_config, ctl.build(controller, ctl.ControllerSpec.from_config(arm_config))


# ----------------------------------------------------------------------------------------------
# several training seeds
# ----------------------------------------------------------------------------------------------


def per_seed_arms(arms: Mapping[str, Any], config: TrainingConfig, train_seeds: Sequence[int],
                  static_final_of: str | None = None) -> tuple[dict[str, Any], dict[str, dict[int, str]]]:
    """(the arms to run, arm -> {training seed: the name its episodes go under}). Each learning arm becomes
    one arm per training seed S (`<arm>[seed=S]`, trained with config.seed = S); so does a `static_final` or
    `static_matched` that rebuilds a learning arm's network (each rebuilding its seed's); every other arm
    runs once, the same for every seed. ValueError when no arm learns or an arm is already `Trained`."""
    learning = [name for name, arm in arms.items() if _learns(name, arm, config)]
    if not learning:
        raise ValueError(f"no arm learns ({', '.join(arms)}): there is nothing to train per training seed")
    source = static_final_of or learning[0]
    out: dict[str, Any] = {}
    layout: dict[str, dict[int, str]] = {}
    for name, arm in arms.items():
        static = _is_static_final(arm) or _is_control(arm, STATIC_MATCHED)
        if name not in learning and not (static and source in learning):
            out[name], layout[name] = arm, dict.fromkeys(train_seeds, name)
            continue
        layout[name] = {t: across_seeds.arm_name(name, t) for t in train_seeds}
        spec = dict(arm) if isinstance(arm, Mapping) else {"controller": arm}
        for t in train_seeds:
            out[layout[name][t]] = ({**spec, "of": across_seeds.arm_name(source, t)} if static else
                                    {**spec, "config": {**dict(spec.get("config") or {}), "seed": t}})
    return out, layout


def _learns(name: str, arm: Any, config: TrainingConfig) -> bool:
    """Whether `arm` is trained by `compare` (a learning controller, not yet trained)."""
    if any(_is_control(arm, kind) for kind in (STATIC_FINAL, STATIC_MATCHED, BEST_FIXED)):
        return False
    spec = _arm_spec(name, arm)
    if isinstance(spec.get("controller"), Trained):
        raise ValueError(f"arm {name!r} is trained already; training seeds train one controller per seed (give its "
                         f"controller's name instead)")
    return _bundle(spec, config)[1].learns


def check_train_seeds(train_seeds: Sequence[int]) -> list[int]:
    """The training seeds as a list: one or more, distinct, each a signed 64-bit seed (else a ValueError
    naming the problem)."""
    out = [int(s) for s in train_seeds]
    check_seed_range(out, "training seed")
    if not out or len(set(out)) != len(out):
        raise ValueError(f"training seeds must be one or more distinct seeds (got {out})")
    return out


def check_training_seeds(config: TrainingConfig, train_seeds: Sequence[int], seeds: Sequence[int] | range,
                         tuning_seeds: Sequence[int] | None = None) -> None:
    """ValueError unless the training run of every training seed keeps its env seeds off the evaluation
    seeds and, when given, off best_fixed's tuning seeds (`check_disjoint`, `check_tuning_seeds`)."""
    for run in [config.replace(seed=int(t)) for t in train_seeds]:
        check_disjoint(run, seeds)
        if tuning_seeds is not None:
            check_tuning_seeds(run, tuning_seeds, seeds)


# ----------------------------------------------------------------------------------------------
# seeds and statistics
# ----------------------------------------------------------------------------------------------


def training_seeds(config: TrainingConfig) -> set[int]:
    """Every env seed a training run of `config` uses: seed + 10000·b + 1000·i (hosts.env.pool). Enumerates
    them: for small runs only (`check_disjoint` compares ranges instead)."""
    from hosts.env.pool import BATCH_SEED_STRIDE, ENV_SEED_STRIDE

    n_batches = -(-config.n_episodes // config.n_envs)
    return {config.seed + BATCH_SEED_STRIDE * b + ENV_SEED_STRIDE * i
            for b in range(n_batches) for i in range(config.n_envs)}


def training_seeds_between(config: TrainingConfig, low: int, high: int, limit: int = 8) -> list[int]:
    """Up to `limit` training env seeds of `config` in [low, high], smallest first, found arithmetically:
    env i's seeds are the progression seed + 1000·i + 10000·b for b in [0, n_batches), so each env takes
    O(1) whatever the number of batches or the width of the range (at most n_envs ≤ 1024 steps)."""
    from hosts.env.pool import BATCH_SEED_STRIDE, ENV_SEED_STRIDE

    n_batches = -(-config.n_episodes // config.n_envs)
    found: set[int] = set()
    for i in range(config.n_envs):
        base = config.seed + ENV_SEED_STRIDE * i
        first = max(0, -((base - low) // BATCH_SEED_STRIDE))  # ceil((low - base) / stride), at least 0
        last = min(n_batches - 1, (high - base) // BATCH_SEED_STRIDE)
        found.update(base + BATCH_SEED_STRIDE * b for b in range(first, min(last, first + limit - 1) + 1))
    return sorted(found)[:limit]


def seed_ranges(seeds: Sequence[int] | range) -> list[tuple[int, int]]:
    """The seeds as inclusive (low, high) ranges of consecutive integers: one for a contiguous `range` (never
    enumerated), else the sorted seeds' runs."""
    if isinstance(seeds, range) and seeds.step == 1:
        return [(seeds.start, seeds.stop - 1)] if len(seeds) else []
    out: list[tuple[int, int]] = []
    for s in sorted(int(s) for s in seeds):
        if out and s <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], s))
        else:
            out.append((s, s))
    return out


def check_seeds(seeds: Sequence[int] | range) -> list[int]:
    """The evaluation seeds as a list: at most MAX_EVAL_SEEDS, distinct, each a signed 64-bit seed (else a
    ValueError naming the problem), checked before any is enumerated."""
    if len(seeds) > MAX_EVAL_SEEDS:
        raise ValueError(f"{len(seeds)} evaluation seeds: at most {MAX_EVAL_SEEDS} (one episode per arm and seed)")
    out = [int(s) for s in seeds]
    check_seed_range(out, "evaluation seed")
    if not out or len(set(out)) != len(out):
        raise ValueError(f"compare needs distinct evaluation seeds (got {out[:20]}{' ...' if len(out) > 20 else ''})")
    return out


def check_seed_range(seeds: Sequence[int], what: str) -> None:
    """ValueError naming the first of `seeds` that is not a signed 64-bit seed (`what`: which seeds)."""
    outside = [s for s in seeds if not SEED_MIN <= s <= SEED_MAX]
    if outside:
        raise ValueError(f"{what} {outside[0]} is not a signed 64-bit seed (from {SEED_MIN} to {SEED_MAX})")


def check_tuning_seeds(config: TrainingConfig, tuning_seeds: Sequence[int], seeds: Sequence[int]) -> None:
    """ValueError unless best_fixed's tuning seeds are signed 64-bit seeds, distinct, and neither evaluation
    nor training seeds."""
    tuning = [int(s) for s in tuning_seeds]
    check_seed_range(tuning, "tuning seed")
    if not tuning or len(set(tuning)) != len(tuning):
        raise ValueError(f"tuning seeds must be one or more distinct seeds (got {tuning})")
    overlap = sorted(set(tuning) & {int(s) for s in seeds})
    if overlap:
        raise ValueError(f"tuning seeds {overlap} are also evaluation seeds")
    overlap = sorted(s for s in tuning if training_seeds_between(config, s, s, 1))
    if overlap:
        raise ValueError(f"tuning seeds {overlap} are also training seeds of this run (from seed {config.seed})")


def check_disjoint(config: TrainingConfig, seeds: Sequence[int] | range) -> None:
    """ValueError naming (some of) the seeds that a training run of `config` also uses. Bounded in time and
    memory whatever the sizes: ranges are compared arithmetically (`training_seeds_between`)."""
    overlap = sorted({s for low, high in seed_ranges(seeds) for s in training_seeds_between(config, low, high)})
    if overlap:
        raise ValueError(f"evaluation seeds {overlap[:8]}{' ...' if len(overlap) > 8 else ''} are also training "
                         f"seeds of this run (training uses seed + 10000·batch + 1000·env from seed {config.seed}); "
                         f"choose other evaluation seeds")


def summarize_arm(name: str, episodes: Sequence[Any]) -> dict[str, Any]:
    acc = stats.summarize([e.accuracy for e in episodes])
    mean = lambda attr: float(np.mean([getattr(e, attr) for e in episodes]))  # noqa: E731
    return {
        "arm": name, "n": acc.n, "accuracy_mean": acc.mean, "accuracy_sd": acc.sd,
        "params_added_mean": mean("params_added"), "params_mean": mean("params"),
        "training_gflops_mean": mean("training_flops") / 1e9,
        "training_gflops": [e.training_flops / 1e9 for e in episodes], "germinated_mean": mean("germinated"),
        "fossilized_mean": mean("fossilized"), "culled_mean": mean("culled"),
        "episodes_with_fossil": sum(1 for e in episodes if e.fossilized > 0),
        "wall_s": float(sum(e.wall_s for e in episodes)), "accuracies": [e.accuracy for e in episodes],
    }


def paired(episodes: Mapping[str, Sequence[Any]], baseline: str | None, learned: str | None) -> list[dict[str, Any]]:
    """Every arm against the baseline, then the learned arm against every other arm; each pair over the
    seeds both arms ran (every seed, unless the comparison was stopped early)."""
    wanted = []
    if baseline in episodes:
        wanted += [(a, baseline) for a in episodes if a != baseline]
    if learned in episodes:
        wanted += [(learned, b) for b in episodes if b not in (learned, baseline)]
    out = []
    for a, b in wanted:
        common = across_seeds.paired_accuracies(episodes[a], episodes[b])
        if not common:
            continue
        d = stats.paired_difference([x for x, _ in common], [y for _, y in common])
        out.append({"a": a, "b": b, "n": d.n, "mean": d.mean, "low": d.low, "high": d.high,
                    "confidence": d.confidence, "verdict": d.verdict})
    return out
