"""Shared contracts between the PyTorch side (`hosts`) and the JAX side (`rl`).

This module imports neither torch nor jax: it holds the enums, slot ids, action
heads, observation layout, the signals field list and the constants table of
SPEC §1, so both halves of the system agree on them without importing each other.
"""

from __future__ import annotations

import math
import re
from enum import IntEnum
from typing import Iterable, Mapping

# --------------------------------------------------------------------------------------
# §1.1 Seed stages
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
TERMINAL_STAGES = frozenset({SeedStage.FOSSILIZED})
FAILURE_STAGES = frozenset({SeedStage.CULLED, SeedStage.EMBARGOED, SeedStage.RESETTING})
FOSSILIZABLE_STAGES = frozenset({SeedStage.PROBATIONARY})
CULLABLE_STAGES = frozenset(
    {SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY}
)

# §1.2 Legal transitions, targets in the listed order.
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


# §1.3 Gate levels: target stage -> gate number (anything else maps to G0).
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
# §1.4 Slot ids
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
# §1.5 Action heads, ops, blends, blueprint menus
# --------------------------------------------------------------------------------------

ACTION_HEADS: tuple[str, ...] = ("slot", "blueprint", "blend", "op")
HEAD_SLOT, HEAD_BLUEPRINT, HEAD_BLEND, HEAD_OP = range(4)


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

TOPOLOGIES: tuple[str, ...] = ("cnn", "transformer")

# Every registered blueprint per topology (§4.3, §4.4). hosts.blueprints registers exactly these.
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

# Default heuristic rotations (§13.1): the menu without noop.
HEURISTIC_ROTATIONS: Mapping[str, tuple[str, ...]] = {
    "cnn": ("conv_light", "attention", "norm", "depthwise"),
    "transformer": ("lora", "attention", "norm", "mlp_small"),
}


def _check_topology(topology: str) -> str:
    if topology not in TOPOLOGIES:
        raise ValueError(f"unknown topology {topology!r}; expected one of {list(TOPOLOGIES)}")
    return topology


def blueprint_actions(topology: str) -> tuple[str, ...]:
    """The default blueprint menu of a topology (blueprint-head index -> name)."""
    return BLUEPRINT_MENUS[_check_topology(topology)]


# --------------------------------------------------------------------------------------
# Tasks known to the contracts (host details live in hosts.tasks; these numbers must agree)
# --------------------------------------------------------------------------------------

TASK_NAMES: tuple[str, ...] = ("cifar10", "cifar10_deep", "tinystories", "shapes10", "pytext")
TASK_TOPOLOGY: Mapping[str, str] = {
    "cifar10": "cnn",
    "cifar10_deep": "cnn",
    "tinystories": "transformer",
    "shapes10": "cnn",
    "pytext": "transformer",
}
# Number of host injection points S (the slot-head size), §1.4.
TASK_NUM_SLOTS: Mapping[str, int] = {
    "cifar10": 3,
    "cifar10_deep": 5,
    "tinystories": 3,
    "shapes10": 3,
    "pytext": 3,
}


def task_slot_ids(task: str) -> tuple[str, ...]:
    """Canonical slot ids of a task's host injection points (all hosts use row 0)."""
    return tuple(format_slot_id(0, i) for i in range(TASK_NUM_SLOTS[task]))


# --------------------------------------------------------------------------------------
# §8 Observation layout
# --------------------------------------------------------------------------------------

NUM_BASE_FEATURES = 23
SLOT_BLOCK_FIXED = 4  # is_active, stage, alpha, improvement; then the B-wide blueprint one-hot
TELEMETRY_BLOCK = 10
DEFAULT_NUM_BLUEPRINTS = 5

# Base feature indices (§8.2).
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

# Offsets within a slot block (§8.3).
SLOT_IS_ACTIVE = 0
SLOT_STAGE = 1
SLOT_ALPHA = 2
SLOT_IMPROVEMENT = 3
SLOT_BLUEPRINT_ONEHOT = 4  # ... 4 + B - 1

# Offsets within a telemetry block (§8.4).
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

SAFE_CLIP = 100.0  # safe(v, d) clips to [-100, 100]


def slot_block_size(num_blueprints: int = DEFAULT_NUM_BLUEPRINTS) -> int:
    return SLOT_BLOCK_FIXED + num_blueprints


def obs_dim(num_slots: int, telemetry: bool = True, num_blueprints: int = DEFAULT_NUM_BLUEPRINTS) -> int:
    """D = 23 + (4 + B)·S + 10·S·[telemetry]; 80 for the cifar10 defaults."""
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
# §7–§8 The signals pytree: the single host -> controller contract
# --------------------------------------------------------------------------------------
# Every field is a contiguous, freshly allocated device tensor of dtype float32, int32 or bool.
# Shapes: E = envs, S = slot-head size (every host injection point, canonical order),
# B = blueprint-menu size, D = observation size. "None" values (no contribution measured, no
# germination accuracy) are encoded as a False *_valid flag with the value 0.0.

SIGNAL_FIELDS: Mapping[str, tuple[str, str]] = {
    # observation and masks (§8, §9)
    "obs": ("[E, D]", "float32"),  # raw (un-normalised) observation
    "mask_slot": ("[E, S]", "bool"),
    "mask_blueprint": ("[E, B]", "bool"),
    "mask_blend": ("[E, 3]", "bool"),
    "mask_op": ("[E, 4]", "bool"),
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
    "num_contributing_fossilized": ("[E]", "int32"),
    "total_seeds": ("[E]", "int32"),
    "panic": ("[E]", "bool"),  # governor panicked (and rolled back) this epoch: reward gets -10
    "pending_penalty": ("[E]", "float32"),  # auto-cull penalty carried from the previous step (<= 0)
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

# Per-head sizes given S and B.


def head_sizes(num_slots: int, num_blueprints: int = DEFAULT_NUM_BLUEPRINTS) -> tuple[int, int, int, int]:
    return (num_slots, num_blueprints, NUM_BLENDS, NUM_OPS)


# --------------------------------------------------------------------------------------
# §1.6 Constants (defaults; every value is normative)
# --------------------------------------------------------------------------------------

# Gates
G2_MIN_IMPROVEMENT = 0.5  # pp, improvement_since_stage_start
MIN_BLENDING_EPOCHS = 3  # epochs in stage, used by G2 and G3
G2_MIN_GRADIENT_RATIO = 0.10  # dimensionless, EMA of the parameter-normalised gradient ratio
G3_MIN_ALPHA = 0.95  # blend weight
MIN_FOSSILIZE_CONTRIBUTION = 1.0  # pp, G5 and fossilize shaping
MIN_PROBATION_STABILITY = 0.95  # stored, never checked

# Lifecycle
DEFAULT_BLENDING_TOTAL_STEPS = 5  # epochs of alpha ramp
MIN_CULL_AGE = 1  # epochs
MIN_PROBATION_EPOCHS = 5  # epochs, fossilize legitimacy l = min(1, eis / 5)
FULL_EVALUATION_AGE = 10  # epochs, informational
MAX_SEEDS = None  # unlimited (treated as 0)
STAGE_HISTORY_LIMIT = 100  # entries


def dwell_epochs(task_max_epochs: int | None) -> int:
    """Minimum epochs in TRAINING before G2 is tried: max(1, int(0.1·task max_epochs)); 1 without a task."""
    return 1 if task_max_epochs is None else max(1, int(task_max_epochs * 0.1))


def probation_timeout(task_max_epochs: int | None) -> int:
    """Epochs in PROBATIONARY before auto-cull: max(5, int(0.1·task max_epochs))."""
    return MIN_PROBATION_EPOCHS if task_max_epochs is None else max(5, int(task_max_epochs * 0.1))


# Gradient ratio
GRADIENT_RATIO_EMA_DECAY = 0.9  # per epoch
GRADIENT_NORM_EPS = 1e-8

# Governor
GOVERNOR_SENSITIVITY = 6.0  # sigma
GOVERNOR_MULTIPLIER = 3.0  # x mean
GOVERNOR_ABSOLUTE_THRESHOLD = 12.0  # nats
GOVERNOR_DEATH_PENALTY = 10.0  # reward units (punishment -10.0)
GOVERNOR_HISTORY_WINDOW = 20  # epochs
GOVERNOR_WARMUP = 10  # epochs of history before the statistical and lobotomy rules
GOVERNOR_MIN_PANICS = 3  # consecutive anomalous epochs
GOVERNOR_LOBOTOMY_MEAN_FRACTION = 0.6  # mean(history) < 0.6·R
GOVERNOR_LOBOTOMY_TOLERANCE = 0.065  # |loss - R| < 0.065·R
GOVERNOR_SNAPSHOT_EVERY = 5  # epochs, after a passing check

# Host / seed training
HOST_LR = 0.01
HOST_MOMENTUM = 0.9
HOST_WEIGHT_DECAY = 5e-4
SEED_LR = 0.01
SEED_MOMENTUM = 0.9
SEED_WEIGHT_DECAY = 0.0
TRANSFORMER_DROPOUT = 0.1

# SignalTracker
PLATEAU_THRESHOLD = 0.5  # pp
STABILIZATION_THRESHOLD = 0.03  # relative val-loss improvement
STABILIZATION_EPOCHS = 3
TRACKER_HISTORY_WINDOW = 10  # epochs

# Episode / batch
DEFAULT_MAX_EPOCHS = 25
DEFAULT_N_ENVS = 4

# PPO
PPO_GAMMA = 0.995
PPO_GAE_LAMBDA = 0.97
PPO_LR = 3e-4
PPO_ADAM_EPS = 1e-5
PPO_CLIP_RATIO = 0.2
PPO_VALUE_CLIP = 10.0
PPO_VALUE_COEF = 0.5
PPO_MAX_GRAD_NORM = 0.5
PPO_TARGET_KL = 0.015
PPO_KL_STOP_FACTOR = 1.5  # stop above 1.5·target_kl = 0.0225
PPO_ENTROPY_COEF = 0.05
PPO_ENTROPY_COEF_MIN = 0.01

# Network
LSTM_HIDDEN = 128
FEATURE_DIM = 128
HEAD_HIDDEN = 64
LAYER_NORM_EPS = 1e-5
MASKED_LOGIT = -1e4
LSTM_FORGET_BIAS = 2.0

# Normalizers
OBS_NORM_MOMENTUM = 0.99
OBS_NORM_EPS = 1e-4
OBS_NORM_CLIP = 10.0
REWARD_NORM_CLIP = 10.0
REWARD_NORM_EPS = 1e-8

# Rewards (loop level)
AUTO_CULL_PENALTY = -0.2  # reward units, paid on the next step
GOVERNOR_PUNISHMENT = -GOVERNOR_DEATH_PENALTY

# Governor random-guess losses R
RANDOM_GUESS_LOSS: Mapping[str, float] = {
    "cifar10": math.log(10),
    "cifar10_deep": math.log(10),
    "shapes10": math.log(10),
    "tinystories": math.log(50257),
    "pytext": math.log(256),
}
