"""Accuracy against training compute, every arm of a comparison: one point per arm per evaluation seed
(x: the episode's training GFLOPs, host and seeds, validation and counterfactual passes left out), each
arm's mean a larger marker. Each arm has its own marker shape and the means are drawn hollow, so arms
that played the same episodes (a controller equal to a fixed schedule) stay visible. A static curve
(`static_final` and `static_final@F`, `esper_fx.evaluation.iso_accuracy`) is joined by a dashed line through its
means: a grown arm above and left of it saved compute at equal accuracy. Built on `matplotlib.figure.Figure` (no pyplot state)."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

MARKERS = "osD^vPX*"


def accuracy_vs_compute(table: Any, path=None, title: str | None = None) -> Figure:
    """Draw `table` (an `esper_fx.evaluation.comparison_table.ComparisonTable`); save it to `path` when given."""
    fig = Figure(figsize=(6.4, 4.4), layout="constrained")
    ax = fig.add_subplot()
    for i, row in enumerate(table.rows):
        episodes = table.episodes[row["arm"]]
        x = np.array([e.training_flops / 1e9 for e in episodes])
        y = np.array([e.accuracy for e in episodes])
        color, marker = f"C{i % 10}", MARKERS[i % len(MARKERS)]
        ax.scatter(x, y, s=14, color=color, marker=marker, alpha=0.6)
        size = 200 - 110 * i / max(1, len(table.rows) - 1)  # later arms smaller: equal means nest, not hide
        ax.scatter([np.nanmean(x)], [y.mean()], s=size, facecolor="none", edgecolor=color, linewidth=2,
                   marker=marker, label=row["arm"])
    from esper_fx.evaluation.iso_accuracy import curve_arms

    for tag, curve in curve_arms([row["arm"] for row in table.rows]).items():
        points = sorted((np.nanmean([e.training_flops / 1e9 for e in table.episodes[name]]),
                         np.mean([e.accuracy for e in table.episodes[name]])) for name in curve.values())
        ax.plot(*zip(*points), color="0.3", linestyle="--", linewidth=1.2, label=f"static curve{tag}")
    ax.set_xlabel("training compute per episode (GFLOPs)")
    ax.set_ylabel("validation accuracy, last epochs (%)")
    ax.set_title(title or "accuracy against training compute")
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
