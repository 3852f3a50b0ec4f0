"""A run's state between batches, its checkpoints and Ctrl-C (SPEC §7.8, ARCHITECTURE §5).

Between batches a run is `LearnerState` (the JAX pytrees: controller state, observation and reward
normalisers, best controller state, root key; saved with orbax) and `Progress` (plain python: batch
index, episodes, best-state tracking, history; saved in the manifest). Hosts are rebuilt every batch, so
nothing else is needed to resume exactly. `save` finishes a checkpoint even if Ctrl-C arrives while it
writes; `interrupted` turns Ctrl-C into `Interrupted` once the last finished batch is on disk.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import jax

from esper_fx import checkpoint as ckpt
from esper_fx.config import TrainingConfig
from esper_fx.history import ROLLING_WINDOW, BatchSummary, as_summaries
from esper_fx.step import init_key
from rl.normalize import OBS_NORM_MOMENTUM, RewardNormalizer, RunningMeanStd


class LearnerState(NamedTuple):
    """The JAX pytrees of a run: saved with orbax."""

    controller: Any
    obs_rms: RunningMeanStd
    reward_norm: RewardNormalizer
    best_controller: Any
    root_key: jax.Array


@dataclass
class Progress:
    """Python bookkeeping of a run: saved in the manifest."""

    next_batch_idx: int = 0
    episodes_completed: int = 0
    best_avg_acc: float = 0.0
    recent_avg_acc: list[float] = field(default_factory=list)
    history: list[BatchSummary] = field(default_factory=list)
    wall_time_s: float = 0.0


class Interrupted(Exception):
    """Raised by `run` after SIGINT once a checkpoint of the last finished batch is on disk."""

    def __init__(self, run_dir: str | None, checkpoint: str | None):
        self.run_dir = run_dir
        self.checkpoint = checkpoint
        super().__init__(f"interrupted; checkpoint: {checkpoint}")


def fresh_learner(controller: Any, spec: Any, seed: int) -> LearnerState:
    """A new run's learner state, built by one jitted call: the controller's init (pure, by the protocol)
    and the normalisers compile (or load from the persistent compilation cache) as one function."""
    return jax.jit(lambda root_key: _fresh_learner(controller, spec, root_key))(jax.random.PRNGKey(seed))


def _fresh_learner(controller: Any, spec: Any, root_key: jax.Array) -> LearnerState:
    cstate = controller.init(init_key(root_key), spec)
    return LearnerState(
        controller=cstate,
        obs_rms=RunningMeanStd.init(spec.obs_dim, momentum=OBS_NORM_MOMENTUM),
        reward_norm=RewardNormalizer.init(),
        best_controller=cstate,
        root_key=root_key,
    )


def advance(learner: LearnerState, progress: Progress, summary: BatchSummary) -> tuple[LearnerState, Progress]:
    """Best-state tracking (strictly better rolling accuracy) and the new bookkeeping after a batch."""
    recent = (progress.recent_avg_acc + [summary.avg_accuracy])[-ROLLING_WINDOW:]
    best = progress.best_avg_acc
    if summary.rolling_avg_accuracy > best:
        best = summary.rolling_avg_accuracy
        learner = learner._replace(best_controller=learner.controller)
    progress = dataclasses.replace(
        progress, next_batch_idx=summary.batch + 1, episodes_completed=summary.episodes_completed,
        best_avg_acc=best, recent_avg_acc=recent, history=progress.history + [summary],
        wall_time_s=progress.wall_time_s + summary.wall_time_s,
    )
    return learner, progress


# ----------------------------------------------------------------------------------------------
# checkpoints
# ----------------------------------------------------------------------------------------------


def architecture(config: TrainingConfig, controller: Any) -> dict[str, Any]:
    """The facts that fix the controller's shapes: a resume must not change them."""
    return {
        "state_dim": config.state_dim, "slot_ids": list(config.slot_ids), "num_blueprints": config.num_blueprints,
        "controller": controller.name, "hidden_size": config.ppo.lstm_hidden_dim,
    }


def manifest_for(config: TrainingConfig, controller: Any, progress: Progress) -> dict[str, Any]:
    return {
        "config": config.to_dict(),
        "next_batch_idx": progress.next_batch_idx,
        "episodes_completed": progress.episodes_completed,
        "best_avg_acc": progress.best_avg_acc,
        "recent_avg_acc": progress.recent_avg_acc,
        "history": [h.to_dict() for h in progress.history],
        "wall_time_s": progress.wall_time_s,
        "architecture": architecture(config, controller),
    }


def save(checkpoint_dir: Path, config: TrainingConfig, controller: Any, learner: LearnerState, progress: Progress,
         *, final: bool = False) -> Path:
    """A checkpoint of the last finished batch (Ctrl-C waits until it is complete)."""
    with _SigintDeferred():
        return ckpt.save_checkpoint(checkpoint_dir, progress.next_batch_idx - 1, learner._asdict(),
                                    manifest_for(config, controller, progress), final=final)


def restore(config: TrainingConfig, controller: Any, template: LearnerState
            ) -> tuple[LearnerState, Progress, dict[str, Any]]:
    """The learner and progress of `config.resume_path`, checked against this run's shapes."""
    manifest = ckpt.read_manifest(config.resume_path)
    ckpt.check_compatible(manifest, config.to_dict(), architecture(config, controller))
    trees = ckpt.load_trees(manifest, template._asdict())
    progress = Progress(
        next_batch_idx=int(manifest["next_batch_idx"]), episodes_completed=int(manifest["episodes_completed"]),
        best_avg_acc=float(manifest["best_avg_acc"]), recent_avg_acc=list(manifest["recent_avg_acc"]),
        history=as_summaries(manifest["history"]), wall_time_s=float(manifest.get("wall_time_s", 0.0)),
    )
    return LearnerState(**trees), progress, manifest


# ----------------------------------------------------------------------------------------------
# Ctrl-C
# ----------------------------------------------------------------------------------------------


def interrupted(checkpoint_dir: Path | None, run_dir: str | None, config: TrainingConfig, controller: Any,
                learner: LearnerState, progress: Progress) -> Interrupted:
    """After Ctrl-C: checkpoint the last finished batch (if any, and if the run writes files)."""
    saved = None
    if checkpoint_dir is not None and progress.next_batch_idx > 0:
        saved = save(checkpoint_dir, config, controller, learner, progress)
    return Interrupted(run_dir, str(saved) if saved else None)


class _SigintDeferred:
    """Finish a checkpoint write before honouring Ctrl-C (main thread only)."""

    def __enter__(self):
        self._old = None
        self._hit = False
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame):
        self._hit = True

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
        if self._hit and exc[0] is None:
            raise KeyboardInterrupt
        return False
