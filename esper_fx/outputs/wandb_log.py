"""Weights & Biases logging of a run, beside TensorBoard (`--wandb online|offline`; `pip install -e '.[wandb]'`).

`WandbLog` logs the scalars TensorBoard gets (`tensorboard_log.batch_scalars`; the step is the batch, as in
`metrics.csv`, and the values are exact, not float32), the run's config (`to_dict`) as W&B's config and, once
the run has finished, summary.json's numbers as W&B's run summary (TensorBoard's `final_scalars`:
`final/final_avg_accuracy`, ...) and the plots the report drew (`plots/*.png`, images at the last step). The
W&B run is named after the run directory; W&B's files go to `<run_dir>/wandb/` and its run id to
`<run_dir>/wandb/run_id`, so that a resumed run continues the same W&B run (`resume="allow"`).

`offline` needs no network and no account: each process of the run leaves an `offline-run-*` folder, which
`wandb sync` uploads later. `online` needs W&B credentials (`wandb login` or WANDB_API_KEY), checked before
anything is written: W&B never prompts for them. W&B prints nothing and does not capture the console; its
errors are raised. W&B's history cannot be cut: the batches a resume repeats (the same numbers but for the
timings) are logged again offline, and online W&B keeps those it already holds (`add_batch`).

wandb is imported only when the run uses it. Logging never changes learning: this module only reads values
the loop already computed.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import Any, Mapping

from esper_fx.errors import RunFailure, SetupError
from esper_fx.outputs.durable import replace_text
from esper_fx.outputs.history import BatchSummary
from esper_fx.outputs.tensorboard_log import batch_scalars, final_scalars

WANDB_SUBDIR = "wandb"  # W&B's own name for the folder it makes in the directory it is given
RUN_ID_NAME = "run_id"
MIN_FREE_BYTES = 32 * 2**20  # W&B's offline files need a few MiB a run; on a full disk its service drops its log silently
INSTALL = "pip install -e '.[wandb]'"


def import_wandb(mode: str) -> Any:
    """The wandb module, or a SetupError naming the command that installs it."""
    try:
        import wandb
    except ImportError:
        raise SetupError(f"--wandb {mode} needs the wandb package, which is not installed: {INSTALL}") from None
    return wandb


def check_wandb(mode: str, project: str | None = None, run_dir: str | Path | None = None) -> None:
    """Before anything is written (`training.preflight`): for W&B logging, wandb is installed, accepts its
    settings (`check_settings`), the run directory's `wandb/` (a resumed run's) can be written and its disk has room
    (`check_free_space`), and, online, W&B
    has credentials (without them W&B would prompt for a key) that its server accepts (without a network W&B
    would fail only at the first batch, after minutes of retries)."""
    if mode == "off":
        return
    wandb = import_wandb(mode)
    check_settings(wandb, mode, project)
    log_dir = None if not run_dir else Path(run_dir) / WANDB_SUBDIR
    if log_dir is not None and log_dir.exists() and not os.access(log_dir, os.W_OK | os.X_OK):
        raise SetupError(f"--wandb {mode}: W&B's folder {log_dir} cannot be written (read-only or not yours): make "
                         f"it writable, or run with --wandb off")
    if log_dir is not None:
        check_free_space(mode, log_dir)
    if mode == "online":
        wandb.setup(wandb.Settings(silent=True))  # no "logged in as" lines
        try:  # one call: once a session holds a key, W&B verifies no later login (about 10 s without a network)
            logged_in = wandb.login(prompt=False, verify=True)
        except wandb.errors.Error as exc:
            raise SetupError(f"--wandb online: W&B could not check its credentials ({_one_line(exc)}): check the "
                             "network, WANDB_BASE_URL and the key, or log with --wandb offline and upload later "
                             "with `wandb sync`") from None
        if not logged_in:
            raise SetupError("--wandb online needs W&B credentials: run `wandb login` or set WANDB_API_KEY "
                             "(or log with --wandb offline and upload later with `wandb sync`)")


def check_free_space(mode: str, log_dir: Path) -> None:
    """W&B's folder (or, before it exists, the nearest folder above it that does) has `MIN_FREE_BYTES` free: W&B's
    service meets a full disk by dropping its log without a word, so a run would end whole with its W&B log lost."""
    where = log_dir
    while not where.exists() and where.parent != where:
        where = where.parent
    free = shutil.disk_usage(where).free
    if free < MIN_FREE_BYTES:
        raise SetupError(f"--wandb {mode}: W&B's folder {log_dir} has {free // 1024} KiB free on its disk (W&B "
                         f"needs about {MIN_FREE_BYTES // 2**20} MiB, and loses its log when the disk fills): free "
                         f"some space, or run with --wandb off")


def check_settings(wandb: Any, mode: str, project: str | None) -> None:
    """The settings the run's W&B run starts with, checked by W&B itself before anything is written: every
    WANDB_* variable of the environment (W&B reads them all), then the run's mode and project. A value W&B
    rejects is a SetupError naming it (a secret's value left out)."""
    settings = wandb.Settings()
    for name in sorted(k for k in os.environ if k.startswith("WANDB_")):
        try:
            settings.update_from_env_vars({name: os.environ[name]})
        except (ValueError, wandb.errors.Error) as exc:
            shown = name if any(s in name for s in ("KEY", "TOKEN", "SECRET", "PASSWORD")) else \
                f"{name}={os.environ[name]!r}"
            raise SetupError(f"W&B rejects the environment's {shown} ({_one_line(exc)}): correct or unset it") \
                from None
    try:
        wandb.Settings(mode=mode, project=project)
    except (ValueError, wandb.errors.Error) as exc:
        raise SetupError(f"--wandb-project / wandb_project {project!r}: W&B rejects it ({_one_line(exc)})") from None


def _one_line(exc: BaseException) -> str:
    """W&B's reason in one line: pydantic's first message for a rejected setting, else the exception's text."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            return str(errors()[0]["msg"])
        except (IndexError, KeyError, TypeError):  # not pydantic's list of errors: the text
            pass
    return " ".join(str(exc).split()) or type(exc).__name__


def run_id(log_dir: Path) -> str:
    """The W&B run id of a run directory: the one in `wandb/run_id`, or a new one written there."""
    path = log_dir / RUN_ID_NAME
    if path.is_file():
        return path.read_text(encoding="utf-8").strip()
    log_dir.mkdir(parents=True, exist_ok=True)
    new = secrets.token_hex(4)
    replace_text(path, new + "\n")
    return new


def plot_images(wandb: Any, report_path: str | Path | None) -> dict[str, Any]:
    """The report's plots (`plots/*.png` beside report.html) as W&B images, `plots/<name>` -> image."""
    if report_path is None:
        return {}
    from esper_fx.outputs.report import PLOTS_SUBDIR

    pngs = sorted((Path(report_path).parent / PLOTS_SUBDIR).glob("*.png"))
    return {f"plots/{png.stem}": wandb.Image(str(png)) for png in pngs}


class WandbLog:
    """The W&B run of one run directory. It starts at the first batch it logs (or at `finish`), continuing
    the W&B run an earlier process of the run directory started, and ends at `finish`."""

    def __init__(self, run_dir: str | Path, mode: str, project: str, config: Mapping[str, Any]):
        self.log_dir = Path(run_dir) / WANDB_SUBDIR
        self._mode = str(mode)
        self._project = project
        self._config = dict(config)
        self._wandb = None
        self._run = None
        self._ended = False

    def truncate(self, first_batch: int) -> None:
        """Nothing to drop: W&B's history cannot be cut (see the module docstring)."""

    def add_batch(self, summary: BatchSummary, reward_components: Mapping[str, float] | None = None,
                  first_action_s: float | None = None) -> None:
        """The batch's TensorBoard scalars at step `summary.batch` (`first_action_s` once per process, as
        TensorBoard). A batch below the step an online W&B run resumed at is skipped: W&B already holds it."""
        opening = self._run is None
        run = self._open()
        if summary.batch < run.starting_step:
            return
        run.log(batch_scalars(summary, reward_components, first_action_s if opening else None), step=summary.batch)

    def finish(self, summary: Mapping[str, Any] | None = None, report_path: str | Path | None = None) -> None:
        """End the W&B run. For a finished run (`summary`), first its final metrics and the report's plots
        (when `report_path` was written). Without a summary (a stopped or failed run), only ends it. A second
        call does nothing."""
        if self._ended:
            return
        self._ended = True
        try:
            if summary is not None:
                run = self._open()
                run.summary.update(final_scalars(summary))
                images = plot_images(self._wandb, report_path)
                if images:
                    run.log(images)  # at W&B's current step: the last batch's
        finally:
            run, self._run = self._run, None
            if run is not None:
                run.finish()

    def _open(self) -> Any:
        if self._run is None:
            self._wandb = wandb = import_wandb(self._mode)
            settings = wandb.Settings(silent=True, console="off", reinit="create_new")
            try:
                self._run = wandb.init(
                    project=self._project, name=self.log_dir.parent.name, id=run_id(self.log_dir),
                    dir=str(self.log_dir.parent), config=self._config, allow_val_change=True, resume="allow",
                    mode=self._mode, settings=settings)
            except wandb.errors.Error as exc:
                raise RunFailure(f"W&B could not start its run ({exc}); --wandb offline needs no network, and "
                                 f"--resume {self.log_dir.parent} continues the run") from None
        return self._run


def open_wandb(config: Any) -> WandbLog | None:
    """The run's W&B log (`config` a TrainingConfig), or None (W&B off, or no run directory)."""
    if config.wandb == "off" or not config.run_dir:
        return None
    return WandbLog(config.run_dir, config.wandb, config.wandb_project, config.to_dict())
