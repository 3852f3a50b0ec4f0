"""Run directory, event log, per-batch metrics and the progress display (BEHAVIOUR §7.7, ARCHITECTURE §2).

Logging never changes learning: everything here only reads values the loop already computed. The event
types are the contracts' (`esper_fx.contracts.EventType`, re-exported here); a batch's row is a
`esper_fx.outputs.history.BatchSummary`.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import math
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import StrEnum
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, TextIO

from esper_fx.outputs.checkpoint import has_checkpoint
from esper_fx.outputs.durable import append_text, replace_text
from esper_fx.contracts import ACTION_HEADS, EventType
from esper_fx.errors import OutputError, RunDirectoryError
from esper_fx.outputs.history import OP_NAMES, BatchSummary
from esper_fx.outputs.notebook_bar import NotebookBar, format_duration, in_notebook
from esper_fx.outputs.provenance import PROVENANCE_NAME, collect, run_devices


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
                  actions: Sequence[Sequence[int]], batch: int, epoch: int) -> list[Event]:
    """One REWARD_COMPUTED event per env: its action, reward and reward components (debug level)."""
    events = []
    for i, action in enumerate(actions):
        data = {"batch": batch, "epoch": epoch, "env_id": i, "action": list(action), "reward": float(reward[i]),
                "components": {k: float(v[i]) for k, v in components.items()}}
        events.append(Event(EventType.REWARD_COMPUTED, batch=batch, epoch=epoch, env_id=i, data=data))
    return events


@contextmanager
def _writing(path: Path):
    """Turn an OSError while writing `path` into an OutputError naming the file and the cause."""
    try:
        yield
    except OutputError:
        raise
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc


LOCK_NAME = ".lock"  # flock()ed for the life of a run; the only file a fresh run directory may hold
CONFIG_NAME = "config.json"
EVENTS_NAME = "events.jsonl"
METRICS_NAME = "metrics.csv"


def run_dir_entries(path: Path) -> list[str]:
    """What a run directory holds besides its lock file (empty for a directory a run may start in)."""
    try:
        return sorted(name for name in os.listdir(path) if name != LOCK_NAME)
    except FileNotFoundError:
        return []


class RunDirectory:
    """Files of one run: config.json, provenance.json, events.jsonl, metrics.csv, summary.json (and checkpoints/).

    `columns` fixes metrics.csv's header (see `metric_columns`); without it the header is the first
    row's keys, widened (the file rewritten) if a later row brings new ones. `claim` takes the
    run's lock; `close` releases it.
    """

    def __init__(self, path: str | Path, columns: Sequence[str] | None = None):
        self.path = Path(os.path.abspath(path))  # resolved once: a later chdir cannot move the run
        with _writing(self.path):
            self.path.mkdir(parents=True, exist_ok=True)
        self.events_path = self.path / EVENTS_NAME
        self.metrics_path = self.path / METRICS_NAME
        self.checkpoint_dir = self.path / "checkpoints"
        self._metric_columns: list[str] | None = list(columns) if columns else self._existing_columns()
        self._lock: Any = None
        self.provenance: dict[str, Any] | None = None  # this process's, from `write_config`

    @classmethod
    def claim(cls, path: str | Path, *, may_hold_a_run: bool = False) -> "RunDirectory":
        """Create (if needed) and lock the run directory for this run. Unless `may_hold_a_run` (a resume
        of the run it holds), it must hold nothing but its lock file. Raises RunDirectoryError."""
        run_dir = cls(path)
        run_dir.lock()
        held = run_dir_entries(run_dir.path)
        if held and not may_hold_a_run:
            run_dir.close()
            raise RunDirectoryError(refusal(run_dir.path, held))
        return run_dir

    def lock(self) -> None:
        with _writing(self.path / LOCK_NAME):
            fh = open(self.path / LOCK_NAME, "a+b")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise RunDirectoryError(f"run directory {self.path} is in use by another run (its {LOCK_NAME} "
                                    f"is locked)") from None
        self._lock = fh

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the file releases the flock
            self._lock = None

    def use_columns(self, columns: Sequence[str]) -> None:
        """Fix metrics.csv's header (before the first row; a resume rewrites the file with it)."""
        self._metric_columns = list(columns)

    def _existing_columns(self) -> list[str] | None:
        if not self.metrics_path.exists():
            return None
        with open(self.metrics_path, newline="", encoding="utf-8") as fh:
            header = next(csv.reader(fh), None)
        return header or None

    def write_config(self, config_dict: Mapping[str, Any]) -> None:
        """config.json, and beside it provenance.json: where this process runs it from (`outputs.provenance`;
        a file of its own, since config.json must stay a config `TrainingConfig.from_dict` reads). Both are
        written at the run's start, so a run that stops early keeps them; a resume rewrites both."""
        with _writing(self.path / CONFIG_NAME):
            replace_text(self.path / CONFIG_NAME, json.dumps(to_jsonable(config_dict), indent=2) + "\n")
        self.provenance = collect(run_devices(config_dict.get("device"), config_dict.get("env_devices")))
        with _writing(self.path / PROVENANCE_NAME):
            replace_text(self.path / PROVENANCE_NAME, json.dumps(self.provenance, indent=2) + "\n")

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        """summary.json, with the provenance of the process that finished the run under "provenance"."""
        if self.provenance is not None:
            summary = {**summary, "provenance": self.provenance}
        with _writing(self.path / "summary.json"):
            replace_text(self.path / "summary.json", json.dumps(to_jsonable(summary), indent=2) + "\n")

    def append_events(self, events: Iterable[Event]) -> None:
        lines = [json.dumps(e.to_dict()) for e in events]
        if lines:
            with _writing(self.events_path):
                append_text(self.events_path, "\n".join(lines) + "\n")

    def start_metrics(self) -> None:
        """Write metrics.csv's header now (a fresh run with fixed columns)."""
        if self._metric_columns and not self.metrics_path.exists():
            with _writing(self.metrics_path):
                replace_text(self.metrics_path, _csv_text([self._metric_columns]))

    def append_metrics(self, row: BatchSummary) -> None:
        flat = flatten_metrics(row)
        with _writing(self.metrics_path):
            if self._metric_columns is None:
                self._metric_columns = list(flat)
            new = [k for k in flat if k not in self._metric_columns]
            if new:  # a row with columns the header lacks: widen the header, keep every earlier row
                self._rewrite_metrics(self._metric_rows(), self._metric_columns + new)
            if not self.metrics_path.exists():
                replace_text(self.metrics_path, _csv_text([self._metric_columns]))
            append_text(self.metrics_path, _csv_text([[_cell(flat.get(k)) for k in self._metric_columns]]))

    def _metric_rows(self) -> list[dict[str, str]]:
        return metric_rows(self.metrics_path)

    def _rewrite_metrics(self, rows: Sequence[Mapping[str, str]], columns: Sequence[str]) -> None:
        self._metric_columns = list(columns)
        table = [list(columns)] + [[row.get(k) or "" for k in columns] for row in rows]
        replace_text(self.metrics_path, _csv_text(table))

    def truncate_history(self, n_batches: int) -> None:
        """On resume: keep exactly the metrics rows and events of batches 0 .. n_batches−1 (by batch number,
        the last row of each), and give metrics.csv this run's header."""
        if self.metrics_path.exists() or self._metric_columns:
            with _writing(self.metrics_path):
                rows = {b: row for b, row in rows_by_batch(self._metric_rows()).items() if b < n_batches}
                columns = self._metric_columns or self._existing_columns() or []
                self._rewrite_metrics([rows[b] for b in sorted(rows)], columns)
        if self.events_path.exists():
            kept = []
            for line in self.events_path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    batch = json.loads(line).get("batch")
                except (json.JSONDecodeError, AttributeError):
                    continue
                if batch is None or (isinstance(batch, int) and batch < n_batches):
                    kept.append(line)
            with _writing(self.events_path):
                replace_text(self.events_path, "\n".join(kept) + ("\n" if kept else ""))


def refusal(path: Path, held: Sequence[str], restartable: bool = False) -> str:
    """Why a fresh run may not start in `path`, and what to do instead. `restartable`: it holds a run stopped
    before its first checkpoint (`training.preflight.restartable_run`), which `--resume` starts again."""
    shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
    if has_checkpoint(path):
        what = f"pass --resume {path} to continue it"
    elif restartable:
        what = f"it stopped before its first checkpoint: pass --resume {path} to start it again there"
    else:
        what = "it has no checkpoint to resume"
    return f"run directory {path} already holds a run ({shown}); {what}, or choose another --run-dir"


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


class RunLog:
    """Where a run's outputs go: events (kept in memory and appended to events.jsonl), metrics.csv rows,
    config.json, summary.json, the TensorBoard scalars (`board`, optional), the W&B run (`wandb`, optional)
    and the console. `run_dir` None writes no file."""

    def __init__(self, run_dir: RunDirectory | str | None, console: "Console", board: Any = None,
                 wandb: Any = None):
        self.dir = run_dir if isinstance(run_dir, RunDirectory) or run_dir is None else RunDirectory(run_dir)
        self.console = console
        self.board = board  # esper_fx.outputs.tensorboard_log.Board or None
        self.wandb = wandb  # esper_fx.outputs.wandb_log.WandbLog or None
        self.events: list[dict[str, Any]] = []

    def _scalar_logs(self) -> list[Any]:
        """Where each batch's scalars go besides metrics.csv: the TensorBoard board and the W&B run, if on."""
        return [log for log in (self.board, self.wandb) if log is not None]

    @property
    def path(self) -> str | None:
        return None if self.dir is None else str(self.dir.path)

    def log(self, events: Sequence[Event]) -> None:
        self.events.extend(e.to_dict() for e in events)
        if self.dir is not None:
            self.dir.append_events(events)

    def batch_done(self, summary: BatchSummary, events: Sequence[Event], total_episodes: int,
                   reward_components: Mapping[str, float] | None = None) -> None:
        """The console lines (and warnings), the batch's events, its metrics.csv row and its TensorBoard (and
        W&B) scalars."""
        self.console.batch_done(summary)
        for line in format_batch_lines(summary, total_episodes) + [self.console.time_line()]:
            self.console.line(line)
        for event in events:
            if event.severity == "warning" and event.event_type in WARNING_EVENTS:
                self.console.warning(f"batch {summary.batch}: {event.message}")
        self.log(events)
        if self.dir is not None:
            self.dir.append_metrics(summary)
        for log in self._scalar_logs():
            with _writing(log.log_dir):
                log.add_batch(summary, reward_components, self.console.first_action_s)

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        """The run's end: summary.json and TensorBoard's HParams session with the summary's final numbers."""
        if self.dir is not None:
            self.dir.write_summary(summary)
        if self.board is not None:
            with _writing(self.board.log_dir):
                self.board.finish(summary)

    def truncate_history(self, n_batches: int) -> None:
        """On resume: metrics.csv, events.jsonl and the TensorBoard scalars keep batches 0 .. n_batches−1."""
        if self.dir is not None:
            self.dir.truncate_history(n_batches)
        for log in self._scalar_logs():
            with _writing(log.log_dir):
                log.truncate(n_batches)

    def close(self) -> None:
        """Stop the progress display and flush the TensorBoard files."""
        self.console.close()
        if self.board is not None:
            with _writing(self.board.log_dir):
                self.board.close()

    def end_wandb(self, summary: Mapping[str, Any] | None = None, report_path: str | None = None) -> None:
        """End the W&B run, if any: a finished run's (`summary`) after its final metrics and the report's plots
        (`esper_fx.outputs.wandb_log`). A second call does nothing."""
        if self.wandb is not None:
            with _writing(self.wandb.log_dir):
                self.wandb.finish(summary, report_path)


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


# ----------------------------------------------------------------------------------------------
# reading a run directory back (the report, the plots, the notebooks)
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


# ----------------------------------------------------------------------------------------------
# console output
# ----------------------------------------------------------------------------------------------


PROGRESS_WIDE = 140  # columns for the bar with the pace and the last batch's numbers
PROGRESS_MEDIUM = 100  # columns for the bar with the pace


def progress_columns(width: int) -> list[Any]:
    """The progress bar's columns for a terminal `width` columns wide: the batch, its episodes, the epoch,
    the bar, elapsed and ETA always; the pace from `PROGRESS_MEDIUM` columns, the last batch's numbers
    (printed as a line after each batch anyway) from `PROGRESS_WIDE`; nothing is cut at 80."""
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = [TextColumn("[bold]batch {task.fields[batch]}/{task.fields[nbatches]}"),
               TextColumn("{task.fields[episodes]}"), TextColumn("epoch {task.fields[epoch]}/{task.fields[epochs]}"),
               BarColumn(bar_width=None if width >= PROGRESS_WIDE else 12)]
    if width >= PROGRESS_MEDIUM:
        columns.append(TextColumn("{task.fields[rate]}"))
    if width >= PROGRESS_WIDE:
        columns.append(TextColumn("{task.fields[last]}"))
    return columns + [TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]


class Console:
    """Per-batch lines (BEHAVIOUR §7.7) and, attached to a terminal, a rich progress bar: batch, episodes, epoch within
    the batch, throughput, the last batch's numbers, elapsed time and ETA. Off a terminal the per-batch
    lines carry the elapsed time and the ETA instead, and in a Jupyter kernel a progress line above them is
    updated after every epoch (`notebook_bar`). It also notes when the first action is ready."""

    def __init__(self, total_batches: int, n_epochs: int, quiet: bool = False, stream: TextIO | None = None,
                 *, n_envs: int | None = None, n_episodes: int | None = None):
        self.stream = stream or sys.stdout
        self.quiet = quiet
        self.total_batches = total_batches
        self.n_epochs = n_epochs
        self.n_envs = n_envs
        self.n_episodes = n_episodes
        self.first_action_s: float | None = None  # seconds from the start of the run to its first action
        self._progress = None
        self._task = None
        self._start = time.perf_counter()
        self._samples = 0
        self._first_batch = 0  # the batch this process started at (later on a resume)
        self._batches_done = 0  # in this process
        self._notebook = None  # a Jupyter kernel's progress line (`notebook_bar`)
        interactive = hasattr(self.stream, "isatty") and self.stream.isatty()
        if not interactive and not quiet and in_notebook(self.stream):
            self._notebook = NotebookBar(total_batches, n_epochs)
        if interactive and not quiet:
            from rich.console import Console as RichConsole
            from rich.progress import Progress

            terminal = RichConsole(file=self.stream)
            self._progress = Progress(*progress_columns(terminal.width), console=terminal, transient=False)
            self._progress.start()
            self._task = self._progress.add_task(
                "run", total=total_batches * n_epochs, batch=0, nbatches=total_batches, episodes="", epoch=0,
                epochs=n_epochs, rate="", last="",
            )

    def line(self, text: str) -> None:
        if self.quiet:
            return
        if self._progress is not None:
            self._progress.console.print(text, highlight=False, markup=False)
        else:
            print(text, file=self.stream, flush=True)

    def warning(self, text: str) -> None:
        """A line that must be seen, even when quiet: above the progress bar on a terminal, else on stderr."""
        if self._progress is not None:
            self._progress.console.print(f"WARNING: {text}", highlight=False, markup=False)
        else:
            print(f"WARNING: {text}", file=sys.stderr, flush=True)

    def start_at(self, batch: int) -> None:
        """A resumed run starts at `batch`: the bar and the ETA count only the batches left."""
        self._first_batch = batch
        if self._notebook is not None:
            self._notebook.start_at(batch)
        if self._progress is not None and batch > 0:
            self._progress.reset(self._task, completed=batch * self.n_epochs)  # (fields given here replace all)
            self._progress.update(self._task, batch=batch, episodes=self.episodes_text(batch))

    def action_ready(self, batch: int, epoch: int) -> None:
        """The controller's actions of (batch, epoch) are ready; the first time, say how long it took."""
        if self.first_action_s is None:
            self.first_action_s = time.perf_counter() - self._start
            self.line(f"First action after {self.first_action_s:.1f} s (batch {batch}, epoch {epoch})")

    def epoch_done(self, batch: int, epoch: int, samples: int) -> None:
        """`samples`: the epoch's training steps over all envs (the loop passes steps x envs)."""
        self._samples += samples
        if self._notebook is not None:
            self._notebook.epoch_done(batch, epoch, self.episodes_text(batch))
        if self._progress is None:
            return
        elapsed = max(time.perf_counter() - self._start, 1e-9)
        self._progress.update(self._task, advance=1, batch=batch + 1, episodes=self.episodes_text(batch),
                              epoch=epoch, rate=f"{self._samples / elapsed:,.1f} train steps/s")

    def batch_done(self, entry: BatchSummary) -> None:
        self._batches_done += 1
        if self._progress is not None:
            last = (f"acc {entry.avg_accuracy:.1f}% reward {entry.avg_reward:+.2f} "
                    f"seeds +{entry.seeds_created}/F{entry.seeds_fossilized}/C{entry.seeds_culled}")
            self._progress.update(self._task, last=last)

    def episodes_text(self, batch: int) -> str:
        """'episodes 3-4/8' for batch 1 of 2 envs and 8 episodes ('' when the sizes are unknown)."""
        if self.n_envs is None or self.n_episodes is None:
            return ""
        first = batch * self.n_envs + 1
        return f"episodes {first}-{min(first + self.n_envs - 1, self.n_episodes)}/{self.n_episodes}"

    def time_line(self) -> str:
        """Elapsed time and the ETA of the remaining batches, from this process's pace so far."""
        elapsed = time.perf_counter() - self._start
        left = self.total_batches - self._first_batch - self._batches_done
        eta = elapsed / max(self._batches_done, 1) * max(left, 0)
        left = max(left, 0)
        return (f"  Elapsed {format_duration(elapsed)}, ETA {format_duration(eta)} "
                f"({left} batch{'' if left == 1 else 'es'} left)")

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


# Events whose warnings are also printed on stderr (the governor's are printed as console lines).
WARNING_EVENTS = (EventType.PPO_UPDATE_COMPLETED, EventType.NONFINITE_SKIPPED)


def update_warning(ppo: Mapping[str, Any]) -> str | None:
    """What to shout about an update: skipped entirely, or stopped at a step that was not finite."""
    if ppo.get("skipped"):
        return f"the PPO update was skipped ({ppo.get('reason', 'no valid transitions')})"
    if ppo.get("nonfinite_skipped"):
        return (f"the PPO update stopped at a step whose loss, gradients or new parameters were NaN or inf; "
                f"the parameters of the last finite step are kept ({int(ppo.get('n_steps_taken', 0))} steps "
                f"taken)")
    return None


def nonfinite_warning(counts: Mapping[str, int]) -> str:
    """The NONFINITE_SKIPPED message: what the normalisers left out."""
    parts = []
    if counts.get("rewards"):
        parts.append(f"{counts['rewards']} NaN/inf rewards were left out of the reward normaliser")
    if counts.get("observation_rows"):
        parts.append(f"{counts['observation_rows']} observation rows with NaN/inf (or overflowing) values were "
                     f"left out of the observation normaliser")
    return "; ".join(parts)


def format_batch_lines(entry: BatchSummary, total_episodes: int) -> list[str]:
    tasks = entry.env_tasks or [""] * len(entry.env_accuracies)  # a task mix names each env's task
    accs = ", ".join(f"{a:.1f} {task}".rstrip() for a, task in zip(entry.env_accuracies, tasks))
    lines = [
        f"BATCH {entry.batch} | Episodes {entry.episodes_completed}/{total_episodes} | env acc [{accs}]",
        f"  Avg {entry.avg_accuracy:.2f}% (rolling {entry.rolling_avg_accuracy:.2f}%), reward "
        f"{entry.avg_reward:+.3f} | seeds germinated {entry.seeds_created}, fossilized "
        f"{entry.seeds_fossilized}, culled {entry.seeds_culled}, rollbacks {entry.rollbacks}",
    ]
    ppo = entry.ppo
    if ppo is None:
        pass
    elif ppo.get("skipped"):
        lines.append(f"  Update skipped ({ppo.get('reason', 'no valid transitions')})")
    else:
        lines.append(
            f"  PPO: policy {ppo['policy_loss']:+.4f} value {ppo['value_loss']:.4f} entropy "
            f"{ppo['entropy']:.3f} (coef {entry.entropy_coef:.4f}) approx_kl {ppo['approx_kl']:.2e} "
            f"EV {ppo['explained_variance']:+.3f}"
            + (f" early-stop {ppo['early_stop']}" if ppo.get("early_stopped") else "")
        )
        if "approx_kl_after" in ppo:
            heads = " ".join(f"{h} {ppo[f'entropy_after_{h}']:.2f}" for h in ACTION_HEADS
                             if f"entropy_after_{h}" in ppo)
            lines.append(f"  after the update: KL {ppo['approx_kl_after']:.2e}, entropy {heads}, "
                         f"{int(ppo.get('n_steps_taken', 0))} steps")
    total = sum(entry.action_counts.values())
    if total:
        ops = ", ".join(f"{op} {100 * n / total:.0f}%" for op, n in entry.action_counts.items())
        lines.append(f"  ops: {ops}")
    return lines


def final_table(history: Sequence[BatchSummary]) -> str:
    """A plain-text table of the run, one row per batch."""
    header = f"{'batch':>5} {'episodes':>8} {'avg acc %':>9} {'rolling %':>9} {'reward':>9} " \
             f"{'germ':>5} {'foss':>5} {'cull':>5} {'rollb':>5}"
    rows = [header, "-" * len(header)]
    for e in history:
        rows.append(
            f"{e.batch:>5} {e.episodes_completed:>8} {e.avg_accuracy:>9.2f} "
            f"{e.rolling_avg_accuracy:>9.2f} {e.avg_reward:>+9.3f} {e.seeds_created:>5} "
            f"{e.seeds_fossilized:>5} {e.seeds_culled:>5} {e.rollbacks:>5}"
        )
    return "\n".join(rows)
