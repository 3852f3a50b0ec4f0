"""TensorBoard scalars of a run, one step per batch, in `<run_dir>/tb/` (`tensorboard --logdir runs/`).

`batch_scalars` turns a batch's `BatchSummary` (and the reward components the loop summed) into named
scalars; `Board` writes them with `torch.utils.tensorboard` (the `tensorboard` package's own event format)
and flushes after every batch, so TensorBoard shows a run while it trains. The step is the batch index, as
in `metrics.csv`. Values are written as plain float32 scalars (`simple_value`), the form every TensorBoard
loader reads, its default fast loader included (that loader skips double-precision tensor summaries); they
read back as `metrics.csv`'s values rounded to float32, and `metrics.csv` keeps the exact numbers.

Tags (the step is the batch):

    accuracy/mean, accuracy/rolling_mean, accuracy/env{i}, accuracy/host_max_env{i}
    reward/mean, reward/env{i}, reward_components/{term}        (episode sums; components: mean over envs)
    seeds/germinated, seeds/fossilized, seeds/contributing_fossilized, seeds/culled, seeds/rollbacks,
    seeds/params_held_mean
    ops/{OP}, ops_successful/{OP}                                (the op head's choices, summed over envs)
    choices/{head}/{option}                                      (every head's choices: slot, blueprint, blend, tempo)
    ppo/{metric}                                                 (losses, approx_kl, clip_fraction, entropy and
                                                                  entropy_{head}, explained_variance, grad_norm,
                                                                  ...; skipped updates as ppo/skipped = 1)
    progress/episodes, progress/entropy_coef
    compute/{kind}_gflops                                        (the batch's FLOPs summed over envs: training,
                                                                  host_train, seed_isolated, seed_blending,
                                                                  seed_grown, validation, counterfactual, total)
    timing/batch_s, timing/env_s, timing/bridge_s, timing/controller_s, timing/update_s, timing/first_action_s

At the run's end (`Board.finish`) come the `final/{key}` scalars, summary.json's numbers (final_avg_accuracy,
best_rolling_avg_accuracy, episodes, ...) at the last batch's step, and the run's HParams session: the
config's values as hyperparameters (`config_hparams`), the final scalars and every per-batch tag as metrics,
and the session's end. TensorBoard's HParams dashboard shows the run as one row, each metric as its tag's
last value. A resume drops what an earlier end wrote, and its own end writes it again.

Logging never changes learning: this module only reads values the loop already computed.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping

from esper_fx.contracts.actions import BLEND_NAMES, TEMPO_NAMES
from esper_fx.outputs.history import BatchSummary

TB_SUBDIR = "tb"
SEED_TAGS = (
    ("germinated", "seeds_created"), ("fossilized", "seeds_fossilized"),
    ("contributing_fossilized", "contributing_fossilized"), ("culled", "seeds_culled"), ("rollbacks", "rollbacks"),
)


def _number(value: Any) -> float | None:
    """A finite float, or None for what TensorBoard should not plot (None, NaN, lists, strings)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _option_labels(summary: BatchSummary, head: str, size: int) -> list[str]:
    known = {"slot": summary.slot_ids, "blueprint": summary.menu, "blend": BLEND_NAMES,
             "tempo": TEMPO_NAMES}.get(head, ())
    return [known[i] if i < len(known) else str(i) for i in range(size)]


def batch_scalars(summary: BatchSummary, reward_components: Mapping[str, float] | None = None,
                  first_action_s: float | None = None) -> dict[str, float]:
    """Every TensorBoard scalar of one batch, tag -> value (see the module docstring)."""
    out: dict[str, Any] = {
        "accuracy/mean": summary.avg_accuracy, "accuracy/rolling_mean": summary.rolling_avg_accuracy,
        "reward/mean": summary.avg_reward, "progress/episodes": summary.episodes_completed,
        "progress/entropy_coef": summary.entropy_coef, "timing/batch_s": summary.wall_time_s,
    }
    for i, acc in enumerate(summary.env_accuracies):
        out[f"accuracy/env{i}"] = acc
    for i, acc in enumerate(summary.host_max_accuracies):
        out[f"accuracy/host_max_env{i}"] = acc
    for i, reward in enumerate(summary.env_rewards):
        out[f"reward/env{i}"] = reward
    for term, value in (reward_components or {}).items():
        out[f"reward_components/{term}"] = value
    for tag, attr in SEED_TAGS:
        out[f"seeds/{tag}"] = getattr(summary, attr)
    if summary.env_seed_params:
        out["seeds/params_held_mean"] = sum(summary.env_seed_params) / len(summary.env_seed_params)
    for op, count in summary.action_counts.items():
        out[f"ops/{op}"] = count
    for op, count in summary.successful_action_counts.items():
        out[f"ops_successful/{op}"] = count
    for head, counts in summary.head_counts.items():
        if head == "op":
            continue  # ops/{OP} above
        for label, count in zip(_option_labels(summary, head, len(counts)), counts):
            out[f"choices/{head}/{label}"] = count
    for name, value in (summary.ppo or {}).items():
        out[f"ppo/{name}"] = value
    for name, seconds in summary.timing.items():
        out[f"timing/{name}"] = seconds
    for name, flops in (summary.flops or {}).items():
        out[f"compute/{name.removesuffix('_flops')}_gflops"] = flops / 1e9
    if first_action_s is not None:
        out["timing/first_action_s"] = first_action_s
    return {tag: number for tag, value in out.items() if (number := _number(value)) is not None}


FINAL_PREFIX = "final/"
HPARAMS_PLUGIN = "hparams"  # tensorboard.plugins.hparams.metadata.PLUGIN_NAME


def config_hparams(config: Mapping[str, Any]) -> dict[str, bool | float | str]:
    """The config's values as HParams hyperparameters: numbers, strings and booleans as they are, lists as
    their JSON text, a section's values as `section.key`; nulls are left out (HParams has no null)."""
    out: dict[str, bool | float | str] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            out.update({f"{key}.{name}": v for name, v in config_hparams(value).items()})
        elif isinstance(value, (list, tuple)):
            out[key] = json.dumps(value, default=str)
        elif isinstance(value, (bool, str)):
            out[key] = value
        elif (number := _number(value)) is not None:
            out[key] = number
    return out


def final_scalars(summary: Mapping[str, Any]) -> dict[str, float]:
    """summary.json's numbers as `final/{key}` scalars (its sections, timing and provenance, left out)."""
    return {f"{FINAL_PREFIX}{key}": number for key, value in summary.items()
            if not isinstance(value, (Mapping, list)) and (number := _number(value)) is not None}


def end_summaries(config: Mapping[str, Any], summary: Mapping[str, Any], tags: Iterable[str],
                  started: float) -> list[Any]:
    """The run end's Summary protos: the HParams experiment (the hyperparameters, and as metrics the final
    scalars and the per-batch `tags`), the session's start (the config's values), the final scalars, and the
    session's end (status success). The experiment names the metrics, so that TensorBoard finds their values
    whether its --logdir is tb/ itself or a folder of runs (it infers them wrongly for the former)."""
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2, summary_v2
    from tensorboard.plugins.hparams.metadata import EXPERIMENT_TAG, SESSION_END_INFO_TAG

    hparams, finals = config_hparams(config), final_scalars(summary)
    kinds = {bool: api_pb2.DATA_TYPE_BOOL, str: api_pb2.DATA_TYPE_STRING, float: api_pb2.DATA_TYPE_FLOAT64}
    experiment = api_pb2.Experiment(
        hparam_infos=[api_pb2.HParamInfo(name=name, type=kinds[type(v)]) for name, v in hparams.items()],
        metric_infos=[api_pb2.MetricInfo(name=api_pb2.MetricName(tag=tag)) for tag in [*finals, *sorted(tags)]])
    end = plugin_data_pb2.SessionEndInfo(status=api_pb2.STATUS_SUCCESS, end_time_secs=time.time())
    return [hparams_summary(EXPERIMENT_TAG, plugin_data_pb2.HParamsPluginData(experiment=experiment)),
            summary_v2.hparams_pb(hparams, start_time_secs=started),
            *(Summary(value=[Summary.Value(tag=tag, simple_value=value)]) for tag, value in finals.items()),
            hparams_summary(SESSION_END_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_end_info=end))]


def hparams_summary(tag: str, data: Any) -> Any:
    """A Summary holding one HParams plugin record (`HParamsPluginData`), as TensorBoard's own writers make it."""
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import metadata

    value = Summary.Value(tag=tag, tensor=metadata.NULL_TENSOR, metadata=metadata.create_summary_metadata(data))
    return Summary(value=[value])


def written_at_the_end(event: Any) -> bool:
    """An event `Board.finish` wrote (a final scalar or the HParams session), which a resume writes anew."""
    return any(value.tag.startswith(FINAL_PREFIX) or value.metadata.plugin_data.plugin_name == HPARAMS_PLUGIN
               for value in event.summary.value)


def truncate_board(log_dir: Path, first_batch: int) -> None:
    """Drop every event of step >= first_batch from the event files in log_dir (on a resume those batches
    run again, as metrics.csv's rows are truncated), and what an earlier end of the run wrote. The kept
    events move to one new file, so every reader (not only those that honour TensorBoard's own
    `purge_step` marker) sees each batch once."""
    files = sorted(log_dir.glob("events.out.tfevents.*"))
    if not files:
        return
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    events = [event for path in files for event in LegacyEventFileLoader(str(path)).Load()
              if not event.HasField("file_version")]
    kept = [event for event in events if event.step < first_batch and not written_at_the_end(event)]
    if len(kept) == len(events):
        return
    writer = EventFileWriter(str(log_dir), filename_suffix=".kept")
    for event in kept:
        writer.add_event(event)
    writer.close()
    (written,) = set(log_dir.glob("events.out.tfevents.*")) - set(files)
    for path in files:
        path.unlink()
    written.rename(log_dir / kept_file_name(files))


def kept_file_name(files: list[Path]) -> str:
    """The name of the file of kept events: readers load a directory's event files in name order, and a
    writer names its file by the second it opens (then host, process id and a per-process counter, compared
    as text), so the kept file takes a second before the earliest file it replaces and sorts before every
    file written from now on, even one opened in the same second by the same process."""
    seconds = [int(m.group(1)) for path in files if (m := re.match(r"events\.out\.tfevents\.(\d+)", path.name))]
    return f"events.out.tfevents.{max(min(seconds, default=1) - 1, 0):010d}.kept"


class Board:
    """The TensorBoard writer of one run. It opens on the first batch it writes, dropping what an earlier
    process wrote from that batch on (`truncate_board`; a resume already does so at its start, `truncate`),
    and writes the run's config as text; `finish` writes the run's end."""

    def __init__(self, run_dir: str | Path, config: Mapping[str, Any]):
        self.log_dir = Path(run_dir) / TB_SUBDIR
        self._config = dict(config)
        self._writer = None
        self._unavailable = False
        self._started = time.time()  # the HParams session's start
        self._tags: set[str] = set()  # every per-batch tag this process wrote: the HParams metrics

    def truncate(self, first_batch: int) -> None:
        """Drop what an earlier process wrote from `first_batch` on, before this process writes anything: a
        resume truncates metrics.csv and events.jsonl at its start, and TensorBoard follows at once (not only
        at the first batch written, which a run stopped again during its start-up never reaches)."""
        if self._writer is None and not self._unavailable:
            try:
                truncate_board(self.log_dir, first_batch)
            except ImportError:
                pass  # no tensorboard package: `_open` warns when the first batch is written

    def add_batch(self, summary: BatchSummary, reward_components: Mapping[str, float] | None = None,
                  first_action_s: float | None = None) -> None:
        opening = self._writer is None
        writer = self._open(summary.batch)
        if writer is None:
            return
        first_action_s = first_action_s if opening else None  # once per process, at its first batch
        for tag, value in batch_scalars(summary, reward_components, first_action_s).items():
            writer.add_scalar(tag, value, global_step=summary.batch)  # float32 simple_value
            self._tags.add(tag)
        writer.flush()

    def _open(self, first_batch: int):
        if self._writer is None and not self._unavailable:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:  # a core dependency; a broken install only loses the scalars
                warnings.warn(f"TensorBoard scalars off: {exc} (pip install tensorboard)", stacklevel=3)
                self._unavailable = True
                return None
            truncate_board(self.log_dir, first_batch)
            self._writer = SummaryWriter(log_dir=str(self.log_dir))
            self._quiet_writer_thread()
            text = json.dumps(self._config, indent=2, default=str)
            self._writer.add_text("config", "```\n" + text + "\n```", global_step=first_batch)
        return self._writer

    def finish(self, summary: Mapping[str, Any]) -> None:
        """The run's end (`end_summaries`), after `close`, in an event file of its own at the last batch's
        step; nothing without the tensorboard package."""
        if self._unavailable:
            return
        try:
            from tensorboard.compat.proto.event_pb2 import Event
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError:
            return
        step = max(int(summary.get("batches") or 0) - 1, 0)
        events = [Event(step=step, wall_time=time.time(), summary=s)
                  for s in end_summaries(self._config, summary, self._tags, self._started)]
        writer = EventFileWriter(str(self.log_dir), filename_suffix=".end")
        self._quiet_writer_thread()
        try:
            for event in events:
                writer.add_event(event)
            writer.close()
        finally:
            self._restore_thread_hook()

    def _quiet_writer_thread(self) -> None:
        """Hold back the traceback of a writer thread's failure (`_writer_thread_hook`) until `_restore_thread_hook`."""
        if threading.excepthook != self._writer_thread_hook:
            self._previous_hook, threading.excepthook = threading.excepthook, self._writer_thread_hook

    def _restore_thread_hook(self) -> None:
        if threading.excepthook == self._writer_thread_hook:
            threading.excepthook = self._previous_hook

    def _writer_thread_hook(self, args) -> None:
        """A failure of the writer's thread (a full disk) is raised again in the run's thread by its next
        write, flush or close, which the run reports in one line: the thread's own traceback is not printed."""
        from tensorboard.summary.writer.event_file_writer import _AsyncWriterThread

        if not isinstance(args.thread, _AsyncWriterThread):
            self._previous_hook(args)

    def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()  # (a write error of its thread is raised here once, not again at a later close)
            finally:
                self._restore_thread_hook()


def open_board(run_dir: str | Path | None, enabled: bool, config: Mapping[str, Any]) -> Board | None:
    """The run's Board, or None (no run directory, or TensorBoard turned off)."""
    if run_dir is None or not enabled:
        return None
    return Board(run_dir, config)
