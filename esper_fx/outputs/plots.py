"""Matplotlib helpers to read esper_fx runs from a notebook.

Every plot function takes run data (a RunResult-like object with `.history` / `.events`, or the plain
lists), draws into a Figure and returns it. Nothing here calls `plt.show()` or touches pyplot state:
figures are built with `matplotlib.figure.Figure`, so they render under any backend (Agg included),
display once when returned as a Jupyter cell's value, and can be saved with `fig.savefig(...)`.

Data formats (BEHAVIOUR §7.7): a history entry is one `esper_fx.outputs.history.BatchSummary` per RL batch
(accuracies, rewards, action and head counts, PPO metrics or None; its dict, as a checkpoint manifest
stores it, is read too); an event is one dict per line of `events.jsonl`.

Lifecycle time axis: integer x = e is the end of epoch e (after that epoch's action and step_epoch).
A seed germinated in epoch g is drawn from x = g, each SEED_STAGE_CHANGED in epoch e starts the new
stage at x = e, and a seed still present at the end of the episode is drawn up to x = max_epochs.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from esper_fx.contracts.actions import ACTION_HEADS, BLEND_NAMES, TEMPO_NAMES
from esper_fx.contracts.slots import SlotIdError, sort_slot_ids
from esper_fx.contracts.stages import SeedStage
from esper_fx.outputs.events import load_events
from esper_fx.outputs.history import OP_NAMES, BatchSummary, as_summaries
from esper_fx.outputs.time_breakdown import PARTS, shares

__all__ = [
    "StageInterval", "STAGE_COLORS", "events_to_intervals", "load_events",
    "plot_runs", "plot_lifecycle", "plot_action_distribution", "plot_ppo_diagnostics", "plot_seed_events",
    "plot_timing", "plot_time_breakdown",
]

DRAWN_STAGES: tuple[str, ...] = ("GERMINATED", "TRAINING", "BLENDING", "PROBATIONARY", "FOSSILIZED")
STAGE_COLORS: Mapping[str, str] = {
    "GERMINATED": "#b0b0b0",
    "TRAINING": "#4c72b0",
    "BLENDING": "#dd8452",
    "PROBATIONARY": "#8172b3",
    "FOSSILIZED": "#55a868",
}
_OTHER_STAGE_COLOR = "#cccccc"
_ENDING_STAGES = frozenset({"CULLED", "EMBARGOED", "RESETTING", "DORMANT", "UNKNOWN"})
_CULL_REASON_LABELS: Mapping[str, str] = {
    "": "policy",
    "negative_counterfactual": "neg. cf",
    "probation_timeout": "timeout",
    "governor_rollback": "rollback",
}
_METRIC_LABELS: Mapping[str, str] = {
    "avg_accuracy": "avg val accuracy (%)",
    "rolling_avg_accuracy": "rolling avg val accuracy (%)",
    "avg_reward": "avg episode reward",
    "entropy_coef": "entropy coefficient",
    "seeds_created": "seeds created",
    "seeds_fossilized": "seeds fossilized",
    "seeds_culled": "seeds culled",
    "rollbacks": "governor rollbacks",
}
_PPO_ENTROPY_KEYS: tuple[tuple[str, str], ...] = (
    ("entropy", "total"), ("entropy_slot", "slot"), ("entropy_blueprint", "blueprint"),
    ("entropy_blend", "blend"), ("entropy_op", "op"), ("entropy_tempo", "tempo"),
)
_PPO_PANELS: tuple[tuple[str, str], ...] = (
    ("approx_kl", "approx KL"), ("clip_fraction", "clip fraction"),
    ("explained_variance", "explained variance"), ("policy_loss", "policy loss"),
    ("value_loss", "value loss"), ("grad_norm", "grad norm"),
)


# ----------------------------------------------------------------------------------------------
# input normalisation
# ----------------------------------------------------------------------------------------------


def _as_history(data: Any) -> list[BatchSummary]:
    """History entries from a RunResult-like object (`.history`) or a plain sequence of BatchSummary rows
    (or their dicts)."""
    history = getattr(data, "history", data)
    if history is None:
        return []
    return as_summaries(history)


def _event_dict(event: Any) -> dict[str, Any]:
    if isinstance(event, Mapping):
        return dict(event)
    if hasattr(event, "to_dict"):
        return event.to_dict()
    raise TypeError(f"an event must be a dict or have .to_dict() (got {type(event).__name__})")


def _as_events(data: Any) -> list[dict[str, Any]]:
    """Event dicts from a RunResult-like object (`.events`), a list, or a path to events.jsonl."""
    if isinstance(data, (str, Path)):
        return load_events(data)
    events = getattr(data, "events", data)
    return [_event_dict(e) for e in (events or [])]


def _number(value: Any) -> float:
    """A float, with None / non-numbers as NaN (the run log writes NaN as null)."""
    if isinstance(value, bool):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _lookup(entry: BatchSummary, key: str) -> Any:
    """The entry's field `key`; a dotted key ("ppo.approx_kl") walks into the field's dict; None if absent."""
    name, *rest = key.split(".")
    value: Any = getattr(entry, name, None)
    for part in rest:
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _new_figure(fig: Figure | None, figsize: tuple[float, float]) -> Figure:
    if fig is not None:
        fig.clear()
        return fig
    return Figure(figsize=figsize, layout="constrained")


# ----------------------------------------------------------------------------------------------
# 1. runs side by side
# ----------------------------------------------------------------------------------------------


def _as_run_mapping(runs: Any) -> dict[str, list[BatchSummary]]:
    if isinstance(runs, Mapping):
        return {str(name): _as_history(run) for name, run in runs.items()}
    return {"run": _as_history(runs)}


def _series(history: Sequence[BatchSummary], key: str) -> np.ndarray:
    return np.array([_number(_lookup(entry, key)) for entry in history], dtype=float)


def _x_values(history: Sequence[BatchSummary], x: str) -> np.ndarray:
    values = _series(history, x)
    fallback = np.arange(len(history), dtype=float)
    return np.where(np.isnan(values), fallback, values)


def _env_band(ax: Axes, xs: np.ndarray, history: Sequence[BatchSummary], color: str) -> None:
    accs = [np.asarray([_number(a) for a in entry.env_accuracies], dtype=float) for entry in history]
    low = np.array([np.nanmin(a) if a.size and not np.all(np.isnan(a)) else np.nan for a in accs])
    high = np.array([np.nanmax(a) if a.size and not np.all(np.isnan(a)) else np.nan for a in accs])
    ax.fill_between(xs, low, high, color=color, alpha=0.15, linewidth=0)


def _plot_metric(ax: Axes, metric: str, runs: Mapping[str, list], x: str, rolling: bool,
                 env_band: bool) -> None:
    colors = [f"C{i % 10}" for i in range(len(runs))]
    for color, (name, history) in zip(colors, runs.items()):
        xs = _x_values(history, x)
        ax.plot(xs, _series(history, metric), color=color, label=name, linewidth=1.6)
        if metric == "avg_accuracy" and rolling:
            ax.plot(xs, _series(history, "rolling_avg_accuracy"), color=color, linestyle="--",
                    linewidth=1.3, label="_nolegend_")
        if metric == "avg_accuracy" and env_band:
            _env_band(ax, xs, history, color)
    ax.set_ylabel(_METRIC_LABELS.get(metric, metric))
    ax.set_title(_METRIC_LABELS.get(metric, metric), fontsize=10)
    ax.grid(True, alpha=0.3)


def _runs_legend(ax: Axes, with_rolling: bool) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if with_rolling:
        handles += [Line2D([], [], color="0.4", linestyle="-"), Line2D([], [], color="0.4", linestyle="--")]
        labels += ["per batch", "rolling mean"]
    if handles:
        ax.legend(handles, labels, fontsize=8, loc="best")


def plot_runs(runs: Any, metrics: Sequence[str] = ("avg_accuracy", "avg_reward"), *, rolling: bool = True,
              x: str = "batch", env_band: bool = False, static_host: float | None = None,
              fig: Figure | None = None) -> Figure:
    """Several runs on one figure: one subplot per metric (stacked, shared x), one line per run.

    runs: {name: RunResult-like or history list}; a single run (not a mapping) is labelled "run".
    metrics: history keys, dotted keys walk into nested dicts ("ppo.approx_kl"); missing values are gaps.
    rolling: also draw `rolling_avg_accuracy` dashed (same colour) on the avg_accuracy subplot.
    x: history key for the x axis ("batch" or "episodes_completed").
    env_band: shade the min..max of `env_accuracies` around avg_accuracy.
    static_host: the static host's accuracy (summary.json's "static_host"), a grey dotted line across the
    avg_accuracy subplot: what the run reached without growth.
    """
    run_map = _as_run_mapping(runs)
    fig = _new_figure(fig, (8.0, 2.8 * max(1, len(metrics)) + 0.4))
    axes = np.atleast_1d(fig.subplots(len(metrics), 1, sharex=True, squeeze=False)[:, 0])
    for ax, metric in zip(axes, metrics):
        _plot_metric(ax, metric, run_map, x, rolling, env_band)
        if metric == "avg_accuracy" and static_host is not None:
            ax.axhline(static_host, color="0.35", linestyle=":", linewidth=1.4,
                       label=f"static host {static_host:.1f}%")
        _runs_legend(ax, rolling and metric == "avg_accuracy")
    axes[-1].set_xlabel("episodes completed" if x == "episodes_completed" else x)
    axes[-1].xaxis.get_major_locator().set_params(integer=True)
    return fig


# ----------------------------------------------------------------------------------------------
# 2. seed lifecycle swimlanes
# ----------------------------------------------------------------------------------------------


class StageInterval(NamedTuple):
    """One stage of one seed: env `env`, slot `slot`, in `stage` from x = start_epoch to x = end_epoch."""

    env: int
    slot: str
    stage: str
    start_epoch: float
    end_epoch: float


def _stage_name(value: Any) -> str:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return SeedStage(int(value)).name
    text = str(value).strip()
    if text.isdigit():
        return SeedStage(int(text)).name
    return text.split(".")[-1].upper()


def _batch_events(events: Any, batch: int) -> list[dict[str, Any]]:
    """The events of one batch that carry an epoch, ordered by epoch (stable within an epoch)."""
    chosen = [e for e in _as_events(events) if e.get("batch") == batch and e.get("epoch") is not None]
    return sorted(chosen, key=lambda e: int(e["epoch"]))


@dataclass
class _LaneTracker:
    """Open stage per (env, slot); closed intervals accumulate in `closed`."""

    open: dict[tuple[int, str], tuple[str, float]]
    closed: list[StageInterval]

    def switch(self, key: tuple[int, str], stage: str | None, epoch: float) -> None:
        current = self.open.pop(key, None)
        if current is not None and epoch > current[1]:
            self.closed.append(StageInterval(key[0], key[1], current[0], current[1], float(epoch)))
        if stage is not None:
            self.open[key] = (stage, float(epoch))

    def stage_of(self, key: tuple[int, str]) -> str | None:
        current = self.open.get(key)
        return None if current is None else current[0]

    def close_all(self, end: float) -> None:
        for key in list(self.open):
            self.switch(key, None, max(end, self.open[key][1]))


def _apply_event(tracker: _LaneTracker, event: Mapping[str, Any]) -> None:
    kind = str(event.get("event_type"))
    env, slot, epoch = event.get("env_id"), event.get("slot_id"), float(event["epoch"])
    data = event.get("data") or {}
    if kind == "GOVERNOR_ROLLBACK" and env is not None:
        for key in [k for k in tracker.open if k[0] == env and tracker.stage_of(k) != "FOSSILIZED"]:
            tracker.switch(key, None, epoch)
        return
    if env is None or slot is None:
        return
    key = (int(env), str(slot))
    if kind == "SEED_GERMINATED":
        tracker.switch(key, _stage_name(data.get("stage", "GERMINATED")), epoch)
    elif kind == "SEED_STAGE_CHANGED" and ("to" in data or "to_stage" in data):
        target = _stage_name(data["to"] if "to" in data else data["to_stage"])  # the env pool writes to_stage
        tracker.switch(key, None if target in _ENDING_STAGES else target, epoch)
    elif kind == "SEED_FOSSILIZED" and tracker.stage_of(key) != "FOSSILIZED":
        tracker.switch(key, "FOSSILIZED", epoch)
    elif kind == "SEED_CULLED" and tracker.stage_of(key) is not None:
        tracker.switch(key, None, epoch)


def _safe_slot_order(slots: Iterable[str]) -> list[str]:
    slots = list(dict.fromkeys(slots))
    try:
        return sort_slot_ids(slots)
    except SlotIdError:
        return sorted(slots)


def events_to_intervals(events: Any, batch: int, max_epochs: float | None = None) -> list[StageInterval]:
    """Stage intervals of every seed in one batch, derived from its events.

    A seed opens at its SEED_GERMINATED epoch (stage GERMINATED, or data["stage"]); each SEED_STAGE_CHANGED
    starts data["to"] (or data["to_stage"], the key the env pool writes) at its epoch; SEED_FOSSILIZED starts
    FOSSILIZED; SEED_CULLED, a change to CULLED, or a GOVERNOR_ROLLBACK of the env (for every
    non-fossilized seed) closes it. Seeds still open at the end are closed at `max_epochs` (default: the
    largest epoch among the batch's events). Zero-length intervals (GERMINATED -> TRAINING within one
    epoch) are dropped. Sorted by env, canonical slot order, start.
    """
    chosen = _batch_events(events, batch)
    tracker = _LaneTracker(open={}, closed=[])
    for event in chosen:
        _apply_event(tracker, event)
    last_epoch = max((float(e["epoch"]) for e in chosen), default=0.0)
    tracker.close_all(float(max_epochs) if max_epochs is not None else last_epoch)
    slot_rank = {s: i for i, s in enumerate(_safe_slot_order(iv.slot for iv in tracker.closed))}
    return sorted(tracker.closed, key=lambda iv: (iv.env, slot_rank[iv.slot], iv.start_epoch))


def _lanes(chosen: Sequence[Mapping[str, Any]], n_envs: int | None,
           slot_ids: Sequence[str] | None) -> list[tuple[int, str]]:
    if n_envs is None:
        envs = sorted({int(e["env_id"]) for e in chosen if e.get("env_id") is not None})
    else:
        envs = list(range(n_envs))
    if slot_ids is None:
        slot_ids = _safe_slot_order(str(e["slot_id"]) for e in chosen if e.get("slot_id") is not None)
    return [(env, slot) for env in envs for slot in slot_ids]


def _draw_stage_bars(ax: Axes, intervals: Sequence[StageInterval], lane_of: Mapping[tuple[int, str], int]) -> None:
    for iv in intervals:
        lane = lane_of.get((iv.env, iv.slot))
        if lane is None:
            continue
        ax.barh(lane, iv.end_epoch - iv.start_epoch, left=iv.start_epoch, height=0.6,
                color=STAGE_COLORS.get(iv.stage, _OTHER_STAGE_COLOR), edgecolor="white", linewidth=0.8,
                gid=f"stage:{iv.stage}")


def _marker_points(chosen, kind: str, lane_of) -> list[tuple[float, int, dict]]:
    points = []
    for e in chosen:
        key = (e.get("env_id"), e.get("slot_id"))
        if str(e.get("event_type")) == kind and key in lane_of:
            points.append((float(e["epoch"]), lane_of[key], e.get("data") or {}))
    return points


def _draw_markers(ax: Axes, chosen, lane_of) -> None:
    germ = _marker_points(chosen, "SEED_GERMINATED", lane_of)
    foss = _marker_points(chosen, "SEED_FOSSILIZED", lane_of)
    cull = _marker_points(chosen, "SEED_CULLED", lane_of)
    style = dict(zorder=4, edgecolors="black", linewidths=0.6)
    ax.scatter([p[0] for p in germ], [p[1] for p in germ], marker="^", s=60, color="white", gid="germinate", **style)
    ax.scatter([p[0] for p in foss], [p[1] for p in foss], marker="*", s=170, color="gold", gid="fossilize", **style)
    ax.scatter([p[0] for p in cull], [p[1] for p in cull], marker="X", s=70, color="#d62728", gid="cull", **style)
    for epoch, lane, data in germ:
        label = "/".join(str(data[k]) for k in ("blueprint", "blend") if data.get(k) is not None)
        if label:
            ax.annotate(label, (epoch, lane), xytext=(1, 8.5), textcoords="offset points", fontsize=6.5,
                        color="0.15", va="bottom", ha="left", gid="germinate-label")
    for epoch, lane, data in cull:
        reason = str(data.get("reason") or "")
        ax.annotate(_CULL_REASON_LABELS.get(reason, reason), (epoch, lane), xytext=(6, -3),
                    textcoords="offset points", fontsize=7, color="#b11f1f", va="center", gid="cull-label")


def _draw_rollbacks(ax: Axes, chosen, lanes: Sequence[tuple[int, str]]) -> None:
    for e in chosen:
        if str(e.get("event_type")) != "GOVERNOR_ROLLBACK" or e.get("env_id") is None:
            continue
        rows = [i for i, (env, _) in enumerate(lanes) if env == int(e["env_id"])]
        if rows:
            ax.vlines(float(e["epoch"]), min(rows) - 0.45, max(rows) + 0.45, colors="#d62728",
                      linestyles="--", linewidth=2.0, zorder=5, gid="rollback")


def _lifecycle_legend(ax: Axes, stages: Iterable[str]) -> None:
    handles: list[Any] = [Patch(color=STAGE_COLORS[s], label=s.lower()) for s in DRAWN_STAGES if s in stages]
    handles += [
        Line2D([], [], marker="^", color="w", markerfacecolor="white", markeredgecolor="black",
               markersize=8, linestyle="", label="germinate (blueprint/blend)"),
        Line2D([], [], marker="*", color="w", markerfacecolor="gold", markeredgecolor="black",
               markersize=12, linestyle="", label="fossilize"),
        Line2D([], [], marker="X", color="w", markerfacecolor="#d62728", markeredgecolor="black",
               markersize=8, linestyle="", label="cull (reason)"),
        Line2D([], [], color="#d62728", linestyle="--", linewidth=2, label="governor rollback"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def _format_lanes(ax: Axes, lanes: Sequence[tuple[int, str]], max_epochs: float, batch: int) -> None:
    ax.set_yticks(range(len(lanes)), [f"env{env} · {slot}" for env, slot in lanes], fontsize=8)
    ax.set_ylim(max(len(lanes), 1) - 0.5, -0.5)
    for i in range(1, len(lanes)):
        if lanes[i][0] != lanes[i - 1][0]:
            ax.axhline(i - 0.5, color="0.6", linewidth=0.8, gid="env-separator")
    ax.set_xlim(0, max(max_epochs, 1) + 0.5)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("epoch (a stage drawn from x = e began after epoch e's step)")
    ax.set_title(f"Seed lifecycle, batch {batch}", fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)


def plot_lifecycle(events: Any, batch: int, n_envs: int | None = None, slot_ids: Sequence[str] | None = None,
                   max_epochs: int | None = None, *, ax: Axes | None = None) -> Figure:
    """Swimlanes per (env, slot) with each seed's stage over the epochs of one batch.

    events: a RunResult-like object (`.events`), a list of event dicts, or a path to events.jsonl / run dir.
    n_envs / slot_ids: lanes to draw (default: the envs and slots seen in the batch's events).
    max_epochs: episode length T (default: the largest epoch among the batch's events).
    Coloured bars per stage; ▲ germinate (labelled blueprint/blend), ★ fossilize, ✕ cull (reason
    annotated), red dashed line over an env's lanes for a governor rollback.
    """
    chosen = _batch_events(events, batch)
    end = float(max_epochs) if max_epochs is not None else max((float(e["epoch"]) for e in chosen), default=0.0)
    intervals = events_to_intervals(chosen, batch, max_epochs=end)
    lanes = _lanes(chosen, n_envs, slot_ids)
    if ax is None:
        fig = Figure(figsize=(11.0, 1.2 + 0.42 * max(len(lanes), 2)), layout="constrained")
        ax = fig.add_subplot()
    lane_of = {lane: i for i, lane in enumerate(lanes)}
    _draw_stage_bars(ax, intervals, lane_of)
    _draw_markers(ax, chosen, lane_of)
    _draw_rollbacks(ax, chosen, lanes)
    _format_lanes(ax, lanes, end, batch)
    _lifecycle_legend(ax, {iv.stage for iv in intervals} | {"TRAINING", "BLENDING", "PROBATIONARY", "FOSSILIZED"})
    if not intervals:
        ax.text(0.5, 0.5, f"no seed events in batch {batch}", transform=ax.transAxes, ha="center",
                va="center", fontsize=11, color="0.4")
    return ax.figure


# ----------------------------------------------------------------------------------------------
# 3. action distribution per head
# ----------------------------------------------------------------------------------------------


def _select_batches(history: Sequence[BatchSummary], batches: Any) -> list[BatchSummary]:
    if batches is None:
        return list(history)
    if isinstance(batches, (int, np.integer)):
        batches = [int(batches)]
    if isinstance(batches, slice):
        wanted = set(range(*batches.indices(1 + max((e.batch for e in history), default=-1))))
    else:
        wanted = {int(b) for b in batches}
    return [entry for entry in history if entry.batch in wanted]


def _sum_counts(entries: Sequence[BatchSummary], head: str) -> np.ndarray:
    rows = [np.asarray(entry.head_counts.get(head) or [], dtype=float) for entry in entries]
    size = max((r.size for r in rows), default=0)
    total = np.zeros(size)
    for row in rows:
        total[: row.size] += row
    return total


def _head_labels(entries: Sequence[BatchSummary], head: str, size: int) -> list[str]:
    last = entries[-1] if entries else None
    names: Sequence[str] = {
        "slot": last.slot_ids if last else (), "blueprint": last.menu if last else (),
        "blend": BLEND_NAMES, "op": OP_NAMES, "tempo": TEMPO_NAMES,
    }[head]
    return [str(names[i]) if i < len(names) else f"{head} {i}" for i in range(size)]


def _op_success_rates(entries: Sequence[BatchSummary]) -> dict[str, float]:
    tried: dict[str, float] = defaultdict(float)
    ok: dict[str, float] = defaultdict(float)
    for entry in entries:
        for name, n in entry.action_counts.items():
            tried[name] += _number(n)
        for name, n in entry.successful_action_counts.items():
            ok[name] += _number(n)
    return {name: ok[name] / tried[name] for name in tried if tried[name] > 0}


def _draw_head(ax: Axes, head: str, counts: np.ndarray, labels: Sequence[str],
               success: Mapping[str, float]) -> None:
    total = counts.sum()
    fractions = counts / total if total > 0 else np.zeros_like(counts)
    bars = ax.bar(range(len(counts)), fractions, color=f"C{ACTION_HEADS.index(head)}",
                  gid=f"head:{head}")
    ax.set_xticks(range(len(counts)), labels, rotation=30 if len(counts) > 4 else 0, ha="right"
                  if len(counts) > 4 else "center", fontsize=8)
    texts = [f"{f:.0%}" + (f"\n{success[lab]:.0%} ok" if head == "op" and lab in success else "")
             for f, lab in zip(fractions, labels)]
    ax.bar_label(bars, texts, fontsize=7, padding=2)
    ax.set_ylim(0, min(1.0, max(fractions.max(initial=0.0) * 1.3, 0.1)) + 0.05)
    ax.set_title(f"{head} head (n = {int(total)})", fontsize=10)
    ax.set_ylabel("fraction")
    ax.grid(True, axis="y", alpha=0.3)
    if total == 0:
        ax.text(0.5, 0.5, "no decisions", transform=ax.transAxes, ha="center", color="0.4")


def plot_action_distribution(history: Any, batches: Any = None, *, fig: Figure | None = None) -> Figure:
    """Fraction of decisions per option of each action head, summed over the chosen batches.

    history: RunResult-like or list of history entries. batches: None (all), a batch number, an iterable of
    batch numbers, or a slice over batch numbers. One bar chart per head (slot, blueprint labelled by the menu,
    blend, op, tempo); each head's bars sum to 1. Op bars also show the success rate from
    `successful_action_counts`. A run recorded before the tempo head has no tempo counts: its panel says so.
    """
    entries = _select_batches(_as_history(history), batches)
    fig = _new_figure(fig, (10.0, 9.0))
    axes = fig.subplots(3, 2).ravel()
    success = _op_success_rates(entries)
    for ax, head in zip(axes, ACTION_HEADS):
        counts = _sum_counts(entries, head)
        if counts.size == 0:
            counts = np.zeros(len(_head_labels(entries, head, 0)) or {"blend": 3, "op": 4, "tempo": 3}.get(head, 1))
        _draw_head(ax, head, counts, _head_labels(entries, head, counts.size), success)
    axes[-1].remove()  # five heads on a 3 × 2 grid
    chosen = [e.batch for e in entries]
    span = f"batches {min(chosen)}–{max(chosen)}" if chosen else "no batches"
    fig.suptitle(f"Action distribution per head ({span}, {len(entries)} batch(es))", fontsize=11)
    return fig


# ----------------------------------------------------------------------------------------------
# 4. PPO diagnostics
# ----------------------------------------------------------------------------------------------


def _ppo_entries(history: Sequence[BatchSummary]) -> tuple[list[BatchSummary], list[BatchSummary]]:
    """(entries with a real PPO update, entries whose update was skipped)."""
    updated, skipped = [], []
    for entry in history:
        ppo = entry.ppo
        if isinstance(ppo, Mapping) and ppo.get("skipped"):
            skipped.append(entry)
        elif isinstance(ppo, Mapping) and ppo:
            updated.append(entry)
    return updated, skipped


def _mark_skipped(ax: Axes, skipped: Sequence[BatchSummary]) -> None:
    for entry in skipped:
        b = float(entry.batch)
        ax.axvspan(b - 0.5, b + 0.5, color="0.85", zorder=0, gid="skipped")


def _draw_entropies(ax: Axes, updated: Sequence[BatchSummary], xs: np.ndarray) -> None:
    for key, label in _PPO_ENTROPY_KEYS:
        values = _series(updated, f"ppo.{key}")
        if not np.all(np.isnan(values)):
            ax.plot(xs, values, marker=".", linewidth=1.4 if key == "entropy" else 1.0,
                    color="black" if key == "entropy" else None, label=label)
    ax.set_title("entropy per head", fontsize=10)
    ax.legend(fontsize=7, ncols=2)


def _draw_panel(ax: Axes, updated: Sequence[BatchSummary], xs: np.ndarray, key: str, title: str) -> None:
    values = _series(updated, f"ppo.{key}") if key != "entropy_coef" else _series(updated, key)
    ax.plot(xs, values, marker=".", linewidth=1.2, label=title)
    if key == "approx_kl":
        stopped = np.array([bool(_lookup(e, "ppo.early_stopped")) for e in updated], dtype=bool)
        if stopped.any():
            ax.scatter(xs[stopped], values[stopped], marker="o", s=45, facecolors="none", edgecolors="#d62728",
                       zorder=3, label="early stopped", gid="early-stopped")
            ax.legend(fontsize=7)
    if key == "explained_variance":
        ax.axhline(0.0, color="0.5", linewidth=0.8, linestyle=":", gid="zero")
    ax.set_title(title, fontsize=10)


def _no_ppo_figure(fig: Figure, n_entries: int, skipped: Sequence[BatchSummary]) -> Figure:
    ax = fig.add_subplot()
    ax.set_axis_off()
    reasons = sorted({str((e.ppo or {}).get("reason", "")) for e in skipped} - {""})
    lines = ["No PPO updates in this history",
             f"{n_entries} batch(es): {len(skipped)} skipped, {n_entries - len(skipped)} without PPO "
             "(non-learning controller)"]
    if reasons:
        lines.append("skip reasons: " + "; ".join(reasons))
    ax.text(0.5, 0.5, "\n".join(lines), ha="center", va="center", fontsize=12, transform=ax.transAxes)
    return fig


def plot_ppo_diagnostics(history: Any, *, fig: Figure | None = None) -> Figure:
    """PPO health per batch: entropy per head, approx KL (early stops circled), clip fraction, explained
    variance, policy loss, value loss, grad norm and the entropy coefficient (8 panels, shared x; a
    coefficient that never changes is said in the title instead, and its panel left out).

    Batches whose update was skipped are shaded grey; batches without PPO (`ppo` is None) are left out.
    With no PPO update at all, the figure holds one text panel saying so.
    """
    entries = _as_history(history)
    updated, skipped = _ppo_entries(entries)
    fig = _new_figure(fig, (14.0, 6.0) if updated else (8.0, 2.5))
    if not updated:
        return _no_ppo_figure(fig, len(entries), skipped)
    axes = fig.subplots(2, 4, sharex=True).ravel()
    xs = _x_values(updated, "batch")
    _draw_entropies(axes[0], updated, xs)
    coef = _series(updated, "entropy_coef")
    constant = bool(np.all(coef == coef[0]))  # (NaN, when never recorded, is not constant: drawn empty)
    panels = _PPO_PANELS + (() if constant else (("entropy_coef", "entropy coefficient"),))
    for ax, (key, title) in zip(axes[1:], panels):
        _draw_panel(ax, updated, xs, key, title)
    if constant:
        axes[-1].remove()
        axes = axes[:-1]
    for ax in axes:
        _mark_skipped(ax, skipped)
        ax.grid(True, alpha=0.3)
    for ax in axes[3:] if constant else axes[4:]:
        ax.set_xlabel("batch")
        ax.xaxis.get_major_locator().set_params(integer=True)
    note = f" ({len(skipped)} skipped update(s) shaded)" if skipped else ""
    coef_note = f"; entropy coefficient {coef[0]:g} throughout" if constant else ""
    fig.suptitle(f"PPO diagnostics, {len(updated)} update(s){note}{coef_note}", fontsize=11)
    return fig


# ----------------------------------------------------------------------------------------------
# 5. seed events and timing per batch
# ----------------------------------------------------------------------------------------------

_SEED_EVENT_KEYS: tuple[tuple[str, str, str], ...] = (
    ("seeds_created", "germinated", "C0"), ("seeds_fossilized", "fossilized", "C2"),
    ("seeds_culled", "culled", "C3"), ("rollbacks", "governor rollbacks", "C7"),
)
LEGEND_HEADROOM = 1.35  # y range above the data, so that a legend at the top covers none of it
_TIMING_KEYS: tuple[tuple[str, str], ...] = (
    ("env_s", "env (host training, validation)"), ("bridge_s", "bridge"), ("controller_s", "controller step"),
    ("update_s", "update"),
)


def plot_seed_events(history: Any, *, fig: Figure | None = None) -> Figure:
    """Seeds germinated, fossilized and culled and governor rollbacks per batch, summed over envs."""
    entries = _as_history(history)
    fig = _new_figure(fig, (8.0, 3.0))
    ax = fig.add_subplot()
    xs = _x_values(entries, "batch")
    for key, label, color in _SEED_EVENT_KEYS:
        ax.plot(xs, _series(entries, key), marker=".", linewidth=1.3, color=color, label=label)
    ax.set_xlabel("batch")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("per batch")
    ax.set_title("Seed events per batch (all envs)", fontsize=10)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_ylim(bottom=0, top=max(ax.get_ylim()[1], 1.0) * LEGEND_HEADROOM)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, ncols=4, loc="upper left")
    return fig


def plot_timing(history: Any, *, fig: Figure | None = None) -> Figure:
    """Where each batch's wall time went: env, bridge, controller step and update (stacked), and the
    batch's wall time as a line (the gap is the loop's own work). Batches without timing are left blank."""
    entries = _as_history(history)
    fig = _new_figure(fig, (8.0, 3.0))
    ax = fig.add_subplot()
    xs = _x_values(entries, "batch")
    bottom = np.zeros(len(entries))
    for key, label in _TIMING_KEYS:
        values = np.nan_to_num(_series(entries, f"timing.{key}"))
        if values.any():
            ax.bar(xs, values, bottom=bottom, label=label, width=0.8)
            bottom += values
    ax.plot(xs, _series(entries, "wall_time_s"), color="black", marker=".", linewidth=1.0, label="batch wall time")
    ax.set_xlabel("batch")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("seconds")
    ax.set_title("Time per batch", fontsize=10)
    ax.set_ylim(bottom=0, top=max(ax.get_ylim()[1], 1e-3) * LEGEND_HEADROOM)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper right", ncols=3)
    return fig


def plot_time_breakdown(breakdown: Mapping[str, Any], *, fig: Figure | None = None) -> Figure:
    """Where the run's wall time went (summary.json's `timing.breakdown`, `outputs.time_breakdown`): one
    horizontal bar, stacked by part in PARTS' order, each labelled in the legend with its seconds and share."""
    parts = breakdown.get("parts") or {}
    wall = float(breakdown.get("wall_s") or 0.0)
    share = shares(breakdown)
    fig = _new_figure(fig, (8.0, 3.0))
    ax = fig.add_subplot()
    colors = [c for cmap in ("tab20", "tab20b") for c in _colormap(cmap)]
    left = 0.0
    for i, name in enumerate(list(PARTS) + sorted(set(parts) - set(PARTS))):
        seconds = float(parts.get(name) or 0.0)
        if seconds <= 0:
            continue
        color = "#bbbbbb" if name == "other" else colors[i % len(colors)]
        ax.barh([0], [seconds], left=left, height=0.6, color=color,
                label=f"{PARTS.get(name, name)}: {seconds:.1f} s ({share.get(name, 0.0):.1%})")
        left += seconds
    ax.set_yticks([])
    ax.set_xlim(0, max(wall, left, 1e-3))
    ax.set_xlabel("seconds")
    ax.set_title(f"Where the run's {wall:.1f} s went (other: {float(breakdown.get('other_share') or 0.0):.1%})",
                 fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), fontsize=7, ncols=3, loc="outside lower center", frameon=False)
    return fig


def _colormap(name: str) -> list:
    from matplotlib import colormaps

    cmap = colormaps[name]
    return [cmap(i) for i in range(cmap.N)]
