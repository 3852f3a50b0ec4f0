"""`ComparisonTable`, what `compare` returns: one row per arm, the paired differences (per task too, and
across training seeds), as text, HTML, JSON values and the paired-arms figure; `table_of` builds it from
the arms' episodes."""

from __future__ import annotations

import html
from collections import Counter
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping, Sequence

import numpy as np

from esper_fx.evaluation import across_seeds, iso_accuracy, stats


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
    baseline: str | None = None  # the arm every other is paired with (`wait` in prove)

    @cached_property
    def savings(self) -> list[dict[str, Any]]:
        """Every grown arm's iso-accuracy saving against each static curve (`iso_accuracy.savings`), read off
        the episodes."""
        return iso_accuracy.savings(self.episodes, grown_arms(self.episodes, self.baseline))

    @cached_property
    def ceilings(self) -> list[dict[str, Any]]:
        """The most any growth from `wait` could save against each static curve (`iso_accuracy.ceilings`), read
        off the episodes."""
        return iso_accuracy.ceilings(self.episodes)

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
        if self.savings:
            lines += ["", "compute saved at equal accuracy (against static_final trained on fractions of its budget; "
                          "95% interval over resampled seeds):"]
            lines += [iso_accuracy.line(entry) for entry in self.savings]
        if self.ceilings:
            lines += ["", "the ceiling of growth (perfect transfer from the host alone's budget; under 30% no growth "
                          "between these networks can save 30% here):"]
            lines += [iso_accuracy.ceiling_line(entry) for entry in self.ceilings]
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
                f"{r['params_mean']:.0f}", f"{r['params_added_mean']:.0f}", f"{r['training_gflops_mean']:.2f}",
                f"{r['germinated_mean']:.2f}", f"{r['fossilized_mean']:.2f}",
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
        if self.savings:  # a static curve (`--static-budgets`): every grown arm's saving against it
            out["iso_accuracy_saving"] = [_json_pair(entry) for entry in self.savings]
        if self.ceilings:  # and `wait` beside it: the most any growth from the host could save there
            out["growth_ceiling"] = [_json_pair(entry) for entry in self.ceilings]
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
                           dict(controls or {}), by_task(episodes, baseline, learned_arm), baseline=baseline)


def grown_arms(episodes: Mapping[str, Any], baseline: str | None) -> list[str]:
    """The arms whose network may grow: all but the baseline and the static controls."""
    return [name for name in episodes if name != baseline
            and not name.startswith((iso_accuracy.STATIC_FINAL, "static_matched"))]


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
    return ComparisonTable(rows=rows, pairs=pairs, episodes=episodes, trained=trained, seeds=seeds, partial=partial,
                           controls=dict(controls or {}), by_task=tasks, arms_by_train_seed=layout,
                           aggregate=aggregate, baseline=baseline)


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
