"""A run's state between batches, its checkpoints, Ctrl-C and SIGTERM (BEHAVIOUR §7.8, ARCHITECTURE §2).

Between batches a run is `LearnerState` (the JAX pytrees: controller state, observation and reward
normalisers, best controller state, root key; saved with orbax) and `Progress` (plain python: batch
index, episodes, best-state tracking, history; saved in the manifest). Hosts are rebuilt every batch, so
nothing else is needed to resume exactly.

Stopping (`esper_fx.stopping`): SIGTERM takes Ctrl-C's path, and both wait while a batch is written or
a checkpoint written; `interrupted` turns a stop into `Interrupted` once the last written batch is on
disk.
"""

from __future__ import annotations

import dataclasses
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax

from esper_fx.contracts.actions import ACTION_HEADS
from esper_fx.outputs import checkpoint as ckpt
from esper_fx.config import TrainingConfig, flat_view
from esper_fx.outputs.history import ROLLING_WINDOW, BatchSummary, as_summaries
from esper_fx.training.step import init_key
from esper_fx.stopping import deferred_stops, exit_code
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
    """Raised by `run` after SIGINT (Ctrl-C) or SIGTERM once a checkpoint of the last finished batch is on
    disk. `exit_code` is the shell's convention for the signal: 130 for SIGINT, 143 for SIGTERM."""

    def __init__(self, run_dir: str | None, checkpoint: str | None, signum: int = signal.SIGINT):
        self.run_dir = run_dir
        self.checkpoint = checkpoint
        self.signum = int(signum)
        super().__init__(f"interrupted by {signal.Signals(self.signum).name}; checkpoint: {checkpoint}")

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)


def fresh_learner(controller: Any, spec: Any, seed: int, device: jax.Device | None = None) -> LearnerState:
    """A new run's learner state, built by one jitted call: the controller's init (pure, by the protocol)
    and the normalisers compile (or load from the persistent compilation cache) as one function.

    device: where it is built and lives (the policy device); None: JAX's default device. The key is
    committed there, so the computation runs there too, not on the default device."""
    return learner_builder(controller, spec, device)(seed)


def learner_builder(controller: Any, spec: Any, device: jax.Device | None = None) -> Callable[[int], LearnerState]:
    """`seed -> fresh learner` with its jitted build traced once: callers that start many episodes
    (evaluation) keep the builder instead of paying a new trace and compile per `fresh_learner` call."""
    placed = None if device is None else jax.sharding.SingleDeviceSharding(device)
    build = jax.jit(lambda root_key: _fresh_learner(controller, spec, root_key), out_shardings=placed)

    def fresh(seed: int) -> LearnerState:
        key = jax.random.PRNGKey(seed)
        return build(key if device is None else jax.device_put(key, device))

    return fresh


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
    """The facts that fix the controller's shapes: a resume must not change them. `network`: the controller's
    own network's settings (`checkpoint.NETWORK_FIELDS`; none for a controller without a network). (Earlier
    versions recorded PPO's width as `hidden_size` for every controller; such a checkpoint still resumes, its
    width checked by its config's shape fields.)"""
    flat = flat_view(config.to_dict())
    return {
        "state_dim": config.state_dim, "slot_ids": list(config.slot_ids), "num_blueprints": config.num_blueprints,
        "controller": controller.name,
        "network": {name: flat[name] for name in ckpt.NETWORK_FIELDS.get(config.controller_name, ())},
        "action_heads": list(ACTION_HEADS),
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
    """A checkpoint of the last finished batch (Ctrl-C and SIGTERM wait until it is complete)."""
    with deferred_stops():
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


class RunState(NamedTuple):
    """A run's state after its last written batch, and the checkpoint last written (if any)."""

    learner: LearnerState
    progress: Progress
    checkpoint: str | None = None
    checkpoint_batch: int | None = None

    def saved(self, path: Path) -> "RunState":
        return self._replace(checkpoint=str(path), checkpoint_batch=self.progress.next_batch_idx - 1)

    @property
    def on_disk(self) -> bool:
        """The last written batch is already in a checkpoint."""
        return self.checkpoint is not None and self.checkpoint_batch == self.progress.next_batch_idx - 1


def interrupted(checkpoint_dir: Path | None, run_dir: str | None, config: TrainingConfig, controller: Any,
                state: RunState, signum: int) -> Interrupted:
    """After Ctrl-C or SIGTERM: checkpoint the last written batch (if any, if the run writes files, and
    if it is not on disk already). A second signal meanwhile is ignored: the run is stopping."""
    with deferred_stops(reraise=False):
        saved = state.checkpoint if state.on_disk else None
        if saved is None and checkpoint_dir is not None and state.progress.next_batch_idx > 0:
            saved = str(save(checkpoint_dir, config, controller, state.learner, state.progress))
    return Interrupted(run_dir, saved, signum)
