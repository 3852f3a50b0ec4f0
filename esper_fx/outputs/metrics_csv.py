"""metrics.csv both ways: its columns (`metric_columns`), a batch's row (`flatten_metrics`) and the text helpers
that write it; and reading it back, tolerant of damage (`read_metrics`, `rows_by_batch`), into history rows
(`summary_from_csv`).
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from esper_fx.outputs.events import _text_lines, to_jsonable
from esper_fx.outputs.history import OP_NAMES, BatchSummary


def metric_rows(path: Path) -> list[dict[str, str]]:
    """metrics.csv's rows as dicts of text (none when there is no file)."""
    if not path.exists():
        return []
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        return list(csv.DictReader(fh))


def rows_by_batch(rows: Iterable[Mapping[str, str]]) -> dict[int, Mapping[str, str]]:
    """metrics.csv's rows by batch number, the last row of each (a resumed run's file can hold a batch twice
    until its resume truncates it); rows without a batch number are left out."""
    out = {}
    for row in rows:
        batch = int_or_none(row.get("batch"))
        if batch is not None:
            out[batch] = row
    return out


def int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _cell(value: Any) -> Any:
    return "" if value is None else value


def _csv_text(rows: Iterable[Sequence[Any]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


# Columns of metrics.csv, in order; PPO metrics are prefixed "ppo_".
METRIC_SCALARS = (
    "batch", "episodes_completed", "avg_accuracy", "rolling_avg_accuracy", "avg_reward", "entropy_coef",
    "seeds_created", "seeds_fossilized", "seeds_culled", "rollbacks", "wall_time_s",
)


# The batch's compute (summed over its envs), GFLOPs: hosts.env.compute.FLOP_FIELDS with "_gflops".
FLOP_COLUMNS = ("training", "host_train", "seed_isolated", "seed_blending", "seed_grown", "validation",
                "counterfactual")


def metric_columns(n_envs: int, ppo_keys: Iterable[str] | None) -> list[str]:
    """metrics.csv's complete header, fixed before the first row: the scalars, the batch's GFLOPs, one
    accuracy per env, the action counts per op, and `ppo_<key>` for every metric the controller's update
    reports."""
    columns = list(METRIC_SCALARS) + [f"{name}_gflops" for name in FLOP_COLUMNS]
    columns += [f"env{i}_accuracy" for i in range(n_envs)]
    for kind in ("action_counts", "successful_action_counts"):
        columns += [f"{kind}_{op}" for op in OP_NAMES]
    return columns + [f"ppo_{key}" for key in sorted(ppo_keys or ())]


def flatten_metrics(entry: BatchSummary) -> dict[str, Any]:
    row: dict[str, Any] = {k: to_jsonable(getattr(entry, k)) for k in METRIC_SCALARS}
    for name in FLOP_COLUMNS:
        value = (entry.flops or {}).get(f"{name}_flops")
        row[f"{name}_gflops"] = None if value is None else value / 1e9
    for i, acc in enumerate(entry.env_accuracies):
        row[f"env{i}_accuracy"] = to_jsonable(acc)
    for kind in ("action_counts", "successful_action_counts"):
        for op, count in (getattr(entry, kind) or {}).items():
            row[f"{kind}_{op}"] = count
    for key, value in sorted((entry.ppo or {}).items()):
        value = to_jsonable(value)
        if isinstance(value, list):
            value = json.dumps(value)
        row[f"ppo_{key}"] = value
    return row


def read_metrics(path: Path, notes: list[str]) -> list[dict[str, str]]:
    """metrics.csv's complete rows whose batch is a whole number, as dicts of text; the rest are left out
    with a note (a non-numeric cell elsewhere reads as a missing value)."""
    if not path.exists():
        return []
    rows = list(csv.DictReader(_text_lines(path, notes)))
    complete = [r for r in rows if None not in r.values() and _whole_number(r.get("batch")) is not None]
    if len(complete) < len(rows):
        notes.append(f"metrics.csv: {len(rows) - len(complete)} incomplete or damaged row(s) left out")
    unreadable = sum(1 for r in complete for k, v in r.items() if v not in ("", None, "True", "False")
                     and k is not None and not _is_number(v) and not v.startswith("["))
    if unreadable:
        notes.append(f"metrics.csv: {unreadable} non-numeric cell(s) read as missing values")
    return complete


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _whole_number(text: str | None) -> int | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return int(value) if math.isfinite(value) and value >= 0 and value == int(value) else None


def _csv_number(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "") else math.nan
    except ValueError:
        return math.nan


def _csv_int(text: str | None) -> int:
    value = _csv_number(text)
    return int(value) if math.isfinite(value) else 0


def summary_from_csv(row: Mapping[str, str], ppo: Mapping[str, Any] | None, menu: Sequence[str],
                     slot_ids: Sequence[str]) -> BatchSummary:
    """A history row from a metrics.csv row (the inverse of `flatten_metrics`, as far as the file goes).
    metrics.csv has no per-head counts: the op head's choices are the pool's op counts, the other heads are
    empty; env rewards and timing are not recorded there."""
    envs = sorted(int(k[3:-len("_accuracy")]) for k in row if k.startswith("env") and k.endswith("_accuracy"))
    counts = {op: _csv_int(row.get(f"action_counts_{op}")) for op in OP_NAMES}
    return BatchSummary(
        batch=_csv_int(row["batch"]), episodes_completed=_csv_int(row.get("episodes_completed")),
        env_accuracies=[_csv_number(row[f"env{i}_accuracy"]) for i in envs],
        avg_accuracy=_csv_number(row.get("avg_accuracy")),
        rolling_avg_accuracy=_csv_number(row.get("rolling_avg_accuracy")),
        avg_reward=_csv_number(row.get("avg_reward")), env_rewards=[], host_max_accuracies=[], env_seed_params=[],
        action_counts=counts,
        successful_action_counts={op: _csv_int(row.get(f"successful_action_counts_{op}")) for op in OP_NAMES},
        head_counts={"op": [counts[op] for op in OP_NAMES]}, menu=list(menu), slot_ids=list(slot_ids),
        entropy_coef=_csv_number(row.get("entropy_coef")), seeds_created=_csv_int(row.get("seeds_created")),
        seeds_fossilized=_csv_int(row.get("seeds_fossilized")), contributing_fossilized=0,
        seeds_culled=_csv_int(row.get("seeds_culled")), rollbacks=_csv_int(row.get("rollbacks")),
        ppo=dict(ppo) if ppo is not None else None, timing={}, wall_time_s=_csv_number(row.get("wall_time_s")),
    )
