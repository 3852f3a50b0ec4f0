"""The paired-arms figure of `compare` and `prove`: accuracy per arm per evaluation seed.

Each seed is one grey line joining its arms (so a seed-by-seed gain reads as a line going up), each arm's
mean is a black bar, and arms that beat the baseline are labelled. Built on `matplotlib.figure.Figure`
(no pyplot state), so it renders under any backend.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure


def paired_arms(table: Any, path=None, title: str | None = None) -> Figure:
    """Draw `table` (an `esper_fx.comparison.ComparisonTable`); save it to `path` when given."""
    arms = [r["arm"] for r in table.rows]
    acc = np.array([[e.accuracy for e in table.episodes[a]] for a in arms])  # [arms, seeds]
    fig = Figure(figsize=(max(5.0, 1.3 * len(arms) + 2), 4.2), layout="constrained")
    ax = fig.add_subplot()
    xs = np.arange(len(arms))
    for column in acc.T:
        ax.plot(xs, column, color="0.6", linewidth=0.9, marker="o", markersize=3.5, alpha=0.8)
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
