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
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import numpy as np

STATIC_FINAL = "static_final"
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


def _by_seed(episodes: Sequence[Any]) -> dict[int, Any]:
    return {e.seed: e for e in episodes}


def iso_accuracy(curve: Mapping[float, Sequence[Any]], grown: Sequence[Any], *, resamples: int = BUDGET_RESAMPLES,
                 seed: int = BUDGET_SEED, confidence: float = 0.95) -> dict[str, Any]:
    """The saving of one grown arm against one static curve. `curve`: budget fraction -> that budget's
    episodes (1.0: `static_final`'s), `grown`: the arm's episodes; over the evaluation seeds every one of them
    ran. Returns the saving, its bound, the percentile interval over resampled seeds, the grown arm's
    accuracy and training FLOPs as a fraction of the full budget's, and the curve's mean points."""
    seeds = sorted(set(_by_seed(grown)).intersection(*(_by_seed(eps) for eps in curve.values())))
    if not seeds or 1.0 not in curve:
        raise ValueError("iso-accuracy saving needs static_final (the full budget) and the grown arm on common seeds")
    fractions = sorted(curve)
    flops = np.array([[_by_seed(curve[f])[s].training_flops for s in seeds] for f in fractions])  # [budgets, seeds]
    acc = np.array([[_by_seed(curve[f])[s].accuracy for s in seeds] for f in fractions])
    g_flops = np.array([_by_seed(grown)[s].training_flops for s in seeds])
    g_acc = np.array([_by_seed(grown)[s].accuracy for s in seeds])
    point, bound = saving(flops.mean(1), acc.mean(1), float(g_flops.mean()), float(g_acc.mean()))
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples if len(seeds) > 1 else 0):
        pick = rng.integers(0, len(seeds), len(seeds))
        draws.append(saving(flops[:, pick].mean(1), acc[:, pick].mean(1), float(g_flops[pick].mean()),
                            float(g_acc[pick].mean()))[0])
    alpha = (1.0 - confidence) / 2
    low, high = (float(np.quantile(draws, alpha)), float(np.quantile(draws, 1 - alpha))) if draws else (-np.inf, np.inf)
    full = fractions.index(1.0)
    return {"saving": float(point), "bound": bound, "low": low, "high": high, "confidence": confidence,
            "n": len(seeds), "accuracy": float(g_acc.mean()), "flops_fraction": float(g_flops.mean() / flops[full].mean()),
            "accuracy_vs_full": float(g_acc.mean() - acc[full].mean()),
            "points": [{"fraction": f, "training_gflops": float(flops[i].mean() / 1e9), "accuracy": float(acc[i].mean())}
                      for i, f in enumerate(fractions)]}


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


def line(entry: Mapping[str, Any]) -> str:
    """One line of the table's text for one saving."""
    bound = f" ({entry['bound']})" if entry["bound"] else ""
    return (f"  {entry['arm']} vs {entry['curve']}'s curve: saves {100 * entry['saving']:.1f}%{bound} "
            f"[{100 * entry['low']:.1f}, {100 * entry['high']:.1f}] of the compute at equal accuracy; it trains on "
            f"{100 * entry['flops_fraction']:.1f}% of static_final's FLOPs, accuracy {entry['accuracy_vs_full']:+.2f} pp "
            f"against it")
