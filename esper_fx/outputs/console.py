"""The console: the per-batch lines, the progress bar (rich on a terminal, a progress line in Jupyter) with the
ETA and the first action, the warnings printed about an update, and the run's final table (BEHAVIOUR §7.7).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Mapping, Sequence, TextIO

from esper_fx.contracts.actions import ACTION_HEADS
from esper_fx.contracts.events import EventType
from esper_fx.outputs.history import BatchSummary
from esper_fx.outputs.notebook_bar import NotebookBar, format_duration, in_notebook


PROGRESS_WIDE = 140  # columns for the bar with the pace and the last batch's numbers
PROGRESS_MEDIUM = 100  # columns for the bar with the pace
# Off a terminal and outside Jupyter (CI, a pipe, a log file) there is no bar: an epoch line says the run is
# alive, for every epoch of the process's first batch (the first minute of a run had printed nothing after
# its first action), and later whenever the console was silent for EPOCH_LINE_AFTER_S (a long batch); never
# more than one a EPOCH_LINE_EVERY_S.
EPOCH_LINE_AFTER_S = 10.0
EPOCH_LINE_EVERY_S = 1.0


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
    lines carry the elapsed time and the ETA instead, with an epoch line for each epoch of the first batch and
    in a long batch (`EPOCH_LINE_AFTER_S`), and in a Jupyter kernel a progress line above them is updated after
    every epoch (`notebook_bar`). It also notes when the first action is ready."""

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
        self._last_line = self._start  # when the console last printed a line (a long batch's epoch lines' clock)
        self._last_epoch_line: float | None = None  # when it last printed an epoch line
        interactive = hasattr(self.stream, "isatty") and self.stream.isatty()
        if not interactive and not quiet and in_notebook(self.stream):
            self._notebook = NotebookBar(total_batches, n_epochs)
        self._epoch_lines = not interactive and not quiet and self._notebook is None
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
        self._last_line = time.perf_counter()
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
        if self._epoch_lines:
            self._epoch_line(batch, epoch)
        if self._notebook is not None:
            self._notebook.epoch_done(batch, epoch, self.episodes_text(batch))
        if self._progress is None:
            return
        elapsed = max(time.perf_counter() - self._start, 1e-9)
        self._progress.update(self._task, advance=1, batch=batch + 1, episodes=self.episodes_text(batch),
                              epoch=epoch, rate=f"{self._samples / elapsed:,.1f} train steps/s")

    def before_update(self, note: str | None) -> None:
        """The first batch's update is about to start: `note` (a cold compile's line, or None) is said then."""
        if note is not None and self._batches_done == 0:
            self.line(f"  {note}")

    def _epoch_line(self, batch: int, epoch: int) -> None:
        """'  batch 0, epoch 3/12 (episodes 1-4/96) done, elapsed 0:00:14', in the first batch of this process
        (its first epoch always, then at most one a EPOCH_LINE_EVERY_S) and later after EPOCH_LINE_AFTER_S
        without a line."""
        now = time.perf_counter()
        if self._batches_done == 0:
            if self._last_epoch_line is not None and now - self._last_epoch_line < EPOCH_LINE_EVERY_S:
                return
        elif now - self._last_line < EPOCH_LINE_AFTER_S:
            return
        self._last_epoch_line = now
        episodes = self.episodes_text(batch)
        self.line(f"  batch {batch}, epoch {epoch}/{self.n_epochs}{f' ({episodes})' if episodes else ''} done, "
                  f"elapsed {format_duration(now - self._start)}")

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


# what the batch line shows of the update of a learning controller other than PPO, when it reports them
UPDATE_TERMS = ("loss", "policy_loss", "value_loss", "entropy")


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
    elif "approx_kl" not in ppo:  # another learning controller: the usual loss terms it reports
        lines.append("  Update: " + " ".join(f"{name} {ppo[name]:+.4f}" for name in UPDATE_TERMS if name in ppo))
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
