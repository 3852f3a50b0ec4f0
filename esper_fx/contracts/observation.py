"""The observation layout: base features, slot blocks, telemetry blocks and the size D (BEHAVIOUR §8)."""

from __future__ import annotations

from esper_fx.contracts.actions import NUM_TEMPOS
from esper_fx.contracts.blueprints import DEFAULT_NUM_BLUEPRINTS

NUM_BASE_FEATURES = 23
SLOT_BLOCK_FIXED = 4  # is_active, stage, alpha, improvement; then the B-wide blueprint one-hot, the tempo one-hot
TELEMETRY_BLOCK = 10

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
OBS_CURVES = slice(OBS_TRAIN_LOSS, OBS_TOTAL_PARAMS)  # 2..20: the host's losses, accuracies and their histories

# What a control may withhold from the observation (`TrainingConfig.observe_withheld`, docs/LEARNING.md §10):
# `host_params`: feature 21 counts the live seeds' parameters only, not the host's; `curves`: features 2..20
# read 0 at every epoch. The observation keeps its size.
WITHHOLDABLE: tuple[str, ...] = ("host_params", "curves")

# The fit gap (`TrainingConfig.observe_fit_gap`, BEHAVIOUR §8.7): when observed, the last feature is the epoch's
# training accuracy minus its validation accuracy, in pp (positive once the host fits its training data better
# than data it never saw; FRAGrow, AAAI 2024: growth helps a network that fits and hurts one that underfits).
OBS_FIT_GAP = -1

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


def obs_dim(num_slots: int, telemetry: bool = True, num_blueprints: int = DEFAULT_NUM_BLUEPRINTS,
            fit_gap: bool = False) -> int:
    """D = 23 + (4 + B + 3)·S + 10·S·[telemetry] + [fit_gap]; 89 for the cifar10 defaults."""
    if num_slots < 1:
        raise ValueError(f"num_slots must be >= 1 (got {num_slots})")
    dim = NUM_BASE_FEATURES + slot_block_size(num_blueprints) * num_slots
    return dim + (TELEMETRY_BLOCK * num_slots if telemetry else 0) + int(bool(fit_gap))

