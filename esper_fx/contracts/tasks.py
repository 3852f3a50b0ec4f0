"""Every fact of every task, one table: hosts.tasks adds the host builders, the reward reads the loss scale,
the config reads the topology and the slot-head size; the learning-rate schedules and data roots."""

from __future__ import annotations

from typing import Mapping, NamedTuple

from esper_fx.contracts.slots import format_slot_id


class TaskFacts(NamedTuple):
    """One task. The host's output is `num_classes` wide (classification) or `vocab_size` (a language model)."""

    topology: str  # "cnn" | "transformer": which blueprints fit its slots
    kind: str  # "classification" | "lm"
    num_slots: int  # S: the host's injection points (the slot head's size)
    batch_size: int  # the per-env training batch (batch_size_per_env overrides it)
    lifecycle_horizon: int  # scales the seed clocks: dwell max(1, int(0.1·h)), probation timeout max(5, int(0.1·h))
    max_train_batches: int | None  # default training steps per epoch (None: the whole split)
    num_classes: int | None = None  # classification
    vocab_size: int | None = None  # lm
    block_size: int | None = None  # lm: tokens per item (x and y)
    host_lr: float = 0.01  # SGD learning rate of the host
    seed_lr: float = 0.01  # SGD learning rate of each seed
    # the LOSS reward family's scale: the typical per-epoch loss change, the loss of an untrained and of a
    # well-trained host (the terminal score maps the first to 0 and the second to 1), the compute rent weight
    typical_loss_delta_std: float = 0.05
    baseline_loss: float = 2.3
    target_loss: float = 0.3
    compute_rent_weight: float = 0.05
    data: str | None = None  # the task whose dataset it reads (a host variant on another task's data); None: its own


_CNN_TASK = dict(topology="cnn", kind="classification", num_slots=3, lifecycle_horizon=25, max_train_batches=None,
                 num_classes=10)
# shapes16 (the quickstart): 16x16 shapes10 images and a host that cannot see space, learning with SGD at
# 0.05 in the few steps of a 12-epoch episode (docs/LEARNING.md). pytext's host keeps the reference's
# 0.01: `python -m hosts.data.difficulty pytext --seeds 0` shows it learns (val loss 3.08 nats/byte after
# one epoch, 2.30 after 25).
TASKS: Mapping[str, TaskFacts] = {
    "cifar10": TaskFacts(batch_size=512, **_CNN_TASK),
    "cifar10_deep": TaskFacts(batch_size=128, **{**_CNN_TASK, "num_slots": 5}),
    "tinystories": TaskFacts(topology="transformer", kind="lm", num_slots=3, batch_size=32, lifecycle_horizon=50,
                             max_train_batches=None, vocab_size=50257, block_size=256,
                             typical_loss_delta_std=0.15, baseline_loss=10.8, target_loss=3.5,
                             compute_rent_weight=0.01),
    "shapes10": TaskFacts(batch_size=512, **_CNN_TASK),
    "pytext": TaskFacts(topology="transformer", kind="lm", num_slots=3, batch_size=16, lifecycle_horizon=25,
                        max_train_batches=32, vocab_size=256, block_size=128, typical_loss_delta_std=0.15,
                        baseline_loss=5.5, target_loss=1.5, compute_rent_weight=0.01),
    "shapes16": TaskFacts(batch_size=128, host_lr=0.05, seed_lr=0.05, **_CNN_TASK),
    # fashion_mnist: the real Fashion-MNIST files and a small 3x3 host (1 grey channel) at SGD 0.02, whose
    # 12-epoch accuracy is steadier than at 0.05 (`python -m hosts.data.difficulty fashion_mnist`)
    "fashion_mnist": TaskFacts(batch_size=128, host_lr=0.02, seed_lr=0.02, **_CNN_TASK),
    # fashion_growth: Fashion-MNIST's files and a host built to be grown (three 3x3 blocks of 16 channels, each
    # after the first mapping its width to itself, so a host-initialised seed copies one; docs/LEARNING.md §11),
    # at SGD 0.05 for episodes of thousands of steps
    "fashion_growth": TaskFacts(batch_size=128, host_lr=0.05, seed_lr=0.05, data="fashion_mnist", **_CNN_TASK),
    # host variants on shapes16's images, for a task mix (TrainingConfig.task_mix; docs/LEARNING.md): a host
    # that sees space (3x3 blocks of 16), and a narrow one (3x3 blocks of 4 channels)
    "shapes16_spatial": TaskFacts(batch_size=128, host_lr=0.05, seed_lr=0.05, data="shapes16", **_CNN_TASK),
    "shapes16_narrow": TaskFacts(batch_size=128, host_lr=0.05, seed_lr=0.05, data="shapes16", **_CNN_TASK),
}
# Host learning-rate schedules within an episode (hosts.env.lr_schedule): "constant" keeps the task's lr;
# "cosine" decays it to zero over the episode's training steps (or over lr_schedule_steps); "wsd" warms up,
# holds, then decays linearly to zero over the last fraction of them.
LR_SCHEDULES: tuple[str, ...] = ("constant", "cosine", "wsd")

# The run's default data_root (TrainingConfig.data_root). A task with a default place of its own reads its
# files from there while data_root is left at this value: Fashion-MNIST from where Debian's and Ubuntu's
# package installs its four IDX files.
DEFAULT_DATA_ROOT = "./data"
FASHION_MNIST_PACKAGE = "dataset-fashion-mnist"
FASHION_MNIST_DATA_ROOT = "/usr/share/datasets/fashion-mnist"
TASK_NAMES: tuple[str, ...] = tuple(TASKS)


def task_facts(task: str) -> TaskFacts:
    """The facts of a task (case-insensitive; a config's Task enum works); ValueError listing the tasks."""
    key = str(getattr(task, "value", task)).lower()
    if key not in TASKS:
        raise ValueError(f"unknown task {task!r}; available tasks: {list(TASK_NAMES)}")
    return TASKS[key]


def task_data_name(task: str) -> str:
    """The task whose dataset `task` reads: its own, or the one a host variant names."""
    key = str(getattr(task, "value", task)).lower()
    return task_facts(key).data or key


# what the tasks of one mix share, so that one dataset, one controller and one episode shape serve them all
MIX_SHARED_FACTS = ("topology", "kind", "num_slots", "num_classes", "vocab_size", "block_size", "batch_size",
                    "max_train_batches", "lifecycle_horizon", "typical_loss_delta_std", "baseline_loss",
                    "target_loss", "compute_rent_weight")


def mix_mismatch(task: str, variant: str) -> str | None:
    """Why `variant` cannot join a task mix led by `task` (a different dataset, or a fact that differs), or None."""
    if task_data_name(variant) != task_data_name(task):
        return f"it reads {task_data_name(variant)!r}'s data, not {task_data_name(task)!r}'s"
    a, b = task_facts(task), task_facts(variant)
    differ = [name for name in MIX_SHARED_FACTS if getattr(a, name) != getattr(b, name)]
    return f"its {', '.join(differ)} differ{'s' * (len(differ) == 1)}" if differ else None


def task_slot_ids(task: str) -> tuple[str, ...]:
    """Canonical slot ids of a task's host injection points (all hosts use row 0)."""
    return tuple(format_slot_id(0, i) for i in range(task_facts(task).num_slots))
