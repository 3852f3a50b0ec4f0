"""The task table of BEHAVIOUR §6.1: one frozen `TaskSpec` per task.

A TaskSpec names the topology, the host preset (`build_host()` returns a fresh host), the loop's
per-env batch, the task's own max_epochs (which sets dwell and the probation timeout; the spec
itself is the `task_config` handed to SeedSlot / MorphogeneticModel, so it carries `max_epochs`
and `blending_steps`), the learning rates, the default `max_train_batches` and the governor's
random-guess loss. The SGD settings of hosts and seeds live here too. (The LOSS-family reward constants
of BEHAVIOUR §6.1 are the reward's: `rl.rewards.LOSS_TASK_VALUES`.)

    >>> get_task("CIFAR10").batch_size
    512
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from torch import nn

from esper_fx import contracts as C
from hosts.models.cnn import CNNHost
from hosts.models.transformer import TransformerHost
from hosts.seeds.blending import DEFAULT_BLENDING_TOTAL_STEPS

# BEHAVIOUR §1.6 host and seed training: SGD, one optimizer for the host and one per seed
HOST_LR = 0.01
HOST_MOMENTUM = 0.9
HOST_WEIGHT_DECAY = 5e-4
SEED_LR = 0.01
SEED_MOMENTUM = 0.9
SEED_WEIGHT_DECAY = 0.0


@dataclass(frozen=True)
class TaskSpec:
    name: str
    topology: str  # "cnn" | "transformer"
    kind: str  # "classification" | "lm"
    host_factory: Callable[[], nn.Module]
    batch_size: int  # per-env batch in the loop (batch_size_per_env overrides it)
    max_epochs: int  # the task's own: dwell = max(1, int(0.1·max_epochs)), timeout = max(5, ...)
    max_train_batches: int | None  # default training steps per epoch (None = all)
    random_guess_loss: float  # governor R, nats
    num_classes: int | None = None  # classification
    vocab_size: int | None = None  # lm
    block_size: int | None = None  # lm: tokens per item (x and y)
    host_lr: float = HOST_LR
    seed_lr: float = SEED_LR
    blending_steps: int = DEFAULT_BLENDING_TOTAL_STEPS

    def build_host(self) -> nn.Module:
        """A freshly initialised host (uses the global torch RNG, which the loop seeds per env)."""
        return self.host_factory()

    @property
    def num_slots(self) -> int:
        return C.TASK_NUM_SLOTS[self.name]

    @property
    def output_size(self) -> int:
        """Width of the host's output: classes or vocabulary."""
        return self.num_classes if self.kind == "classification" else self.vocab_size


def _tinystories_host() -> nn.Module:
    return TransformerHost()  # the class defaults are the TinyStories host


_CNN_COMMON = dict(topology="cnn", kind="classification", max_epochs=25, max_train_batches=None,
                   random_guess_loss=math.log(10), num_classes=10)

# pytext's host lr stays at the reference 0.01: the host alone reaches val loss 3.08 nats/byte after one
# epoch and 2.30 after 25 (target <= 3.5, BEHAVIOUR §6.7): `python -m hosts.data.difficulty pytext --seeds 0`.
PYTEXT_LR = 0.01
SHAPES16_LR = 0.05  # the tiny host on 16x16 images learns in the few steps of a 12-epoch episode

_TASKS: dict[str, TaskSpec] = {
    "cifar10": TaskSpec(name="cifar10", host_factory=CNNHost.cifar10, batch_size=512, **_CNN_COMMON),
    "cifar10_deep": TaskSpec(name="cifar10_deep", host_factory=CNNHost.cifar10_deep, batch_size=128, **_CNN_COMMON),
    "shapes10": TaskSpec(name="shapes10", host_factory=CNNHost.cifar10, batch_size=512, **_CNN_COMMON),
    # shapes16 (the quickstart): 16x16 shapes10 images, a host that cannot see space, SGD at 0.05 (see
    # docs/LEARNING.md for why growth pays here and the measured gains)
    "shapes16": TaskSpec(name="shapes16", host_factory=CNNHost.pointwise, batch_size=128, host_lr=SHAPES16_LR,
                         seed_lr=SHAPES16_LR, **_CNN_COMMON),
    "tinystories": TaskSpec(
        name="tinystories", topology="transformer", kind="lm", host_factory=_tinystories_host,
        batch_size=32, max_epochs=50, max_train_batches=None, random_guess_loss=math.log(50257),
        vocab_size=50257, block_size=256,
    ),
    "pytext": TaskSpec(
        name="pytext", topology="transformer", kind="lm", host_factory=TransformerHost.pytext,
        batch_size=16, max_epochs=25, max_train_batches=32, random_guess_loss=math.log(256),
        vocab_size=256, block_size=128, host_lr=PYTEXT_LR, seed_lr=PYTEXT_LR,
    ),
}


def task_names() -> tuple[str, ...]:
    return tuple(_TASKS)


def get_task(name: str) -> TaskSpec:
    """The task of that name (case-insensitive); ValueError listing the known tasks otherwise."""
    key = str(getattr(name, "value", name)).lower()
    if key not in _TASKS:
        raise ValueError(f"unknown task {name!r}; available tasks: {list(task_names())}")
    return _TASKS[key]
