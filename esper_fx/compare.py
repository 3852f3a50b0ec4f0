"""`esper_fx.compare`: run several arms (controllers, rewards, config tweaks) on the same seeds.

    table = esper_fx.compare({"ppo": "ppo_lstm", "static": "wait",
                              "sparse": {"controller": "ppo_lstm", "reward_fn": "sparse"}},
                             config, seeds=[0, 1, 2])
    table            # renders as an HTML table in Jupyter, plain text elsewhere
    table.rows       # one dict per arm
    table.runs       # arm -> [RunResult per seed]

An arm is a controller (registered name, Controller bundle or constructor) or a dict of `run` keyword
arguments (`controller`, `reward_fn`) plus `config` overrides under the key "config".
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from esper_fx.config import TrainingConfig

ROW_FIELDS = ("arm", "final_accuracy_mean", "final_accuracy_std", "params_added_mean", "fossilized_mean",
              "culled_mean", "germinated_mean", "wall_time_s")


@dataclass
class ComparisonTable:
    rows: list[dict[str, Any]]
    runs: dict[str, list[Any]] = field(default_factory=dict)

    def row(self, arm: str) -> dict[str, Any]:
        for r in self.rows:
            if r["arm"] == arm:
                return r
        raise KeyError(arm)

    def to_text(self) -> str:
        header = (f"{'arm':<18} {'final acc %':>16} {'params added':>12} {'fossilized':>10} {'culled':>8} "
                  f"{'germinated':>10} {'wall s':>8}")
        lines = [header, "-" * len(header)]
        for r in self.rows:
            acc = f"{r['final_accuracy_mean']:.2f} ± {r['final_accuracy_std']:.2f}"
            lines.append(f"{r['arm']:<18} {acc:>16} {r['params_added_mean']:>12.0f} {r['fossilized_mean']:>10.2f} "
                         f"{r['culled_mean']:>8.2f} {r['germinated_mean']:>10.2f} {r['wall_time_s']:>8.1f}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:  # the text table, not the dataclass dump of every run's history and events
        return self.to_text()

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{h}</th>" for h in ("arm", "final acc % (mean ± std)", "params added",
                                                  "fossilized / episode", "culled / episode",
                                                  "germinated / episode", "wall time s"))
        body = []
        for r in self.rows:
            cells = [html.escape(r["arm"]), f"{r['final_accuracy_mean']:.2f} ± {r['final_accuracy_std']:.2f}",
                     f"{r['params_added_mean']:.0f}", f"{r['fossilized_mean']:.2f}", f"{r['culled_mean']:.2f}",
                     f"{r['germinated_mean']:.2f}", f"{r['wall_time_s']:.1f}"]
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _arm_kwargs(arm: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    if isinstance(arm, Mapping):
        kwargs = dict(arm)
        overrides = dict(kwargs.pop("config", {}) or {})
        unknown = set(kwargs) - {"controller", "reward_fn"}
        if unknown:
            raise ValueError(f"unknown arm keys {sorted(unknown)}; use controller, reward_fn and config")
        return kwargs, overrides
    return {"controller": arm}, {}


def summarize_runs(name: str, runs: Sequence[Any], wall_time: float) -> dict[str, Any]:
    finals, params, fossil, culled, germ = [], [], [], [], []
    for result in runs:
        episodes = max(1, sum(len(h.env_accuracies) for h in result.history))
        last = result.history[-1]
        finals.append(float(np.mean(last.env_accuracies)))
        params.append(float(np.mean(last.env_seed_params)))
        fossil.append(sum(h.seeds_fossilized for h in result.history) / episodes)
        culled.append(sum(h.seeds_culled for h in result.history) / episodes)
        germ.append(sum(h.seeds_created for h in result.history) / episodes)
    std = float(np.std(finals, ddof=1)) if len(finals) > 1 else 0.0
    return {
        "arm": name, "final_accuracy_mean": float(np.mean(finals)), "final_accuracy_std": std,
        "params_added_mean": float(np.mean(params)), "fossilized_mean": float(np.mean(fossil)),
        "culled_mean": float(np.mean(culled)), "germinated_mean": float(np.mean(germ)),
        "wall_time_s": wall_time, "final_accuracies": finals,
    }


def compare(arms: Mapping[str, Any], config: TrainingConfig, seeds: Sequence[int] = (0,), *,
            run_fn: Callable | None = None, progress: Callable[[str], None] | None = print) -> ComparisonTable:
    """Run every arm on every seed (same seeds for every arm) and tabulate the final batch.

    The final accuracy of a run is the mean final validation accuracy of its last batch's envs; the
    table gives its mean ± std over seeds. "params added" is the mean seed parameter count held at the
    last epoch of the last batch's episodes (fossils included; `BatchSummary.env_seed_params`).
    """
    if not arms:
        raise ValueError("compare needs at least one arm")
    if not seeds:
        raise ValueError("compare needs at least one seed")
    if run_fn is None:
        from esper_fx.loop import run as run_fn
    rows, runs = [], {}
    for name, arm in arms.items():
        kwargs, overrides = _arm_kwargs(arm)
        started = time.perf_counter()
        results = []
        for seed in seeds:
            cfg = config.replace(**overrides, seed=int(seed), run_dir=None, resume_path=None)
            if progress is not None:
                progress(f"compare: {name} seed {seed}")
            results.append(run_fn(cfg, **kwargs))
        runs[name] = results
        rows.append(summarize_runs(name, results, time.perf_counter() - started))
    return ComparisonTable(rows=rows, runs=runs)
