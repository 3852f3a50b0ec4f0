"""Several training seeds in one comparison (issue 36): one trained controller per seed, the aggregate
across them, its text and its figure.

`compare(..., train_seeds=[42, 7, 11])` trains every learning arm once per training seed and runs each
policy on the same evaluation seeds as `ppo[seed=42]`, `ppo[seed=7]`, ... (`arm_name`; its run directory
`<train_dir>/ppo-seed42`, `run_dir_name`). A layout maps each arm to the name of its episodes per
training seed: a learned arm (and a `static_final` rebuilding it) has one per seed, an arm that does not
depend on the training seed (`wait`, `oracle`, `best_fixed`, ...) the same one for every seed.

The aggregate (`aggregate`, `esper_fx.evaluation.stats.across_training_seeds`) treats the training run as
the unit (Agarwal et al., NeurIPS 2021): for the learned arm L against every other arm B, the mean over
training seeds of each seed's mean paired difference L − B, a stratified bootstrap interval over
(training seed, evaluation seed), P(L > B) over those pairs (ties half) and both arms' interquartile means.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from esper_fx.evaluation import stats


def arm_name(arm: str, train_seed: int) -> str:
    """The table's name for `arm` trained (or rebuilt) under one training seed: "ppo[seed=42]"."""
    return f"{arm}[seed={train_seed}]"


def run_dir_name(name: str) -> str:
    """The training run directory of an arm's name: "ppo[seed=42]" -> "ppo-seed42" (no shell pattern
    characters); a name without a training seed is its own."""
    arm, sep, rest = name.partition("[seed=")
    return f"{arm}-seed{rest.rstrip(']')}" if sep else name


def complete(layout: Mapping[str, Mapping[int, str]], episodes: Mapping[str, Any]) -> dict[str, dict[int, str]]:
    """The layout with every arm of `episodes` it does not name (e.g. a task mix's `best_fixed[task]`) as
    shared by every training seed."""
    seeds = list(next(iter(layout.values())))
    named = {name for by_seed in layout.values() for name in by_seed.values()}
    return {**{arm: dict(by_seed) for arm, by_seed in layout.items()},
            **{name: dict.fromkeys(seeds, name) for name in episodes if name not in named}}


def base_of(layout: Mapping[str, Mapping[int, str]], name: str | None) -> str | None:
    """The layout's arm that `name` (an arm's episodes under one training seed) belongs to, or None."""
    return next((arm for arm, by_seed in layout.items() if name in by_seed.values()), None)


def views(episodes: Mapping[str, Any], layout: Mapping[str, Mapping[int, str]],
          learned: str | None) -> list[tuple[dict[str, Any], str | None]]:
    """Per training seed: (its episodes — the arms it shares and its own — in table order, its learned
    arm's name); one view of everything when no arm learned yet."""
    if learned is None:
        return [(dict(episodes), None)]
    out = []
    for seed, mine in layout[learned].items():
        names = {by_seed[seed] for by_seed in layout.values()}
        out.append(({name: eps for name, eps in episodes.items() if name in names}, mine))
    return out


def aggregate(episodes: Mapping[str, Sequence[Any]], layout: Mapping[str, Mapping[int, str]],
              learned: str) -> list[dict[str, Any]]:
    """The learned arm against every other arm of the layout, across the training seeds where both ran
    (each over the evaluation seeds both finished): one dict per arm with the mean paired difference, its
    interval, verdict, P(learned > arm), both interquartile means and each training seed's mean."""
    out = []
    for arm, by_seed in layout.items():
        if arm == learned:
            continue
        pairs = {seed: paired_accuracies(episodes.get(layout[learned][seed], ()), episodes.get(name, ()))
                 for seed, name in by_seed.items()}
        pairs = {seed: p for seed, p in pairs.items() if p}
        if not pairs:
            continue
        agg = stats.across_training_seeds([[a for a, _ in p] for p in pairs.values()],
                                          [[b for _, b in p] for p in pairs.values()])
        out.append({"a": learned, "b": arm, "train_seeds": list(pairs), "n": agg.n, "mean": agg.mean,
                    "low": agg.low, "high": agg.high, "confidence": agg.confidence, "verdict": agg.verdict,
                    "p_improvement": agg.p_improvement, "iqm_a": agg.iqm_a, "iqm_b": agg.iqm_b,
                    "per_seed": {str(seed): d for seed, d in zip(pairs, agg.per_seed)}})
    return out


def paired_accuracies(a: Sequence[Any], b: Sequence[Any]) -> list[tuple[float, float]]:
    """(a's accuracy, b's) on every evaluation seed both ran, in a's order: how every pair of arms is
    paired, within one training seed or across a whole comparison."""
    acc_b = {e.seed: e.accuracy for e in b}
    return [(e.accuracy, acc_b[e.seed]) for e in a if e.seed in acc_b]


def text(aggregate: Sequence[dict[str, Any]], train_seeds: Sequence[int]) -> list[str]:
    """The aggregate as the table's lines: a heading, then one line per arm (`line`)."""
    if not aggregate:
        return []
    a = aggregate[0]["a"]
    return [f"across training seeds {' '.join(map(str, train_seeds))}: {a} − arm (pp), the mean over training seeds "
            f"of the paired difference, 95% stratified bootstrap",
            f"interval over (training seed, evaluation seed); P({a} > arm) over those pairs, ties half; IQM: "
            f"interquartile means (%):", *(f"  {line(g)}" for g in aggregate)]


def line(g: dict[str, Any]) -> str:
    """One arm of the aggregate: "ppo vs wait: +35.10 [+33.18, +37.01]  ppo beats wait  P(ppo > wait) 1.00  IQM
    52.10 vs 16.90  per training seed +35.00 +34.10 +36.20"."""
    per_seed = " ".join(f"{d:+.2f}" for d in g["per_seed"].values())
    return (f"{g['a']} vs {g['b']}: {g['mean']:+.2f} [{g['low']:+.2f}, {g['high']:+.2f}]  {g['a']} {g['verdict']} "
            f"{g['b']}  P({g['a']} > {g['b']}) {g['p_improvement']:.2f}  IQM {g['iqm_a']:.2f} vs {g['iqm_b']:.2f}  "
            f"per training seed {per_seed}")


def spread(table: Any, path=None, title: str | None = None) -> Any:
    """The spread across training seeds: per arm, every episode a small grey dot, each training seed's
    mean a marker in that seed's colour (one marker for an arm every seed shares), the mean over
    everything a black bar, and under each arm the learned arm's aggregate difference from it; saved to
    `path` when given. Built on `matplotlib.figure.Figure` (no pyplot state)."""
    from matplotlib.figure import Figure

    arms = [arm for arm, by_seed in table.arms_by_train_seed.items()
            if any(name in table.episodes for name in by_seed.values())]
    fig = Figure(figsize=(max(5.0, 1.3 * len(arms) + 2), 4.2), layout="constrained")
    ax = fig.add_subplot()
    for x, arm in enumerate(arms):
        _draw_arm(ax, x, arm, {seed: name for seed, name in table.arms_by_train_seed[arm].items()
                               if name in table.episodes}, table)
    against = {g["b"]: f"{g['b']}\n({g['a']} {g['mean']:+.1f} pp, {g['verdict']})" for g in table.aggregate}
    ax.set_xticks(np.arange(len(arms)), [against.get(arm, arm) for arm in arms], fontsize=8)
    ax.set_ylabel("validation accuracy, last epochs (%)")
    ax.set_title(title or f"{len(table.train_seeds)} training seeds × {len(table.seeds)} evaluation seeds")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), loc="best", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def _draw_arm(ax: Any, x: int, arm: str, names: Mapping[int, str], table: Any) -> None:
    """One arm of `spread` at position x: `names`, its episodes' name per training seed."""
    accuracy = {name: [e.accuracy for e in table.episodes[name]] for name in names.values()}
    everything = [a for values in accuracy.values() for a in values]
    ax.scatter(np.full(len(everything), float(x)), everything, s=8, color="0.7", zorder=1)
    if set(accuracy) == {arm}:  # the same episodes for every training seed
        ax.scatter([x], [np.mean(everything)], s=60, color="black", marker="D", zorder=3,
                   label="arm run once (every training seed)")
    else:
        for i, (seed, name) in enumerate(names.items()):
            ax.scatter([x + 0.08 * (i - (len(names) - 1) / 2)], [np.mean(accuracy[name])], s=60,
                       color=f"C{table.train_seeds.index(seed) % 10}", zorder=3, label=f"training seed {seed}")
    ax.hlines(np.mean(everything), x - 0.25, x + 0.25, color="black", linewidth=2.0, zorder=2)
