"""The run directory on disk: its file names, `RunDirectory` (claimed and locked for the life of a run;
config.json, provenance.json, events.jsonl, metrics.csv, summary.json) and `refusal`, why a fresh run may not
start in a directory that already holds one (BEHAVIOUR §7.7, ARCHITECTURE §2).
"""

from __future__ import annotations

import csv
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from esper_fx.errors import OutputError, RunDirectoryError
from esper_fx.outputs.checkpoint import has_checkpoint
from esper_fx.outputs.durable import append_text, replace_text
from esper_fx.outputs.events import EVENTS_NAME, Event, to_jsonable
from esper_fx.outputs.history import BatchSummary
from esper_fx.outputs.metrics_csv import _cell, _csv_text, flatten_metrics, metric_rows, rows_by_batch
from esper_fx.outputs.folder_lock import LOCK_NAME, FolderLock
from esper_fx.outputs.provenance import PROVENANCE_NAME, RESUMES, collect, run_devices, with_resume


@contextmanager
def _writing(path: Path):
    """Turn an OSError while writing `path` into an OutputError naming the file and the cause."""
    try:
        yield
    except OutputError:
        raise
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _read_provenance(path: Path) -> Any:
    """provenance.json as read, or None when it is missing or not JSON (a resume then records that the first
    start's facts are unknown, rather than failing)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# LOCK_NAME (`folder_lock`): flock()ed for the life of a run; the only file a fresh run directory may hold
CONFIG_NAME = "config.json"
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
        """Hold the run directory's lock (`folder_lock`: a run holding it already is named, FolderInUse)."""
        with _writing(self.path / LOCK_NAME):
            self._lock = FolderLock.take(self.path, "run directory")

    def close(self) -> None:
        if self._lock is not None:
            self._lock.release()
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

    def write_config(self, config_dict: Mapping[str, Any], resumed: Path | None = None,
                     from_batch: int = 0) -> None:
        """config.json, and beside it provenance.json: where the run comes from (`outputs.provenance`; a file
        of its own, since config.json must stay a config `TrainingConfig.from_dict` reads). Both are written
        at the run's start, so a run that stops early keeps them. A resume (`resumed`: the directory of the
        run it continues, this one or another; `from_batch`: its first batch, 0 for a restart) rewrites
        config.json but keeps the first start's provenance and appends this process's to its `resumes`."""
        with _writing(self.path / CONFIG_NAME):
            replace_text(self.path / CONFIG_NAME, json.dumps(to_jsonable(config_dict), indent=2) + "\n")
        own = collect(run_devices(config_dict.get("device"), config_dict.get("env_devices")))
        if resumed is None:
            self.provenance = {**own, RESUMES: []}
        else:
            source = Path(resumed) / PROVENANCE_NAME
            self.provenance = with_resume(_read_provenance(source), {**own, "from_batch": from_batch}, source)
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
