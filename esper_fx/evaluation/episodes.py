"""Evaluation episodes: one (arm, seed) at a time, nothing learned (LEARNING.md §3).

An evaluation seed fixes everything that is not the controller: the host's initialisation, the data order
and the augmentation (env 0 of batch 0 under `config.seed = seed`). Every arm runs on the same seeds, so
arms are compared seed by seed. Each (arm, seed) has its own action stream, derived from the seed and the
arm's name (`esper_fx.training.step.act_key`).

    arm = Arm.build("wait", config)                        # or a trained policy: Arm.trained(...)
    episode = arm.run(seed)                                # an `Episode`: accuracies, seeds, params
    episodes = run_arm(arm, seeds, on_episode=print)

The metric of an episode is its validation accuracy averaged over the last `LAST_EPOCHS` epochs (the
epoch-to-epoch swing of a small host is several pp), together with the parameters it added.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from esper_fx.outputs import checkpoint as ckpt
from esper_fx.controllers import protocol as ctl
from esper_fx.controllers import registry
from esper_fx.config import TrainingConfig
from esper_fx.contracts.actions import growth_name
from esper_fx.contracts.events import EventType
from esper_fx.training.epoch import BatchTally, Runner, StepFunctions, resolve_reward_fn, run_epoch
from esper_fx.training.pools import build_pool
from esper_fx.training.run_state import LearnerState, fresh_learner, learner_builder
from esper_fx.outputs.console import Console
from rl.normalize import RunningMeanStd

LAST_EPOCHS = 3  # the metric: validation accuracy averaged over the last 3 epochs


@dataclass(frozen=True)
class Episode:
    """One evaluation episode of one arm on one seed."""

    arm: str
    seed: int
    val_accs: tuple[float, ...]  # per epoch, pp
    params_added: float  # seed parameters held at the end, fossils included
    germinated: int
    fossilized: int
    culls: tuple[str, ...]  # "slot@epoch: reason" of every seed culled, in order (`culls`)
    fossils: tuple[str, ...]  # "slot=blueprint" of the seeds fossilized at the end (the grown architecture)
    wall_s: float
    params: float = float("nan")  # host and seed parameters at the end
    flops: dict[str, float] = field(default_factory=dict)  # hosts.env.compute.FLOP_FIELDS; {} when not counted
    compute_units: dict[str, float] = field(default_factory=dict)  # hosts.env.compute.ComputeMeter.units
    task: str = ""  # the task the episode ran (a task mix draws it from the seed)
    germinations: tuple[str, ...] = ()  # "slot=blueprint/blend@epoch" of every seed germinated, in order

    @property
    def culled(self) -> int:
        return len(self.culls)

    @property
    def training_flops(self) -> float:
        """FLOPs of the episode's training steps (host and seeds; validation and counterfactuals apart)."""
        return float(self.flops.get("training_flops", float("nan")))

    @property
    def accuracy(self) -> float:
        """Mean validation accuracy of the last LAST_EPOCHS epochs, pp."""
        return float(np.mean(self.val_accs[-LAST_EPOCHS:]))

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "seed": self.seed, "accuracy": self.accuracy, "val_accs": list(self.val_accs),
                "params_added": self.params_added, "germinated": self.germinated, "fossilized": self.fossilized,
                "culled": self.culled, "culls": list(self.culls), "fossils": list(self.fossils),
                "wall_s": self.wall_s, "params": self.params,
                "training_flops": self.training_flops, "flops": dict(self.flops),
                "compute_units": dict(self.compute_units), "task": self.task,
                "germinations": list(self.germinations)}


def culls(events: Sequence[Any]) -> tuple[str, ...]:
    """The episode's culls from its events, "slot@epoch: reason": `controller` when the controller chose it,
    else the lifecycle's (`negative_counterfactual`, `probation_timeout`) or the governor's (`governor_rollback`)."""
    return tuple(f"{e.slot_id}@{e.epoch}: {e.data.get('reason') or 'controller'}"
                 for e in events if e.event_type == EventType.SEED_CULLED)


def germinations(events: Sequence[Any]) -> tuple[str, ...]:
    """The episode's growth decisions from its events, each named as a fixed schedule is
    (`contracts.actions.growth_name`: "slot=blueprint/blend@epoch", the tempo after the blend unless standard)."""
    return tuple(growth_name(e.slot_id, e.data.get("blueprint"), e.data.get("blend"), e.epoch, e.data.get("tempo"))
                 for e in events if e.event_type == EventType.SEED_GERMINATED)


class Policy(NamedTuple):
    """What a trained learning controller acts with: its state and the observation statistics."""

    controller_state: Any
    obs_rms: RunningMeanStd


def episode_config(config: TrainingConfig, seed: int, **overrides: Any) -> TrainingConfig:
    """One env, one episode, seeded with `seed`, in this process; nothing written to disk."""
    return config.replace(seed=int(seed), n_envs=1, n_episodes=1, num_minibatches=1, run_dir=None,
                          resume_path=None, env_workers=0, ray_address=None, **overrides)


@dataclass
class Arm:
    """A controller ready to run evaluation episodes; its jitted step is built once for every seed."""

    name: str
    config: TrainingConfig
    controller: ctl.Controller
    policy: Policy | None = None
    per_seed: Callable[[int], dict[str, Any]] | None = None  # config overrides of one seed (static_final)
    _step: tuple | None = field(default=None, repr=False)  # (training.epoch.StepFunctions, learner builder), built once

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (an evaluation episode as a Ray task, `esper_fx.evaluation.ray_tasks`) without the jitted step: it is
        rebuilt where the arm runs."""
        return {**self.__dict__, "_step": None}

    @classmethod
    def build(cls, name: str, config: TrainingConfig, controller: str | ctl.Controller | None = None,
              **kwargs: Any) -> "Arm":
        """A registered (or given) non-learning controller under `config`."""
        spec = ctl.ControllerSpec.from_config(episode_config(config, config.seed))
        bundle = registry.build(controller if controller is not None else name, spec)
        if bundle.learns:
            raise ValueError(f"arm {name!r}: a learning controller is evaluated through Arm.trained")
        return cls(name, config, bundle, **kwargs)

    @classmethod
    def trained(cls, name: str, config: TrainingConfig, policy: Policy, *, greedy: bool = True) -> "Arm":
        """A trained learning controller (built from `config`, the training configuration), frozen
        (`protocol.frozen`: greedy, or sampling as in training)."""
        bundle = registry.build(config.controller_name, ctl.ControllerSpec.from_config(config))
        return cls(name, config, ctl.frozen(bundle, greedy=greedy), policy=policy)

    def run(self, seed: int) -> Episode:
        """One episode on `seed`."""
        started = time.perf_counter()
        overrides = self.per_seed(seed) if self.per_seed is not None else {}
        config = episode_config(self.config, seed, **overrides)
        runner = self._runner(config)
        learner = runner.to_device(self._learner(config, runner.spec))
        episode = runner.to_device(runner.episode_fn(learner.reward_norm, 1))
        record = BatchTally.start(runner.spec)
        signals = runner.pool.begin(0, 1)
        for t in range(1, config.max_epochs + 1):
            episode, signals = run_epoch(runner, learner, episode, signals, 0, t, record)
        result = runner.pool.episode_results()[0]
        return Episode(arm=self.name, seed=int(seed), val_accs=tuple(result.val_accs),
                       params_added=float(record.seed_params[0]), germinated=result.seeds_created,
                       fossilized=result.seeds_fossilized, culls=culls(record.events), fossils=tuple(result.fossils),
                       wall_s=time.perf_counter() - started,
                       params=float(record.host_params[0] + record.seed_params[0]),
                       flops={k: float(v) for k, v in result.flops.items()}, compute_units=dict(result.compute_units),
                       task=result.task, germinations=germinations(record.events))

    def _runner(self, config: TrainingConfig) -> Runner:
        """A runner over a fresh pool for one episode; the jitted step is built once per arm."""
        spec = ctl.ControllerSpec.from_config(config)
        if self._step is None:
            self._step = (StepFunctions.build(config, spec, self.controller, resolve_reward_fn(config, None)),
                          learner_builder(self.controller, spec))
        return Runner.build(config, spec, self.controller, None, build_pool(config),
                            Console(1, config.max_epochs, quiet=True), self._step[0])

    def _learner(self, config: TrainingConfig, spec: ctl.ControllerSpec) -> LearnerState:
        learner = self._step[1](config.seed)  # traced once per arm, like the step (built by _runner)
        if self.policy is None:
            return learner
        return learner._replace(controller=self.policy.controller_state, obs_rms=self.policy.obs_rms,
                                best_controller=self.policy.controller_state)


def run_arm(arm: Arm, seeds: Sequence[int], on_episode: Callable[[Episode], None] | None = None) -> list[Episode]:
    """Every seed in order; `on_episode` sees each finished episode (progress)."""
    episodes = []
    for seed in seeds:
        episode = arm.run(seed)
        episodes.append(episode)
        if on_episode is not None:
            on_episode(episode)
    return episodes


def load_policy(path: str | os.PathLike) -> tuple[TrainingConfig, Policy]:
    """The training configuration and the final policy of a run directory (or one of its checkpoints)."""
    manifest = ckpt.read_manifest(Path(path))
    ckpt.check_heads(manifest)
    config = TrainingConfig.from_saved(manifest["config"])
    spec = ctl.ControllerSpec.from_config(config)
    bundle = registry.build(config.controller_name, spec)
    if not bundle.learns:
        raise ValueError(f"{path}: the run's controller {bundle.name!r} does not learn; there is no policy to load")
    template = fresh_learner(bundle, spec, config.seed)
    trees = ckpt.load_trees(manifest, template._asdict())
    learner = LearnerState(**trees)
    return config, Policy(learner.controller, learner.obs_rms)
