"""The event model: `Event`, one line of events.jsonl (its types are the contracts' `EventType`), the events a
batch logs (a host's lifecycle events, the debug-level reward events), and `load_events`, which reads
events.jsonl back tolerant of what a stopped run leaves (BEHAVIOUR §7.7).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import StrEnum
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from esper_fx.contracts.events import EventType

EVENTS_NAME = "events.jsonl"  # the event log's name in a run directory (`run_directory`)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def to_jsonable(value: Any) -> Any:
    """Plain JSON types: numpy / jax scalars and arrays become python numbers and lists; NaN -> None."""
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "tolist"):
        return to_jsonable(value.tolist())
    if hasattr(value, "item"):
        return to_jsonable(value.item())
    return str(value)


@dataclass
class Event:
    event_type: EventType
    message: str = ""
    env_id: int | None = None
    seed_id: str | None = None
    slot_id: str | None = None
    epoch: int | None = None
    batch: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    severity: str = "info"
    timestamp: str = field(default_factory=utc_now)

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_type": str(self.event_type), "timestamp": self.timestamp, "env_id": self.env_id,
            "seed_id": self.seed_id, "slot_id": self.slot_id, "epoch": self.epoch, "batch": self.batch,
            "message": self.message, "data": to_jsonable(self.data), "severity": self.severity,
        }


def lifecycle_event(ev: Any, batch: int) -> Event:
    """A host's seed or governor event (`hosts.env.LifecycleEvent`) as a logged Event of batch `batch`."""
    warning = ev.event_type in (EventType.GOVERNOR_PANIC, EventType.GOVERNOR_ROLLBACK)
    return Event(EventType(ev.event_type), message=ev.message, env_id=ev.env_id, seed_id=ev.seed_id or None,
                 slot_id=ev.slot_id or None, epoch=ev.epoch, batch=batch, data=dict(ev.data),
                 severity="warning" if warning else "info")


def reward_events(reward: Sequence[float], components: Mapping[str, Sequence[float]],
                  actions: np.ndarray, batch: int, epoch: int) -> list[Event]:
    """One REWARD_COMPUTED event per env: its action (its row of the integer array [E, 5]), reward and reward
    components (debug level)."""
    events = []
    for i, action in enumerate(actions.tolist()):
        data = {"batch": batch, "epoch": epoch, "env_id": i, "action": action, "reward": float(reward[i]),
                "components": {k: float(v[i]) for k, v in components.items()}}
        events.append(Event(EventType.REWARD_COMPUTED, batch=batch, epoch=epoch, env_id=i, data=data))
    return events


# ----------------------------------------------------------------------------------------------
# reading events.jsonl back (the report, the plots, the notebooks)
# ----------------------------------------------------------------------------------------------


def _text_lines(path: Path, notes: list[str] | None) -> list[str]:
    """The file's lines decoded as UTF-8; a line that is not (a torn write, a damaged disk) is left out,
    with a note."""
    with open(path, "rb") as fh:
        raw = fh.read().splitlines(keepends=True)
    lines, bad = [], []
    for number, line in enumerate(raw, 1):
        try:
            lines.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            bad.append(number)
    if bad and notes is not None:
        notes.append(f"{path.name}: {len(bad)} line(s) that are not UTF-8 left out (line {bad[0]}"
                     f"{' ...' if len(bad) > 1 else ''})")
    return lines


def load_events(path: str | Path, notes: list[str] | None = None,
                skip_types: Sequence[str] = ()) -> list[dict[str, Any]]:
    """`events.jsonl` (or the run directory holding it) as event dicts, tolerant of what a stopped run leaves.

    A missing file gives no events; a line that is not a JSON object (the torn last line of a run killed
    while it wrote, a damaged disk) is left out, and `notes`, when given, says how many when there is more
    than that one torn line. Lines of the event types in `skip_types` are left out unparsed (the report
    skips the debug-level REWARD_COMPUTED lines)."""
    path = Path(path)
    if path.is_dir():
        path = path / EVENTS_NAME
    if not path.exists():
        return []
    markers = tuple(f'"{kind}"' for kind in skip_types)
    events, bad = [], 0
    for line in _text_lines(path, notes):
        if not line.strip() or any(marker in line for marker in markers):
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(event, dict):
            events.append(event)
        else:
            bad += 1
    if bad > 1 and notes is not None:  # (one torn last line is what an interrupted run leaves: no note)
        notes.append(f"{path.name}: {bad} line(s) that are not JSON events left out")
    return events
