"""What crosses between the PyTorch side (`hosts`) and the JAX side (`rl`), and nothing else.

This module imports neither torch nor jax. It holds the seed stages and their transitions, slot ids,
the action heads, ops, blends and blueprint menus, the table of task facts (both sides and the config
read it), the observation layout, the signals field list, the env pool's interface (`EpisodePool`), the
event types, and the few lifecycle numbers that both the host lifecycle and the reward read. A constant
only one side reads lives on that side (`hosts/...`, `rl/...`).
"""

from __future__ import annotations

import math
import re
from enum import IntEnum, StrEnum
from typing import Any, Iterable, Mapping, NamedTuple, Protocol, runtime_checkable

# --------------------------------------------------------------------------------------
# BEHAVIOUR §1.1 Seed stages
# --------------------------------------------------------------------------------------


class SeedStage(IntEnum):
    """Lifecycle stage of a seed. The integer values appear in observations."""

    UNKNOWN = 0
    DORMANT = 1
    GERMINATED = 2
    TRAINING = 3
    BLENDING = 4
    # 5 is reserved (former SHADOWING) and never produced.
    PROBATIONARY = 6
    FOSSILIZED = 7
    CULLED = 8
    EMBARGOED = 9
    RESETTING = 10


ACTIVE_STAGES = frozenset(
    {SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY, SeedStage.FOSSILIZED}
)
FAILURE_STAGES = frozenset({SeedStage.CULLED, SeedStage.EMBARGOED, SeedStage.RESETTING})
FOSSILIZABLE_STAGES = frozenset({SeedStage.PROBATIONARY})
CULLABLE_STAGES = frozenset(
    {SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY}
)

# BEHAVIOUR §1.2 Legal transitions, targets in the listed order.
VALID_TRANSITIONS: Mapping[SeedStage, tuple[SeedStage, ...]] = {
    SeedStage.UNKNOWN: (SeedStage.DORMANT,),
    SeedStage.DORMANT: (SeedStage.GERMINATED,),
    SeedStage.GERMINATED: (SeedStage.TRAINING, SeedStage.CULLED),
    SeedStage.TRAINING: (SeedStage.BLENDING, SeedStage.CULLED),
    SeedStage.BLENDING: (SeedStage.PROBATIONARY, SeedStage.CULLED),
    SeedStage.PROBATIONARY: (SeedStage.FOSSILIZED, SeedStage.CULLED),
    SeedStage.FOSSILIZED: (),
    SeedStage.CULLED: (SeedStage.EMBARGOED,),
    SeedStage.EMBARGOED: (SeedStage.RESETTING,),
    SeedStage.RESETTING: (SeedStage.DORMANT,),
}


def is_valid_transition(source: SeedStage, target: SeedStage) -> bool:
    """True iff `target` is listed for `source` in the transition table."""
    return SeedStage(target) in VALID_TRANSITIONS[SeedStage(source)]


def next_stage(source: SeedStage) -> SeedStage | None:
    """The first listed target of `source` that is not a failure stage ("advance without a target")."""
    for target in VALID_TRANSITIONS[SeedStage(source)]:
        if target not in FAILURE_STAGES:
            return target
    return None


# BEHAVIOUR §1.3 Gate levels: target stage -> gate number (anything else maps to G0).
GATE_FOR_TARGET: Mapping[SeedStage, int] = {
    SeedStage.GERMINATED: 0,
    SeedStage.TRAINING: 1,
    SeedStage.BLENDING: 2,
    SeedStage.PROBATIONARY: 3,
    SeedStage.FOSSILIZED: 5,
}


def gate_for_target(target: SeedStage) -> int:
    return GATE_FOR_TARGET.get(SeedStage(target), 0)


# --------------------------------------------------------------------------------------
# BEHAVIOUR §1.4 Slot ids
# --------------------------------------------------------------------------------------

_SLOT_RE = re.compile(r"^r(\d+)c(\d+)$")
LEGACY_SLOT_NAMES = ("early", "mid", "late")


class SlotIdError(ValueError):
    """A malformed slot id or a negative row/column."""


def format_slot_id(row: int, col: int) -> str:
    if int(row) < 0 or int(col) < 0:
        raise SlotIdError(f"slot row and column must be non-negative (got row={row}, col={col})")
    return f"r{int(row)}c{int(col)}"


def parse_slot_id(slot_id: str) -> tuple[int, int]:
    if not isinstance(slot_id, str):
        raise SlotIdError(f"slot id must be a string like 'r0c1' (got {slot_id!r})")
    if slot_id in LEGACY_SLOT_NAMES:
        raise SlotIdError(
            f"slot name {slot_id!r} is no longer supported: use canonical ids such as "
            "'r0c0', 'r0c1', 'r0c2' (early/mid/late were removed)"
        )
    match = _SLOT_RE.match(slot_id)
    if match is None:
        raise SlotIdError(f"invalid slot id {slot_id!r}: expected the form 'r{{row}}c{{col}}', e.g. 'r0c0'")
    return int(match.group(1)), int(match.group(2))


def slot_sort_key(slot_id: str) -> tuple[int, int]:
    return parse_slot_id(slot_id)


def sort_slot_ids(slot_ids: Iterable[str]) -> list[str]:
    """Canonical (row-major, numeric) order; this order fixes slot-head indices."""
    return sorted(slot_ids, key=slot_sort_key)


# --------------------------------------------------------------------------------------
# BEHAVIOUR §1.5 Action heads, ops, blends, blueprint menus
# --------------------------------------------------------------------------------------

ACTION_HEADS: tuple[str, ...] = ("slot", "blueprint", "blend", "op", "tempo")
HEAD_SLOT, HEAD_BLUEPRINT, HEAD_BLEND, HEAD_OP, HEAD_TEMPO = range(5)
NUM_HEADS = len(ACTION_HEADS)


class LifecycleOp(IntEnum):
    WAIT = 0
    GERMINATE = 1
    CULL = 2
    FOSSILIZE = 3


class BlendAlgorithm(IntEnum):
    LINEAR = 0
    SIGMOID = 1
    GATED = 2


BLEND_NAMES: tuple[str, ...] = ("linear", "sigmoid", "gated")
NUM_BLENDS = len(BLEND_NAMES)
NUM_OPS = len(LifecycleOp)
# the blend's tempo (BEHAVIOUR §2.14): how long its ramp lasts, chosen with GERMINATE like the blend
TEMPO_NAMES: tuple[str, ...] = ("fast", "standard", "slow")
NUM_TEMPOS = len(TEMPO_NAMES)
DEFAULT_TEMPO = TEMPO_NAMES.index("standard")

def growth_name(slot: str, blueprint: str, blend: str, epoch: int, tempo: str | None = None) -> str:
    """One growth decision as tables and logs name it: "slot=blueprint/blend@epoch", with the blend's tempo
    when it is not the standard one ("slot=blueprint/blend:fast@epoch"; a germination, or a fixed schedule's)."""
    pace = f":{tempo}" if tempo not in (None, "standard") else ""
    return f"{slot}={blueprint}/{blend}{pace}@{epoch}"

TOPOLOGIES: tuple[str, ...] = ("cnn", "transformer")

# Every registered blueprint per topology (BEHAVIOUR §4.3, §4.4). hosts.seeds.blueprints registers exactly these.
BLUEPRINT_NAMES: Mapping[str, tuple[str, ...]] = {
    "cnn": (
        "noop", "norm", "attention", "depthwise", "bottleneck", "conv_small", "conv_light", "conv_heavy",
    ),
    "transformer": (
        "noop", "norm", "lora", "lora_large", "attention", "flex_attention", "mlp_small", "mlp",
    ),
}

# Default blueprint menus (index 0 is always noop, and noop is always masked). [fix] one per topology.
BLUEPRINT_MENUS: Mapping[str, tuple[str, ...]] = {
    "cnn": ("noop", "conv_light", "attention", "norm", "depthwise"),
    "transformer": ("noop", "lora", "attention", "norm", "mlp_small"),
}

# --------------------------------------------------------------------------------------
# Tasks: every fact of every task, one table (hosts.tasks adds the host builders; the reward reads the
# loss scale; the config reads the topology and the slot-head size)
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# BEHAVIOUR §8 Observation layout
# --------------------------------------------------------------------------------------

NUM_BASE_FEATURES = 23
SLOT_BLOCK_FIXED = 4  # is_active, stage, alpha, improvement; then the B-wide blueprint one-hot, the tempo one-hot
TELEMETRY_BLOCK = 10
DEFAULT_NUM_BLUEPRINTS = 5

# Base feature indices (BEHAVIOUR §8.2).
OBS_EPOCH = 0
OBS_GLOBAL_STEP = 1
OBS_TRAIN_LOSS = 2
OBS_VAL_LOSS = 3
OBS_LOSS_DELTA = 4
OBS_TRAIN_ACC = 5
OBS_VAL_ACC = 6
OBS_ACC_DELTA = 7
OBS_PLATEAU_EPOCHS = 8
OBS_BEST_VAL_ACC = 9
OBS_BEST_VAL_LOSS = 10
OBS_LOSS_HISTORY = slice(11, 16)  # last <= 5 val losses, oldest first, left-padded with 0
OBS_ACC_HISTORY = slice(16, 21)  # last <= 5 val accuracies, oldest first, left-padded with 0
OBS_TOTAL_PARAMS = 21
OBS_SEED_UTILIZATION = 22

# Offsets within a slot block (BEHAVIOUR §8.3).
SLOT_IS_ACTIVE = 0
SLOT_STAGE = 1
SLOT_ALPHA = 2
SLOT_IMPROVEMENT = 3
SLOT_BLUEPRINT_ONEHOT = 4  # ... 4 + B - 1, then the tempo one-hot at 4 + B ... 4 + B + 2

# Offsets within a telemetry block (BEHAVIOUR §8.4).
TEL_GRAD_NORM = 0
TEL_GRAD_HEALTH = 1
TEL_VANISHING = 2
TEL_EXPLODING = 3
TEL_EPOCHS_IN_STAGE = 4
TEL_ACCURACY = 5
TEL_ACCURACY_DELTA = 6
TEL_STAGE = 7
TEL_ALPHA = 8
TEL_TEMPORAL = 9


def slot_block_size(num_blueprints: int = DEFAULT_NUM_BLUEPRINTS) -> int:
    return SLOT_BLOCK_FIXED + num_blueprints + NUM_TEMPOS


def slot_tempo_onehot(num_blueprints: int = DEFAULT_NUM_BLUEPRINTS) -> int:
    """The offset of the tempo one-hot within a slot block."""
    return SLOT_BLOCK_FIXED + num_blueprints


def obs_dim(num_slots: int, telemetry: bool = True, num_blueprints: int = DEFAULT_NUM_BLUEPRINTS) -> int:
    """D = 23 + (4 + B + 3)·S + 10·S·[telemetry]; 89 for the cifar10 defaults."""
    if num_slots < 1:
        raise ValueError(f"num_slots must be >= 1 (got {num_slots})")
    dim = NUM_BASE_FEATURES + slot_block_size(num_blueprints) * num_slots
    return dim + (TELEMETRY_BLOCK * num_slots if telemetry else 0)


def slot_block_start(slot_index: int, num_blueprints: int = DEFAULT_NUM_BLUEPRINTS) -> int:
    return NUM_BASE_FEATURES + slot_index * slot_block_size(num_blueprints)


def telemetry_block_start(
    slot_index: int, num_slots: int, num_blueprints: int = DEFAULT_NUM_BLUEPRINTS
) -> int:
    return NUM_BASE_FEATURES + num_slots * slot_block_size(num_blueprints) + slot_index * TELEMETRY_BLOCK


# --------------------------------------------------------------------------------------
# BEHAVIOUR §7–§8 The signals pytree: the single host -> controller contract
# --------------------------------------------------------------------------------------
# Every field is a contiguous, freshly allocated device tensor of dtype float32, int32 or bool.
# Shapes: E = envs, S = slot-head size (every host injection point, canonical order),
# B = blueprint-menu size, D = observation size. "None" values (no contribution measured, no
# germination accuracy) are encoded as a False *_valid flag with the value 0.0.

SIGNAL_FIELDS: Mapping[str, tuple[str, str]] = {
    # observation and masks (BEHAVIOUR §8, §9)
    "obs": ("[E, D]", "float32"),  # raw (un-normalised) observation
    "mask_slot": ("[E, S]", "bool"),
    "mask_blueprint": ("[E, B]", "bool"),
    "mask_blend": ("[E, 3]", "bool"),
    "mask_op": ("[E, 4]", "bool"),
    "mask_tempo": ("[E, 3]", "bool"),  # the tempos a seed germinated now may take (BEHAVIOUR §2.14)
    "mask_slot_op": ("[E, 4, S]", "bool"),  # [fix] the slots each op can act on (op-major)
    # per env
    "epoch": ("[E]", "int32"),  # t, 1..T
    "max_epochs": ("[E]", "int32"),  # T (terminal iff epoch == max_epochs)
    "val_acc": ("[E]", "float32"),  # pp
    "val_loss": ("[E]", "float32"),
    "train_acc": ("[E]", "float32"),  # pp
    "train_loss": ("[E]", "float32"),
    "acc_delta": ("[E]", "float32"),  # tracker accuracy_delta, pp
    "loss_delta": ("[E]", "float32"),  # tracker prev_val_loss - val_loss; +inf at t = 1
    "host_max_acc": ("[E]", "float32"),  # pp
    "plateau_epochs": ("[E]", "int32"),
    "host_stabilized": ("[E]", "int32"),  # 0 / 1 latch
    "host_params": ("[E]", "float32"),
    "seed_params": ("[E]", "float32"),  # active_seed_params: all slots holding a seed, fossils included
    "seed_flop_share": ("[E]", "float32"),  # active seeds' training FLOPs per step / the host's (0: no count)
    "num_contributing_fossilized": ("[E]", "int32"),
    "total_seeds": ("[E]", "int32"),
    "panic": ("[E]", "bool"),  # governor panicked (and rolled back) this epoch: reward gets -10
    "auto_culls": ("[E]", "int32"),  # seeds the last lifecycle step (end of the previous epoch) auto-culled
    # per slot
    "slot_enabled": ("[E, S]", "bool"),
    "slot_occupied": ("[E, S]", "bool"),  # holds a seed (state not None, stage not DORMANT)
    "slot_stage": ("[E, S]", "int32"),  # SeedStage value, 0 when empty
    "slot_previous_stage": ("[E, S]", "int32"),
    "slot_eis": ("[E, S]", "int32"),  # epochs_in_current_stage
    "slot_age": ("[E, S]", "int32"),  # epochs_total
    "slot_alpha": ("[E, S]", "float32"),
    "slot_blueprint": ("[E, S]", "int32"),  # menu index, -1 when empty or not in the menu
    "slot_total_improvement": ("[E, S]", "float32"),  # I, pp
    "slot_stage_improvement": ("[E, S]", "float32"),  # improvement_since_stage_start, pp
    "slot_contribution": ("[E, S]", "float32"),  # c this epoch (0.0 when invalid)
    "slot_contribution_valid": ("[E, S]", "bool"),  # c is not None
    "slot_acc_at_germination": ("[E, S]", "float32"),
    "slot_acc_at_germination_valid": ("[E, S]", "bool"),
}

SIGNAL_DTYPES = frozenset({"float32", "int32", "bool"})

# --------------------------------------------------------------------------------------
# The hand-off: the signals packed into one [E, W] buffer per dtype
# --------------------------------------------------------------------------------------
# The fields of one dtype sit side by side, in SIGNAL_FIELDS order, each flattened to [E, width]. Three
# buffers cross the bridge instead of one tensor per field; the jitted controller step unpacks them (free
# under jit). `unpack_signals` slices with `buffer[:, start:stop]` and `.reshape`, so the same function
# unpacks torch tensors, numpy arrays and jax arrays.

PACKED_DTYPES: tuple[str, ...] = ("float32", "int32", "bool")


class SignalColumn(NamedTuple):
    """Where one field lives in its dtype's packed buffer: columns [start, stop), trailing shape."""

    dtype: str
    start: int
    stop: int
    shape: tuple[int, ...]  # the field's shape after the env axis: () or (n,)


def signal_columns(num_slots: int, num_blueprints: int, obs_dim: int) -> dict[str, SignalColumn]:
    """Every SIGNAL_FIELDS entry's columns for slot-head size S, menu size B and observation size D."""
    sizes = {"S": num_slots, "B": num_blueprints, "D": obs_dim}
    widths = dict.fromkeys(PACKED_DTYPES, 0)
    columns = {}
    for name, (shape, dtype) in SIGNAL_FIELDS.items():
        dims = [token.strip() for token in shape.strip("[]").split(",")][1:]  # the first is E
        trailing = tuple(sizes[d] if d in sizes else int(d) for d in dims)
        width = math.prod(trailing)
        columns[name] = SignalColumn(dtype, widths[dtype], widths[dtype] + width, trailing)
        widths[dtype] += width
    return columns


def unpack_signals(packed: Mapping[str, Any], columns: Mapping[str, SignalColumn]) -> dict[str, Any]:
    """The SIGNAL_FIELDS dict viewed out of the packed buffers {dtype: [E, W]} (views, no copies)."""
    out = {}
    for name, column in columns.items():
        buffer = packed[column.dtype]
        out[name] = buffer[:, column.start:column.stop].reshape((buffer.shape[0],) + column.shape)
    return out

# Per-head sizes given S and B.


def head_sizes(num_slots: int, num_blueprints: int = DEFAULT_NUM_BLUEPRINTS) -> tuple[int, ...]:
    return (num_slots, num_blueprints, NUM_BLENDS, NUM_OPS, NUM_TEMPOS)


# --------------------------------------------------------------------------------------
# The env pool as the loop drives it
# --------------------------------------------------------------------------------------


@runtime_checkable
class EpisodePool(Protocol):
    """E envs in lock-step, one batch of episodes at a time, one step per host epoch. Three pools have these
    members: `hosts.env.EnvPool` (in this process; torch signals, `(ApplyResult, next signals)` per step),
    `esper_fx.distributed.pool.RayEnvPool` (the same envs in Ray actors, the same results) and
    `esper_fx.training.bridged_pool.BridgedPool` (wraps either; packed jax signals out, an `EpochResult` per step)."""

    steps_per_epoch: int  # training steps per env per epoch

    def begin(self, batch_index: int, n_active: int | None = None) -> Any:
        """Start episode batch `batch_index` with its first `n_active` envs (all by default): fresh envs,
        then the first epoch; returns its signals."""

    def step(self, actions: Any, bootstrap: bool = ...) -> Any:
        """Execute the epoch's actions [E, 5], then run the next epoch (none after the last)."""

    def episode_results(self) -> list:
        """Per-env totals of the episode batch so far."""


# --------------------------------------------------------------------------------------
# BEHAVIOUR §7.7 Event types: the host's lifecycle and governor events and the loop's own, one vocabulary
# --------------------------------------------------------------------------------------


class EventType(StrEnum):
    SEED_GERMINATED = "SEED_GERMINATED"
    SEED_STAGE_CHANGED = "SEED_STAGE_CHANGED"
    SEED_FOSSILIZED = "SEED_FOSSILIZED"
    SEED_CULLED = "SEED_CULLED"
    GOVERNOR_PANIC = "GOVERNOR_PANIC"
    GOVERNOR_SNAPSHOT = "GOVERNOR_SNAPSHOT"
    GOVERNOR_ROLLBACK = "GOVERNOR_ROLLBACK"
    TRAINING_STARTED = "TRAINING_STARTED"
    BATCH_COMPLETED = "BATCH_COMPLETED"
    PPO_UPDATE_COMPLETED = "PPO_UPDATE_COMPLETED"
    CHECKPOINT_SAVED = "CHECKPOINT_SAVED"
    CHECKPOINT_LOADED = "CHECKPOINT_LOADED"
    REWARD_COMPUTED = "REWARD_COMPUTED"
    NONFINITE_SKIPPED = "NONFINITE_SKIPPED"  # NaN/inf observation rows or rewards left out of the normalisers


# --------------------------------------------------------------------------------------
# BEHAVIOUR §1.6 Lifecycle numbers both sides read: the host lifecycle applies them, the reward pays for them
# --------------------------------------------------------------------------------------

MIN_FOSSILIZE_CONTRIBUTION = 1.0  # pp: G5, the contributing-fossil count, fossilize shaping
MIN_PROBATION_EPOCHS = 5  # epochs: probation timeout floor, fossilize legitimacy l = min(1, eis / 5)
GOVERNOR_DEATH_PENALTY = 10.0  # reward units: a governor panic (the `panic` signal) pays -10


# --------------------------------------------------------------------------------------
# BEHAVIOUR §2.14 The lifecycle's clock: how long each stage lasts, in one of two settings
# --------------------------------------------------------------------------------------
# `reference`: the reference's absolute timings, set by the task's lifecycle horizon h (25 for the CNN
# tasks): dwell max(1, int(0.1·h)), G2 and G3 at >= 3 epochs in stage, a blend ramp of 3, 5 or 8 epochs
# (fast, standard, slow: the tempo; standard is the reference's 5), probation timeout max(5, int(0.1·h)).
# `proportional`: the same stages at the proportions of the reference's 150-epoch episodes (10 epochs in
# TRAINING, blends of 3, 5 or 8 epochs, a 15-epoch probation), scaled to the run's T = max_epochs; the
# ramp ticks once per training step instead of once per epoch, G2 measures the host's improvement from the
# accuracy at germination, the controller chooses the tempo, and a fossil stops isolating the host from
# its seed (the reference keeps a CNN seed's input detached for ever, so the host upstream of a fossil
# never learns again, while a static copy's planted seed trains with it). At T = 150 its durations are the
# reference's there.

LIFECYCLES: tuple[str, ...] = ("reference", "proportional")
TEMPO_BLEND_EPOCHS: tuple[int, ...] = (3, 5, 8)  # the reference's blend per tempo, in epochs
PROPORTIONAL_EPISODE = 150  # the reference's episode length the proportional lifecycle scales from
PROPORTIONAL_DWELL = 10  # epochs in TRAINING there
PROPORTIONAL_PROBATION = 15  # epochs of probation there (0.1 · 150, the reference's own rule)
PROPORTIONAL_MIN_PROBATION_TIMEOUT = 2  # decisions a probationary seed gets at least, in a short episode
REFERENCE_MIN_STAGE_EPOCHS = 3  # G2 and G3: epochs in stage (reference)


class LifecycleTimings(NamedTuple):
    """A run's stage durations. Epoch counts are whole; `blend` is in epochs and may be fractional (its ramp
    then ticks per training step)."""

    lifecycle: str
    max_epochs: int  # T
    dwell: int  # epochs in TRAINING before G2 is tried
    min_stage: int  # G2's and G3's minimum epochs in stage
    blend: tuple[float, ...]  # blend ramp per tempo (fast, standard, slow), epochs
    ramp_per_step: bool  # the ramp ticks once per training step (else once per epoch)
    probation_timeout: int  # epochs in PROBATIONARY before the automatic cull
    legitimacy: int  # epochs in PROBATIONARY for the whole fossilize shaping (reward)
    baseline_at_germination: bool  # G2's improvement counts from the accuracy at germination
    tempos: tuple[int, ...]  # the tempos a controller may choose (the reference: standard only)
    release_on_fossilize: bool  # a fossil's input stops being detached: the host upstream co-adapts through it

    def blend_epochs(self, tempo: int = DEFAULT_TEMPO) -> int:
        """Whole epochs a blend of `tempo` spans."""
        return max(1, math.ceil(self.blend[tempo] - 1e-9))

    def earliest_fossilize_age(self, tempo: int = DEFAULT_TEMPO) -> int:
        """Epochs from a germination to the first decision that can fossilize its seed if every gate passes
        at once: TRAINING, BLENDING, then the next decision (9 for the reference at the standard tempo)."""
        training = max(self.dwell, self.min_stage)
        return training + max(self.blend_epochs(tempo), self.min_stage) + 1

    def blend_ticks(self, tempo: int, episode_steps: int) -> int:
        """Ticks of a `tempo` ramp: its epochs (reference), or its share of the episode's training steps."""
        if not self.ramp_per_step:
            return self.blend_epochs(tempo)
        return max(1, _round_half_up(self.blend[tempo] / self.max_epochs * episode_steps))

    def germinate_until(self) -> int:
        """The last epoch whose decision can germinate a seed that could still be fossilized before T, at the
        fastest tempo allowed."""
        return self.max_epochs - min(self.earliest_fossilize_age(k) for k in self.tempos)

    def tempo_mask(self, epoch: int, deadline: bool) -> tuple[bool, ...]:
        """The tempos a seed germinated at `epoch` may take: those allowed, and with a germination deadline
        only those that could still be fossilized before T (all allowed ones if none could)."""
        allowed = [k in self.tempos for k in range(NUM_TEMPOS)]
        if deadline:
            in_time = [ok and epoch + self.earliest_fossilize_age(k) <= self.max_epochs
                       for k, ok in enumerate(allowed)]
            if any(in_time):
                allowed = in_time
        return tuple(allowed)

    def scale_epochs(self, epochs: int, horizon: int) -> int:
        """An epoch count written for an h-epoch episode, in this lifecycle: unchanged for the reference, else
        scaled to T (at least 1). The heuristic's waits use it."""
        if self.lifecycle == "reference":
            return int(epochs)
        return max(1, _round_half_up(epochs * self.max_epochs / horizon)) if epochs > 0 else 0


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def lifecycle_timings(lifecycle: str, max_epochs: int, horizon: int | None) -> LifecycleTimings:
    """The stage durations of `lifecycle` for T = `max_epochs` and the task's lifecycle horizon (None: no
    task, the slot's defaults: dwell 1, probation timeout 5)."""
    if lifecycle not in LIFECYCLES:
        raise ValueError(f"lifecycle must be one of {list(LIFECYCLES)} (got {lifecycle!r})")
    if lifecycle == "reference":
        dwell = 1 if horizon is None else max(1, int(horizon * 0.1))
        timeout = MIN_PROBATION_EPOCHS if horizon is None else max(MIN_PROBATION_EPOCHS, int(horizon * 0.1))
        return LifecycleTimings("reference", int(max_epochs), dwell, REFERENCE_MIN_STAGE_EPOCHS,
                                tuple(float(b) for b in TEMPO_BLEND_EPOCHS), False, timeout,
                                MIN_PROBATION_EPOCHS, False, (DEFAULT_TEMPO,), False)
    scale = int(max_epochs) / PROPORTIONAL_EPISODE

    def epochs(n: int, floor: int = 1) -> int:
        return max(floor, _round_half_up(n * scale))

    return LifecycleTimings(
        "proportional", int(max_epochs), epochs(PROPORTIONAL_DWELL), epochs(REFERENCE_MIN_STAGE_EPOCHS),
        tuple(b * scale for b in TEMPO_BLEND_EPOCHS), True,
        epochs(PROPORTIONAL_PROBATION, PROPORTIONAL_MIN_PROBATION_TIMEOUT), epochs(MIN_PROBATION_EPOCHS), True,
        tuple(range(NUM_TEMPOS)), True)
