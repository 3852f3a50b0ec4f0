"""A progress line for Jupyter: one output cell line updated in place through IPython's display handles, where a
terminal gets rich's bar (`console.Console`). It needs nothing beyond IPython, which every Jupyter kernel has
(no widgets): batch, episodes, epoch, a text bar, elapsed time and ETA. `quiet=True` turns it off with the
rest of the console; the per-batch lines are printed below it as anywhere off a terminal.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

BAR_WIDTH = 24


def in_notebook(stream: TextIO) -> bool:
    """Whether `stream` is the standard output of a Jupyter kernel (IPython's ZMQ shell). IPython is only asked
    when something already imported it, so a script never pays for the import."""
    if stream is not sys.stdout or "IPython" not in sys.modules:
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def open_display(text: str) -> Any:
    """A display handle showing `text` (its `update(obj, raw=True)` replaces it in place)."""
    from IPython.display import display

    return display({"text/plain": text}, raw=True, display_id=True)


def format_duration(seconds: float) -> str:
    """h:mm:ss"""
    seconds = max(int(round(seconds)), 0)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def bar_text(done: float, width: int = BAR_WIDTH) -> str:
    """'[#####-----]  50%' for done = 0.5."""
    done = max(0.0, min(done, 1.0))
    filled = int(round(done * width))
    return f"[{'#' * filled}{'-' * (width - filled)}] {100 * done:3.0f}%"


class NotebookBar:
    """The run's progress line in a notebook: updated after every epoch."""

    def __init__(self, total_batches: int, n_epochs: int):
        self.total_epochs = max(total_batches * n_epochs, 1)
        self.total_batches = total_batches
        self.n_epochs = n_epochs
        self._start = time.perf_counter()
        self._first_epoch = 0  # epochs done before this process (a resume)
        self._epochs_done = 0  # in this process
        self._handle = open_display(f"batch 0/{total_batches} · starting…")

    def start_at(self, batch: int) -> None:
        self._first_epoch = batch * self.n_epochs

    def epoch_done(self, batch: int, epoch: int, episodes: str) -> None:
        """After `epoch` (1-based) of `batch` (0-based); `episodes` as the console writes them."""
        self._epochs_done += 1
        elapsed = time.perf_counter() - self._start
        done = (self._first_epoch + self._epochs_done) / self.total_epochs
        left = self.total_epochs - self._first_epoch - self._epochs_done
        eta = elapsed / self._epochs_done * max(left, 0)
        parts = [f"batch {batch + 1}/{self.total_batches}", episodes, f"epoch {epoch}/{self.n_epochs}",
                 bar_text(done), f"{format_duration(elapsed)} elapsed", f"ETA {format_duration(eta)}"]
        self._handle.update({"text/plain": " · ".join(p for p in parts if p)}, raw=True)
