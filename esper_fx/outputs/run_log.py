"""`RunLog`: where a run's outputs go. Each batch's events, metrics.csv row and scalars fan out to the run
directory, the console, TensorBoard and W&B; logging never changes learning, it only reads values the loop
already computed (BEHAVIOUR §7.7, ARCHITECTURE §2).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from esper_fx.outputs.console import WARNING_EVENTS, Console, format_batch_lines
from esper_fx.outputs.events import Event
from esper_fx.outputs.history import BatchSummary
from esper_fx.outputs.run_directory import RunDirectory, _writing


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
