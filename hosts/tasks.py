"""The tasks (BEHAVIOUR §6.1) as the host side uses them: one frozen `TaskSpec` per task.

A TaskSpec is a task's facts (`esper_fx.contracts.tasks.TASKS`: topology, batch, lifecycle horizon, learning
rates, sizes; the one table of them) plus what only the host side can do with them: build the host
(`build_host()` returns a fresh one) and the governor's random-guess loss. The lifecycle horizon its
facts carry sets the seed clock (`hosts.seeds.lifecycle.SeedClock.for_run`). The SGD
settings of hosts and seeds live here too.

    >>> get_task("CIFAR10").batch_size
    512
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from torch import nn

from esper_fx.contracts.tasks import TASKS, TaskFacts, task_facts
from hosts.models.cnn import CNNHost
from hosts.models.transformer import TransformerHost

# BEHAVIOUR §1.6 host and seed training: SGD, one optimizer for the host and one per seed (rates: task facts)
HOST_MOMENTUM = 0.9
HOST_WEIGHT_DECAY = 5e-4
SEED_MOMENTUM = 0.9
SEED_WEIGHT_DECAY = 0.0


@dataclass(frozen=True)
class TaskSpec:
    """A task: `name`, its `facts` (every field of `contracts.tasks.TaskFacts` reads through: `spec.batch_size`)
    and the builder of its host."""

    name: str
    facts: TaskFacts
    host_factory: Callable[[], nn.Module]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "facts":  # (copy and pickle probe before the fields exist)
            raise AttributeError(name)
        return getattr(self.facts, name)

    def build_host(self, width: float = 1.0) -> nn.Module:
        """A freshly initialised host (uses the global torch RNG, which the loop seeds per env); `width`
        multiplies a CNN host's channels (the run's `host_width`)."""
        return self.host_factory() if width == 1.0 else self.host_factory(width=width)

    @property
    def output_size(self) -> int:
        """Width of the host's output: classes or vocabulary."""
        return self.num_classes if self.kind == "classification" else self.vocab_size

    @property
    def random_guess_loss(self) -> float:
        """The governor's R: the loss (nats) of a uniform guess over the outputs."""
        return math.log(self.output_size)


def _tinystories_host() -> nn.Module:
    return TransformerHost()  # the class defaults are the TinyStories host


HOST_FACTORIES: dict[str, Callable[[], nn.Module]] = {
    "cifar10": CNNHost.cifar10, "cifar10_deep": CNNHost.cifar10_deep, "shapes10": CNNHost.cifar10,
    "shapes16": CNNHost.pointwise, "tinystories": _tinystories_host, "pytext": TransformerHost.pytext,
    "fashion_mnist": CNNHost.fashion, "shapes16_spatial": CNNHost.spatial, "shapes16_narrow": CNNHost.narrow,
    "fashion_growth": CNNHost.growth,
}


_SPECS: dict[str, TaskSpec] = {name: TaskSpec(name, facts, HOST_FACTORIES[name]) for name, facts in TASKS.items()}


MIX_SALT = 0x6D1C  # keeps the draw of an episode's task apart from every other use of the env's seed


def mix_task(mix: Sequence[str], env_seed: int) -> TaskSpec:
    """The task an episode of a task mix runs, drawn from its env's seed alone: every arm's episode on one
    evaluation seed runs the same task, so the arms stay paired."""
    index = int(np.random.default_rng([MIX_SALT, int(env_seed)]).integers(len(mix)))
    return get_task(mix[index])


def get_task(name: str) -> TaskSpec:
    """The task of that name (case-insensitive); ValueError listing the known tasks otherwise."""
    task_facts(name)  # the one error message for an unknown task
    return _SPECS[str(getattr(name, "value", name)).lower()]
