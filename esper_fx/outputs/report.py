"""`python -m esper_fx.report RUN_DIR`: the plots and a self-contained report.html of a run directory.

Every run that writes a run directory ends with a report (`TrainingConfig.report`); this module also
rebuilds one for any run directory, an interrupted or crashed one included, from what is on disk:

    config.json      the run's configuration
    checkpoints/     the latest checkpoint's manifest holds every finished batch's full history row
    metrics.csv      a row per finished batch (rows after the latest checkpoint are read from here, with
                     the PPO metrics of their PPO_UPDATE_COMPLETED events)
    events.jsonl     the lifecycle events (the swimlane of the last batch)
    summary.json     the run's totals, when it finished
    provenance.json  where the run came from (versions, commit, command, host, devices), shown in the header

It writes `<run_dir>/plots/*.png` (learning curves with the per-env spread, seed events, the lifecycle
swimlane of the last batch, the action distribution, PPO diagnostics, timing per batch, and the run's time
in parts as one bar: `outputs.time_breakdown`) and `<run_dir>/report.html`:
the summary, a table of every batch, the plots inlined as base64 PNGs and the configuration, one file that
opens in a browser without a server. A plot that fails is reported in the page and the console; the report
itself never ends a run (`write_report_or_warn`).
"""

from __future__ import annotations

import base64
import html
import json
import math
import shlex
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from bridge.jax_env import ensure_jax_env
from esper_fx.outputs import plots
from esper_fx.outputs.checkpoint import CheckpointError, read_manifest
from esper_fx.config import TrainingConfig, flat_view
from esper_fx.contracts.slots import SlotIdError, sort_slot_ids
from esper_fx.command import EXIT_OK, CommandParser
from esper_fx.errors import ConfigError, OutputError
from esper_fx.outputs.durable import replace_text
from esper_fx.outputs.events import load_events
from esper_fx.outputs.metrics_csv import read_metrics, summary_from_csv
from esper_fx.outputs.history import BatchSummary, as_summaries, run_summary
from esper_fx.outputs.provenance import PROVENANCE_NAME

PLOTS_SUBDIR = "plots"
REPORT_NAME = "report.html"
DPI = 100
SKIPPED_EVENT_TYPES = ("REWARD_COMPUTED",)  # debug-level lines the report never reads (left unparsed)


# ----------------------------------------------------------------------------------------------
# reading a run directory
# ----------------------------------------------------------------------------------------------


@dataclass
class RunRecord:
    """A run as its directory holds it."""

    path: Path
    config: dict[str, Any]
    history: list[BatchSummary]
    events: list[dict[str, Any]]
    summary: dict[str, Any]
    finished: bool  # summary.json describes exactly these batches
    planned_batches: int | None
    notes: list[str] = field(default_factory=list)  # what could not be read
    provenance: dict[str, Any] = field(default_factory=dict)  # provenance.json (or summary.json's copy)


def load_run(run_dir: str | Path) -> RunRecord:
    """Read a run directory (finished or not). Raises FileNotFoundError when it holds no run at all. What is
    damaged (a line that is not UTF-8 or not JSON, a row with a non-numeric batch, a config.json of the
    wrong shape) is left out with a note in `notes`, never an exception."""
    path = Path(run_dir).absolute()
    if not (path / "config.json").exists() and not (path / "metrics.csv").exists():
        raise FileNotFoundError(f"{path} is not a run directory (no config.json, no metrics.csv)")
    notes: list[str] = []
    config = _read_json(path / "config.json", notes) or {}
    events = load_events(path / "events.jsonl", notes, skip_types=SKIPPED_EVENT_TYPES)
    history = load_history(path, config, events, notes)
    saved = _read_json(path / "summary.json", notes)
    finished = bool(saved) and saved.get("batches") == len(history)
    summary = saved if finished else computed_summary(config, history)
    planned = _planned_batches(config)
    provenance = _read_json(path / PROVENANCE_NAME, notes) or (saved or {}).get("provenance")
    return RunRecord(path, config, history, events, summary, finished, planned, notes,
                     provenance if isinstance(provenance, dict) else {})


def _read_json(path: Path, notes: list[str]) -> dict[str, Any] | None:
    """A JSON object file, or None (missing; unreadable, not UTF-8, not JSON or not an object: noted)."""
    if not path.exists():
        return None
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: UnicodeDecodeError and JSONDecodeError
        notes.append(f"{path.name} could not be read ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})")
        return None
    if not isinstance(value, dict):
        notes.append(f"{path.name} left out: it holds a JSON {type(value).__name__}, not an object")
        return None
    return value


def load_history(path: Path, config: Mapping[str, Any], events: Sequence[Mapping[str, Any]],
                 notes: list[str]) -> list[BatchSummary]:
    """Every finished batch: the latest checkpoint's rows, then metrics.csv's later rows."""
    rows: dict[int, BatchSummary] = {}
    try:
        rows.update((h.batch, h) for h in as_summaries(read_manifest(path)["history"]))
    except (CheckpointError, OSError, ValueError, KeyError, TypeError):
        pass  # no checkpoint yet: metrics.csv alone
    menu, slot_ids = _menu_and_slots(config, notes)
    ppo = {e.get("batch"): e.get("data") for e in events if e.get("event_type") == "PPO_UPDATE_COMPLETED"}
    for row in read_metrics(path / "metrics.csv", notes):
        batch = int(float(row["batch"]))
        if batch not in rows:
            rows[batch] = summary_from_csv(row, ppo.get(batch), menu, slot_ids)
    return [rows[b] for b in sorted(rows)]


def _training_config(config: Mapping[str, Any]) -> TrainingConfig | None:
    try:
        return TrainingConfig.from_saved(config)
    except (ValueError, TypeError):
        return None


def _menu_and_slots(config: Mapping[str, Any], notes: list[str] | None = None) -> tuple[list[str], list[str]]:
    parsed = _training_config(config)
    if parsed is not None:
        return list(parsed.menu), list(parsed.slot_ids)
    if config and notes is not None:
        notes.append("config.json is not a valid configuration: the blueprint and slot names are taken as "
                     "they are where they are lists of names")
    return _names(config.get("blueprint_menu")), _names(config.get("slots"))


def _names(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) and all(isinstance(v, str) for v in value) else []


def _planned_batches(config: Mapping[str, Any]) -> int | None:
    try:
        return math.ceil(int(config["n_episodes"]) / int(config["n_envs"]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError):
        return None


def computed_summary(config: Mapping[str, Any], history: Sequence[BatchSummary]) -> dict[str, Any]:
    """summary.json's numbers for the batches on disk (a run that has not finished has no summary.json)."""
    best = max([0.0] + [h.rolling_avg_accuracy for h in history if math.isfinite(h.rolling_avg_accuracy)])
    wall = sum(h.wall_time_s for h in history if math.isfinite(h.wall_time_s))
    episodes = history[-1].episodes_completed if history else 0
    return run_summary(str(config.get("task", "?")), str(config.get("controller", "?")), episodes, history, best,
                       wall, None)


# ----------------------------------------------------------------------------------------------
# plots
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plot:
    """One figure of the report: its file (None when drawing failed) and the error, if any."""

    name: str
    title: str
    path: Path | None
    error: str | None = None


def plot_specs(record: RunRecord) -> list[tuple[str, str, Callable[[], Any]]]:
    """(file stem, title, draw) for every figure this run can show."""
    history, config = record.history, record.config
    static_host = (record.summary.get("static_host") or {}).get("accuracy")
    specs: list[tuple[str, str, Callable[[], Any]]] = [
        ("learning_curves", "Accuracy and reward per batch (band: spread over envs; dashed: rolling mean"
         + ("; dotted: the static host, trained alone in one more batch)" if static_host is not None else ")"),
         lambda: plots.plot_runs(history, ("avg_accuracy", "avg_reward"), env_band=True, static_host=static_host)),
        ("seed_events", "Seed events per batch", lambda: plots.plot_seed_events(history)),
    ]
    if history:
        last = history[-1].batch
        slots = _names(config.get("slots"))
        specs.append(("lifecycle", f"Seed lifecycle of the last batch ({last})",
                      lambda: plots.plot_lifecycle(record.events, last, n_envs=config.get("n_envs"),
                                                   slot_ids=_lifecycle_slots(slots),
                                                   max_epochs=config.get("max_epochs"))))
        specs.append(("actions", "Action distribution per head, all batches",
                      lambda: plots.plot_action_distribution(history)))
    if any(h.ppo for h in history):
        specs.append(("ppo", "PPO diagnostics", lambda: plots.plot_ppo_diagnostics(history)))
    if any(h.timing for h in history):
        specs.append(("timing", "Time per batch", lambda: plots.plot_timing(history)))
    breakdown = (record.summary.get("timing") or {}).get("breakdown") if record.finished else None
    if isinstance(breakdown, Mapping) and breakdown.get("parts"):
        specs.append(("time_breakdown", "Where the run's wall time went, from the start to this report "
                      "(summary.json's timing.breakdown, which then adds the report's own time)",
                      lambda: plots.plot_time_breakdown(breakdown)))
    return specs


def _lifecycle_slots(slots: list[str]) -> list[str] | None:
    """The enabled slots in canonical order (None: let the swimlane find them in the events)."""
    try:
        return list(sort_slot_ids(slots)) or None
    except SlotIdError:
        return None


def draw_plots(record: RunRecord, plots_dir: Path) -> list[Plot]:
    """Every figure as plots_dir/<name>.png; a figure that fails is returned with its error, not raised."""
    plots_dir.mkdir(parents=True, exist_ok=True)
    drawn = []
    for name, title, draw in plot_specs(record):
        target = plots_dir / f"{name}.png"
        try:
            draw().savefig(target, dpi=DPI)
            drawn.append(Plot(name, title, target))
        except Exception as exc:  # a figure must never cost the report (or the run)
            target.unlink(missing_ok=True)
            drawn.append(Plot(name, title, None, f"{type(exc).__name__}: {exc}"))
    return drawn


# ----------------------------------------------------------------------------------------------
# the page
# ----------------------------------------------------------------------------------------------

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 2em; }
.status { color: #555; margin-top: 0; } .unfinished { color: #a15c00; } .error { color: #b00020; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { padding: 0.25em 0.7em; border-bottom: 1px solid #ddd; text-align: right; }
th { background: #f4f4f4; } td.key, th.key { text-align: left; }
.scroll { max-height: 28em; overflow-y: auto; display: inline-block; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
"""

SUMMARY_ROWS: tuple[tuple[str, str], ...] = (
    ("task", "task"), ("controller", "controller"), ("episodes", "episodes"), ("batches", "batches"),
    ("final_avg_accuracy", "final avg accuracy (%)"), ("final_rolling_avg_accuracy", "final rolling accuracy (%)"),
    ("best_rolling_avg_accuracy", "best rolling accuracy (%)"), ("seeds_created", "seeds germinated"),
    ("seeds_fossilized", "seeds fossilized"), ("seeds_culled", "seeds culled"), ("rollbacks", "governor rollbacks"),
    ("wall_time_s", "wall time of the batches (s)"),
)
BATCH_COLUMNS: tuple[tuple[str, str], ...] = (
    ("batch", "batch"), ("episodes_completed", "episodes"), ("avg_accuracy", "avg acc %"),
    ("rolling_avg_accuracy", "rolling %"), ("avg_reward", "reward"), ("seeds_created", "germ"),
    ("seeds_fossilized", "foss"), ("seeds_culled", "cull"), ("rollbacks", "rollb"), ("ppo.entropy", "entropy"),
    ("ppo.approx_kl", "approx KL"), ("ppo.explained_variance", "EV"), ("wall_time_s", "wall s"),
)


def format_value(value: Any) -> str:
    """How the report prints a number: floats with 2 decimals (small ones in e-notation), None as '–'."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.2e}" if 0 < abs(value) < 0.01 else f"{value:.2f}"
    return str(value)


def _batch_value(entry: BatchSummary, key: str) -> Any:
    name, _, sub = key.partition(".")
    value = getattr(entry, name, None)
    if sub:
        value = value.get(sub) if isinstance(value, Mapping) else None
    return value


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], key_columns: int = 1) -> str:
    def cells(values: Sequence[str], tag: str) -> str:
        return "".join(f'<{tag}{" class=key" if i < key_columns else ""}>{html.escape(v)}</{tag}>'
                       for i, v in enumerate(values))
    body = "".join(f"<tr>{cells(r, 'td')}</tr>" for r in rows)
    return f"<table><thead><tr>{cells(header, 'th')}</tr></thead><tbody>{body}</tbody></table>"


def summary_section(record: RunRecord) -> str:
    s = record.summary
    rows = [(label, format_value(s.get(key))) for key, label in SUMMARY_ROWS]
    first_action = (s.get("timing") or {}).get("first_action_s")
    if first_action is not None:
        rows.append(("time to the first action (s)", format_value(first_action)))
    breakdown = (s.get("timing") or {}).get("breakdown")
    if isinstance(breakdown, Mapping) and breakdown.get("wall_s") is not None:
        other = 100 * (breakdown.get("other_share") or 0.0)
        rows.append(("wall time of the run (s), of it in no named part (%)",
                     f"{format_value(breakdown['wall_s'])}, {format_value(other)}"))
    static_host = s.get("static_host")
    if static_host:
        rows.append((f"static host, trained alone in batch {static_host['batch']} (%)",
                     format_value(static_host["accuracy"])))
    return _table(("", "value"), rows)


def status_line(record: RunRecord) -> str:
    done = len(record.history)
    planned = f" of {record.planned_batches}" if record.planned_batches else ""
    if record.finished:
        return f'<p class="status">Finished: {done}{planned} batches.</p>'
    return (f'<p class="status unfinished">Not finished: {done}{planned} batches on disk. Continue it with '
            f"<code>python -m esper_fx.train --resume {html.escape(str(record.path))}</code>.</p>")


def provenance_line(p: Mapping[str, Any]) -> str:
    """The header's compact line of where the run came from (provenance.json): versions, commit (and whether
    the checkout was dirty, or why there is none), host, torch threads, devices and the command of the first
    start, then how often it was resumed and the last resume's time and host; empty without a provenance."""
    if not p:
        return ""
    versions, git, devices = (_mapping(p.get(key)) for key in ("versions", "git", "devices"))
    esc = html.escape
    cpu = p.get("cpu") if isinstance(p.get("cpu"), Mapping) else {}
    commit = git.get("commit")
    note = p.get("git_note")
    shown = (f'<code title="{esc(str(commit))}">{esc(str(commit)[:12])}</code>' if commit
             else f'<span title="{esc(str(note))}">–</span>' if note else "–")
    parts = [esc(", ".join(f"{name} {v}" for name, v in versions.items() if v is not None)),
             f"commit {shown}{' (dirty)' if git.get('dirty') else ''}",
             esc(f"host {p.get('host')}"), esc(f"torch threads {p.get('torch_threads')}"),
             esc(f"CPU {cpu.get('model')} ({cpu.get('torch_capability')})"),
             esc("devices " + "; ".join(f"{kind} {', '.join(map(str, v)) if isinstance(v, list) else v}"
                                        for kind, v in devices.items() if v is not None))]
    if isinstance(p.get("command"), list):
        parts.append(f"command <code>{esc(shlex.join(map(str, p['command'])))}</code>")
    resumes = [r for r in p.get("resumes") or () if isinstance(r, Mapping)]
    if resumes:
        last = resumes[-1]
        parts.append(esc(f"resumed {len(resumes)}× (last {last.get('started_utc')}, host {last.get('host')}; "
                         f"provenance.json lists each)"))
    return f'<p class="status">{" · ".join(parts)}</p>'


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def batches_section(history: Sequence[BatchSummary]) -> str:
    rows = [[format_value(_batch_value(e, key)) for key, _ in BATCH_COLUMNS] for e in history]
    return f'<div class="scroll">{_table([label for _, label in BATCH_COLUMNS], rows, key_columns=0)}</div>'


def plot_section(plot: Plot) -> str:
    title = html.escape(plot.title)
    if plot.path is None:
        return f'<p class="error">Plot {html.escape(plot.name)} could not be drawn: {html.escape(plot.error or "")}</p>'
    data = base64.b64encode(plot.path.read_bytes()).decode("ascii")
    return (f'<figure id="plot-{plot.name}"><img src="data:image/png;base64,{data}" alt="{title}">'
            f"<figcaption>{title} (plots/{plot.path.name})</figcaption></figure>")


def config_section(config: Mapping[str, Any]) -> str:
    """config.json as a table, a row per key; a nested config's keys by their path (`ppo.lr`)."""
    rows = [(key, format_config(value)) for key, value in flat_view(config).items()]
    return f'<div class="scroll">{_table(("field", "value"), rows, key_columns=2)}</div>'


def format_config(value: Any) -> str:
    """A config.json value as config.json writes it (true, null, [1, 2]), a string without its quotes."""
    return value if isinstance(value, str) else json.dumps(value)


def render_html(record: RunRecord, drawn: Sequence[Plot]) -> str:
    """The self-contained page: summary, batches, plots (base64), configuration."""
    name = html.escape(record.path.name)
    notes = "".join(f'<p class="error">{html.escape(n)}</p>' for n in record.notes)
    figures = "\n".join(plot_section(p) for p in drawn) or "<p>No batch has finished yet: nothing to plot.</p>"
    generated = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    return f"""<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>esper_fx run {name}</title><style>{STYLE}</style></head>
<body>
<h1>esper_fx run <code>{name}</code></h1>
{status_line(record)}
<p class="status">{html.escape(str(record.path))} · report written {html.escape(generated)} · TensorBoard:
<code>tensorboard --logdir {html.escape(str(record.path / "tb"))}</code></p>
{provenance_line(record.provenance)}
{notes}
<h2>Summary</h2>
{summary_section(record)}
<h2>Batches</h2>
{batches_section(record.history)}
<h2>Plots</h2>
{figures}
<h2>Configuration</h2>
{config_section(record.config)}
</body>
</html>
"""


# ----------------------------------------------------------------------------------------------
# writing it
# ----------------------------------------------------------------------------------------------


def write_report(run_dir: str | Path) -> Path:
    """plots/*.png and report.html of `run_dir` (written atomically); returns the report's path. Where they
    cannot go (plots/ a file, report.html a folder) is an OutputError naming it, before anything is drawn."""
    record = load_run(run_dir)
    target = record.path / REPORT_NAME
    check_targets(record.path / PLOTS_SUBDIR, target)
    drawn = draw_plots(record, record.path / PLOTS_SUBDIR)
    for plot in drawn:
        if plot.error:
            warnings.warn(f"report: plot {plot.name} could not be drawn ({plot.error})", stacklevel=2)
    replace_text(target, render_html(record, drawn))  # (a failed write leaves no half page behind)
    return target


def check_targets(plots_dir: Path, page: Path) -> None:
    """plots/ is a folder (or absent) and report.html no folder: else an OutputError naming the path."""
    if plots_dir.exists() and not plots_dir.is_dir():
        raise OutputError(f"cannot write the plots: {plots_dir} is not a folder (move it away)")
    if page.is_dir():
        raise OutputError(f"cannot write the report: {page} is a folder (move it away)")


def write_report_or_warn(run_dir: str | Path, say: Callable[[str], None] = print) -> str | None:
    """write_report, but a failure only warns (the run's own files are already on disk)."""
    try:
        return str(write_report(run_dir))
    except Exception as exc:  # the report must never lose a run
        message = f"report not written: {type(exc).__name__}: {exc} (retry: python -m esper_fx.report {run_dir})"
        warnings.warn(message, stacklevel=2)
        say(message)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    """0 when every report was written; 2 for a bad command line, a path that holds no run, or a report that
    could not be written (one line each: docs/USAGE.md's exit codes)."""
    ensure_jax_env(warn=False)
    parser = CommandParser("esper_fx.report", description="Write plots/*.png and report.html for run directories "
                                                          "(finished, interrupted or still running).")
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    try:
        args = parser.parse_args(argv)
    except ConfigError as exc:
        return parser.fail(exc)
    status = EXIT_OK
    for run_dir in args.run_dirs:
        try:
            print(f"Report: {write_report(run_dir)}")
        except OSError as exc:  # no run there, the report cannot go where it goes, a full disk
            status = parser.fail(OutputError(f"{exc.filename or run_dir}: {exc.strerror}") if exc.strerror else exc)
    return status


if __name__ == "__main__":
    sys.exit(main())
