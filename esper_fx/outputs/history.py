"""What each batch leaves behind: its `BatchSummary`, its events, and the run's summary (BEHAVIOUR §7.6, §7.7).

A `BatchSummary` is one typed row per RL batch. The loop builds it (`summarize_batch`), `outputs.run_log` writes it
(`metrics.csv`, the console), the plots, `compare` and the notebooks read its attributes, and a checkpoint
stores it as a plain dict (`to_dict` / `from_dict`). The PPO metrics stay a dict of named values
(`metrics_to_python`), since what a controller's update reports is the controller's business.

Plain python and numpy: no torch, no jax (the loop hands over concrete values).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from esper_fx.contracts.actions import LifecycleOp
from esper_fx.contracts.events import EventType

ROLLING_WINDOW = 10  # batches in the rolling accuracy
OP_NAMES: tuple[str, ...] = tuple(op.name for op in LifecycleOp)
SKIPPED_UPDATE = {"skipped": True, "reason": "no valid transitions"}


@dataclass
class BatchSummary:
    """One RL batch: E episodes of T epochs, then (for a learning controller) one update."""

    batch: int
    episodes_completed: int  # over the whole run, this batch included
    env_accuracies: list[float]  # final validation accuracy per env, pp
    avg_accuracy: float
    rolling_avg_accuracy: float  # mean of the last ROLLING_WINDOW batches' avg_accuracy
    avg_reward: float  # mean over envs of the episode's summed raw reward
    env_rewards: list[float]
    host_max_accuracies: list[float]
    env_seed_params: list[float]  # seed parameters held at the last epoch, fossils included
    action_counts: dict[str, int]  # per op name, summed over envs
    successful_action_counts: dict[str, int]
    head_counts: dict[str, list[int]]  # per head, per option: how often the controller chose it
    menu: list[str]  # blueprint-head index -> name
    slot_ids: list[str]  # slot-head index -> slot id
    entropy_coef: float  # β in force during this batch's update
    seeds_created: int
    seeds_fossilized: int
    contributing_fossilized: int
    seeds_culled: int
    rollbacks: int
    ppo: dict[str, Any] | None  # the update's metrics (metrics_to_python); None without an update
    timing: dict[str, float] = field(default_factory=dict)  # env_s, bridge_s, controller_s
    wall_time_s: float = 0.0
    # the batch's compute, summed over its envs: hosts.env.compute.FLOP_FIELDS -> FLOPs ({} when not counted)
    flops: dict[str, float] = field(default_factory=dict)
    env_training_flops: list[float] = field(default_factory=list)  # per env: its episode's training FLOPs
    env_tasks: list[str] = field(default_factory=list)  # per env: the task its episode drew (a task mix only)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "BatchSummary":
        return cls(**dict(d))

    def event_data(self) -> dict[str, Any]:
        """The BATCH_COMPLETED event's data."""
        keys = ("episodes_completed", "env_accuracies", "avg_accuracy", "rolling_avg_accuracy", "avg_reward",
                "seeds_created", "seeds_fossilized", "seeds_culled", "rollbacks", "wall_time_s", "flops",
                "env_training_flops")
        return {k: getattr(self, k) for k in keys}


def as_summaries(history: Iterable[BatchSummary | Mapping[str, Any]]) -> list[BatchSummary]:
    """BatchSummary rows from summaries or their dicts (a checkpoint manifest stores dicts)."""
    return [h if isinstance(h, BatchSummary) else BatchSummary.from_dict(h) for h in history]


@dataclass(frozen=True)
class BatchRecord:
    """What one batch produced, as plain values: the loop's input to `summarize_batch`."""

    env_results: Sequence[Any]  # hosts.env.EpisodeResult per env
    env_rewards: list[float]
    events: list[Any]  # events.Event
    head_counts: dict[str, list[int]]
    ppo: dict[str, Any] | None
    timing: dict[str, float]
    seed_params: list[float]  # per env, from the last epoch's signals
    reward_events: list[Any] = field(default_factory=list)  # events.Event (REWARD_COMPUTED, debug level)
    nonfinite: dict[str, int] = field(default_factory=dict)  # what the normalisers left out: NaN/inf counts
    reward_components: dict[str, float] = field(default_factory=dict)  # term -> episode sum, mean over envs


def summarize_batch(record: BatchRecord, batch: int, episodes_before: int, recent_avg_acc: Sequence[float],
                    menu: Sequence[str], slot_ids: Sequence[str], entropy_coef: float,
                    wall_time_s: float, mixed: bool = False) -> BatchSummary:
    """One batch's summary; `mixed` (a task mix) also records which task each env's episode drew."""
    results = record.env_results
    accs = [float(r.final_val_acc) for r in results]
    avg_acc = float(np.mean(accs))
    recent = (list(recent_avg_acc) + [avg_acc])[-ROLLING_WINDOW:]
    return BatchSummary(
        batch=batch,
        episodes_completed=episodes_before + len(results),
        env_accuracies=accs,
        avg_accuracy=avg_acc,
        rolling_avg_accuracy=float(np.mean(recent)),
        avg_reward=float(np.mean(record.env_rewards)),
        env_rewards=record.env_rewards,
        host_max_accuracies=[float(r.host_max_acc) for r in results],
        env_seed_params=record.seed_params,
        action_counts=_op_totals(r.action_counts for r in results),
        successful_action_counts=_op_totals(r.successful_action_counts for r in results),
        head_counts=record.head_counts,
        menu=list(menu),
        slot_ids=list(slot_ids),
        entropy_coef=entropy_coef,
        seeds_created=sum(r.seeds_created for r in results),
        seeds_fossilized=sum(r.seeds_fossilized for r in results),
        contributing_fossilized=sum(r.contributing_fossilized for r in results),
        seeds_culled=sum(1 for e in record.events if e.event_type == EventType.SEED_CULLED),
        rollbacks=sum(r.rollbacks for r in results),
        ppo=record.ppo,
        timing=record.timing,
        wall_time_s=wall_time_s,
        flops=batch_flops(results),
        env_training_flops=[float(r.flops["training_flops"]) for r in results if r.flops],
        env_tasks=[str(r.task) for r in results] if mixed else [],
    )


def batch_flops(results: Sequence[Any]) -> dict[str, float]:
    """Every FLOP field summed over the envs' episodes ({} when the episodes were not counted)."""
    counted = [r.flops for r in results if getattr(r, "flops", None)]
    if not counted:
        return {}
    return {k: float(sum(f[k] for f in counted)) for k in counted[0]}


def _op_totals(per_env: Iterable[Sequence[int]]) -> dict[str, int]:
    rows = list(per_env)
    return {op: sum(row[i] for row in rows) for i, op in enumerate(OP_NAMES)}


def count_heads(head_counts: dict[str, list[int]], actions: np.ndarray, heads: Sequence[str]) -> None:
    """Add one epoch's actions (an integer array [E, len(heads)], a column per head) to the per-head option
    counts."""
    for head, column in zip(heads, actions.T):
        counts = head_counts[head]
        for option, n in enumerate(np.bincount(column, minlength=len(counts)).tolist()):
            counts[option] += n


def metrics_to_python(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """An update's concrete metrics (numpy values) as plain python: scalars become floats (bools stay
    bools), arrays lists; `early_stop` becomes [update epoch, group] or None, with `early_stopped`.
    A skipped update (no valid transition) is SKIPPED_UPDATE."""
    if bool(np.asarray(metrics.get("skipped", False))):
        return dict(SKIPPED_UPDATE)
    out: dict[str, Any] = {}
    for name, value in metrics.items():
        arr = np.asarray(value)
        if name == "early_stop":
            u, g = (int(x) for x in arr.reshape(-1)[:2])
            out["early_stop"] = [u, g] if u >= 0 else None
        elif arr.ndim == 0:
            out[name] = bool(arr) if arr.dtype == bool else float(arr)
        else:
            out[name] = arr.tolist()
    out["early_stopped"] = out.get("early_stop") is not None
    return out


def run_summary(task: str, controller: str, episodes: int, history: Sequence[BatchSummary], best_avg_acc: float,
                wall_time_s: float, checkpoint: str | None) -> dict[str, Any]:
    """summary.json: the run's totals and its last and best accuracies."""
    last = history[-1] if history else None
    return {
        "task": task, "controller": controller, "episodes": episodes,
        "batches": len(history),
        "final_avg_accuracy": None if last is None else last.avg_accuracy,
        "final_rolling_avg_accuracy": None if last is None else last.rolling_avg_accuracy,
        "best_rolling_avg_accuracy": best_avg_acc,
        "seeds_created": sum(h.seeds_created for h in history),
        "seeds_fossilized": sum(h.seeds_fossilized for h in history),
        "seeds_culled": sum(h.seeds_culled for h in history),
        "rollbacks": sum(h.rollbacks for h in history),
        "wall_time_s": wall_time_s,
        "checkpoint": checkpoint,
    }
