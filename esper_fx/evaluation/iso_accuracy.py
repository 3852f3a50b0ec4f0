"""The compute a grown network saves at equal accuracy (LEARNING.md §3, §11), as the growth literature measures
it: the static network is trained at several fractions of its own budget (`static_final@F`, each fully decayed
over its own steps; `static_final` itself is F = 1), which draws its accuracy against training compute; a grown
run that reaches accuracy A with C_g training FLOPs saves

    saving = 1 − C_g / C_s(A)

where C_s(A) is the compute at which the static curve reaches A: the curve's points (C_i, Ā_i), mean FLOPs
and mean accuracy of each budget over the evaluation seeds, sorted by compute, made non-decreasing (a running
maximum: more compute never loses accuracy it already had) and joined by straight lines. Where A lies above
the curve's top, C_s is unknown but at least the full budget's, so the saving is at least 1 − C_g / C_max (a
lower bound, `bound = "at least"`); below its lowest point it is at most 1 − C_g / C_min (`"at most"`).

The interval resamples the evaluation seeds with replacement (the same draw for the grown arm and every budget:
the pairs stay paired) and takes the 2.5th and 97.5th percentiles of the saving, each resample's bound
clamped as above.

**The ceiling of growth** (LEARNING §11), read before any growth run: how much any growth from a smaller
network to the curve's could save, however well it transferred. Suppose that after the expansion the grown
network went on exactly as the curve's own run does from the accuracy the small network had reached (a perfect
transfer). A run that spent c_i FLOPs small, reaching a_i, then reached the target A* = Ā_full − `within` (0.5
pp: target 1's accuracy) spends c_i + C_s(A*) − C_s(a_i), so it saves

    ceiling = max_i (C_s(min(a_i, A*)) − c_i) / C_s(A*)

over the small network's points (its mean FLOPs and accuracy on each of its budgets). Points below the static
curve's lowest are left out (C_s unknown there). The small points are decayed runs, whereas an expansion in
a stable phase starts from an undecayed network, so the ceiling is generous (35% where the undecayed state
allowed 13–19%, LEARNING §11); a growth measured above it shows the model wrong. Under 30% (target 1's
saving), no growth between these two networks can meet target 1 there; above it, one may.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import numpy as np

STATIC_FINAL = "static_final"
SMALL_ARM = "wait"  # the host alone: the small network whose points the ceiling reads
CEILING_WITHIN = 0.5  # pp under the full budget's accuracy: the target accuracy of the ceiling
BUDGET_RESAMPLES = 2000
BUDGET_SEED = 0
_BUDGET_NAME = re.compile(r"^static_final@([0-9.]+)(\[seed=-?\d+\])?$")


def budget_arm(fraction: float) -> str:
    """The arm that trains `static_final`'s network on `fraction` of its own budget: "static_final@0.4"."""
    return f"{STATIC_FINAL}@{fraction:g}"


def check_budgets(fractions: Sequence[float]) -> list[float]:
    """The budget fractions, each in (0, 1), distinct, sorted; 1 (the full budget) is `static_final` itself
    and is left out. Raises ValueError naming the bad value."""
    out = []
    for f in fractions:
        value = float(f)
        if not 0.0 < value <= 1.0 or value != value:
            raise ValueError(f"static budget {f!r} is not a fraction in (0, 1] of static_final's budget")
        if value < 1.0:
            out.append(value)
    if len(set(out)) != len(out):
        raise ValueError(f"static budgets list a fraction twice (got {list(fractions)})")
    return sorted(out)


def compute_at(curve_flops: Sequence[float], curve_acc: Sequence[float], accuracy: float) -> tuple[float, str]:
    """(C_s(accuracy), bound): where the non-decreasing envelope of the curve reaches `accuracy`, by linear
    interpolation; above the top the full budget's compute ("at least"), below the bottom the lowest budget's
    ("at most"), else "" (exact)."""
    order = np.argsort(np.asarray(curve_flops, dtype=float), kind="stable")
    c = np.asarray(curve_flops, dtype=float)[order]
    a = np.maximum.accumulate(np.asarray(curve_acc, dtype=float)[order])
    if accuracy > a[-1]:
        return float(c[-1]), "at least"
    if accuracy < a[0]:
        return float(c[0]), "at most"
    i = int(np.searchsorted(a, accuracy, side="left"))  # the first point reaching it
    if i == 0 or a[i] == accuracy:
        return float(c[i]), ""
    share = (accuracy - a[i - 1]) / (a[i] - a[i - 1])
    return float(c[i - 1] + share * (c[i] - c[i - 1])), ""


def saving(curve_flops: Sequence[float], curve_acc: Sequence[float], grown_flops: float,
           grown_acc: float) -> tuple[float, str]:
    """(1 − grown_flops / C_s(grown_acc), bound) for a curve of mean points (module docstring)."""
    at, bound = compute_at(curve_flops, curve_acc, grown_acc)
    return 1.0 - grown_flops / at, bound


def ceiling(curve_flops: Sequence[float], curve_acc: Sequence[float], small_flops: Sequence[float],
            small_acc: Sequence[float], within: float = CEILING_WITHIN) -> float | None:
    """The most any growth from the small network's points to the curve's network could save at the full
    budget's accuracy − `within` (module docstring); None when every small point lies below the curve."""
    order = np.argsort(np.asarray(curve_flops, dtype=float), kind="stable")
    target = float(np.asarray(curve_acc, dtype=float)[order][-1]) - within
    need, _ = compute_at(curve_flops, curve_acc, target)
    gaps = []
    for c, a in zip(small_flops, small_acc):
        at, bound = compute_at(curve_flops, curve_acc, min(float(a), target))
        if bound != "at most":
            gaps.append((at - float(c)) / need)
    return max(gaps) if gaps else None


def _by_seed(episodes: Sequence[Any]) -> dict[int, Any]:
    return {e.seed: e for e in episodes}


def _paired(curve: Mapping[float, Sequence[Any]], other: Sequence[Any]) -> tuple[list[int], list[float], Any, Any]:
    """The curve and another arm on the seeds they share: (seeds, the curve's fractions, (its training FLOPs,
    its accuracy), each [budgets, seeds], (the other's FLOPs, accuracy), each [seeds]). No seeds without the
    full budget (1.0) or a seed common to all."""
    seeds = sorted(set(_by_seed(other)).intersection(*(_by_seed(eps) for eps in curve.values())))
    if 1.0 not in curve:
        seeds = []
    fractions = sorted(curve)
    by_seed = [_by_seed(curve[f]) for f in fractions] + [_by_seed(other)]
    flops = np.array([[b[s].training_flops for s in seeds] for b in by_seed])
    acc = np.array([[b[s].accuracy for s in seeds] for b in by_seed])
    return seeds, fractions, (flops[:-1], acc[:-1]), (flops[-1], acc[-1])


def iso_accuracy(curve: Mapping[float, Sequence[Any]], grown: Sequence[Any], *, resamples: int = BUDGET_RESAMPLES,
                 seed: int = BUDGET_SEED, confidence: float = 0.95) -> dict[str, Any]:
    """The saving of one grown arm against one static curve. `curve`: budget fraction -> that budget's
    episodes (1.0: `static_final`'s), `grown`: the arm's episodes; over the evaluation seeds every one of them
    ran. Returns the saving, its bound, the percentile interval over resampled seeds, the grown arm's
    accuracy and training FLOPs as a fraction of the full budget's, and the curve's mean points."""
    seeds, fractions, (flops, acc), (g_flops, g_acc) = _paired(curve, grown)
    if not seeds:
        raise ValueError("iso-accuracy saving needs static_final (the full budget) and the grown arm on common seeds")
    point, bound = saving(flops.mean(1), acc.mean(1), float(g_flops.mean()), float(g_acc.mean()))
    low, high = _interval(lambda pick: saving(flops[:, pick].mean(1), acc[:, pick].mean(1), float(g_flops[pick].mean()),
                                              float(g_acc[pick].mean()))[0], len(seeds), resamples, seed, confidence)
    full = fractions.index(1.0)
    return {"saving": float(point), "bound": bound, "low": low, "high": high, "confidence": confidence,
            "n": len(seeds), "accuracy": float(g_acc.mean()), "flops_fraction": float(g_flops.mean() / flops[full].mean()),
            "accuracy_vs_full": float(g_acc.mean() - acc[full].mean()),
            "points": [{"fraction": f, "training_gflops": float(flops[i].mean() / 1e9), "accuracy": float(acc[i].mean())}
                      for i, f in enumerate(fractions)]}


def _interval(statistic, n_seeds: int, resamples: int, seed: int, confidence: float) -> tuple[float, float]:
    """The percentile interval of `statistic(pick)` over seeds resampled with replacement (`pick`: indices);
    unbounded with one seed. Resamples where the statistic is None are left out."""
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples if n_seeds > 1 else 0):
        value = statistic(rng.integers(0, n_seeds, n_seeds))
        if value is not None:
            draws.append(value)
    alpha = (1.0 - confidence) / 2
    return (float(np.quantile(draws, alpha)), float(np.quantile(draws, 1 - alpha))) if draws else (-np.inf, np.inf)


def growth_ceiling(curve: Mapping[float, Sequence[Any]], small: Sequence[Any], *, within: float = CEILING_WITHIN,
                   resamples: int = BUDGET_RESAMPLES, seed: int = BUDGET_SEED,
                   confidence: float = 0.95) -> dict[str, Any] | None:
    """The ceiling of growth (module docstring) from the small network's episodes (one budget: its own) to a
    static curve (`iso_accuracy`'s `curve`), with the interval over resampled seeds; None when the small
    network lies below the curve or they share no seed."""
    seeds, fractions, (flops, acc), (s_flops, s_acc) = _paired(curve, small)
    if not seeds:
        return None
    point = ceiling(flops.mean(1), acc.mean(1), [s_flops.mean()], [s_acc.mean()], within)
    if point is None:
        return None
    low, high = _interval(lambda pick: ceiling(flops[:, pick].mean(1), acc[:, pick].mean(1), [s_flops[pick].mean()],
                                               [s_acc[pick].mean()], within), len(seeds), resamples, seed, confidence)
    full = fractions.index(1.0)
    return {"ceiling": float(point), "low": low, "high": high, "confidence": confidence, "n": len(seeds),
            "within": within, "target_accuracy": float(acc[full].mean() - within),
            "small_accuracy": float(s_acc.mean()), "small_flops_fraction": float(s_flops.mean() / flops[full].mean())}


def curve_arms(names: Sequence[str]) -> dict[str, dict[float, str]]:
    """The static curves among a table's arm names, keyed by their training-seed tag ("" when shared):
    tag -> {fraction: arm name}, 1.0 being `static_final` (with the same tag). Only curves with a budget arm
    besides the full one are kept."""
    curves: dict[str, dict[float, str]] = {}
    for name in names:
        match = _BUDGET_NAME.match(name)
        if match:
            curves.setdefault(match.group(2) or "", {})[float(match.group(1))] = name
    for tag, curve in curves.items():
        full = f"{STATIC_FINAL}{tag}"
        if full in names:
            curve[1.0] = full
    return {tag: curve for tag, curve in curves.items() if 1.0 in curve}


def savings(episodes: Mapping[str, Sequence[Any]], grown: Sequence[str]) -> list[dict[str, Any]]:
    """The iso-accuracy saving of every arm of `grown` against every static curve of `episodes` that is its
    own (an arm of training seed S against the curve of S) or shared (the curve of a source that does not
    depend on the training seed): one dict per (arm, curve), with "arm" and "curve" (the full budget's name)."""
    out = []
    for tag, curve in curve_arms(list(episodes)).items():
        for arm in grown:
            mine = re.search(r"\[seed=-?\d+\]$", arm)
            if tag and mine and mine.group(0) != tag:
                continue
            if arm not in episodes or not episodes[arm]:
                continue
            try:
                result = iso_accuracy({f: episodes[name] for f, name in curve.items()}, episodes[arm])
            except ValueError:
                continue
            out.append({"arm": arm, "curve": curve[1.0], **result})
    return out


def ceilings(episodes: Mapping[str, Sequence[Any]], small: str = SMALL_ARM) -> list[dict[str, Any]]:
    """The ceiling of growth from `small` (the host alone) to every static curve of `episodes` on its training
    seed (or shared): one dict per curve, with "small" and "curve" (the full budget's name)."""
    out = []
    for tag, curve in curve_arms(list(episodes)).items():
        name = next((n for n in (f"{small}{tag}", small) if episodes.get(n)), None)
        if name is None:
            continue
        result = growth_ceiling({f: episodes[arm] for f, arm in curve.items()}, episodes[name])
        if result is not None:
            out.append({"small": name, "curve": curve[1.0], **result})
    return out


def ceiling_line(entry: Mapping[str, Any]) -> str:
    """One line of the table's text for one ceiling."""
    return (f"  ceiling of growth from {entry['small']} to {entry['curve']}'s network: a perfect transfer saves at "
            f"most {100 * entry['ceiling']:.1f}% [{100 * entry['low']:.1f}, {100 * entry['high']:.1f}] at "
            f"{entry['target_accuracy']:.2f}% ({entry['curve']} − {entry['within']:g} pp); {entry['small']} reaches "
            f"{entry['small_accuracy']:.2f}% on {100 * entry['small_flops_fraction']:.1f}% of {entry['curve']}'s FLOPs")


def line(entry: Mapping[str, Any]) -> str:
    """One line of the table's text for one saving."""
    bound = f" ({entry['bound']})" if entry["bound"] else ""
    return (f"  {entry['arm']} vs {entry['curve']}'s curve: saves {100 * entry['saving']:.1f}%{bound} "
            f"[{100 * entry['low']:.1f}, {100 * entry['high']:.1f}] of the compute at equal accuracy; it trains on "
            f"{100 * entry['flops_fraction']:.1f}% of static_final's FLOPs, accuracy {entry['accuracy_vs_full']:+.2f} pp "
            f"against it")
