"""The signals pytree, the single host -> controller contract, and its packing into one buffer per dtype
(BEHAVIOUR §7-§8)."""

from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple

# Every field is a contiguous, freshly allocated device tensor of dtype float32, int32 or bool.
# Shapes: E = envs, S = slot-head size (every host injection point, canonical order),
# B = blueprint-menu size, D = observation size. "None" values (no contribution measured, no
# germination accuracy) are encoded as a False *_valid flag with the value 0.0.


class Signal(NamedTuple):
    """One field of the signals: its name, shape, dtype, and the part of the signals it belongs to (`PARTS`),
    which says where the host builds it (`hosts.signals.assembly`)."""

    name: str
    shape: str
    dtype: str
    part: str


# The parts, each built in one place on the host side: the observation (`hosts.signals.observation`), the
# masks (`hosts.signals.masks`), the per-env values (`hosts.signals.assembly`), each slot's state
# (`hosts.signals.slots`) and the per-slot values of this epoch with their valid flags (`assembly`).
PARTS: tuple[str, ...] = ("observation", "mask", "env", "slot", "slot_value")

# The one declaration of the signals, in contract order: every other list of them is derived from it.
SIGNALS: tuple[Signal, ...] = (
    # observation and masks (BEHAVIOUR §8, §9)
    Signal("obs", "[E, D]", "float32", "observation"),  # raw (un-normalised) observation
    Signal("mask_slot", "[E, S]", "bool", "mask"),
    Signal("mask_blueprint", "[E, B]", "bool", "mask"),
    Signal("mask_blend", "[E, 3]", "bool", "mask"),
    Signal("mask_op", "[E, 4]", "bool", "mask"),
    Signal("mask_tempo", "[E, 3]", "bool", "mask"),  # the tempos a seed germinated now may take (BEHAVIOUR §2.14)
    Signal("mask_slot_op", "[E, 4, S]", "bool", "mask"),  # [fix] the slots each op can act on (op-major)
    # per env
    Signal("epoch", "[E]", "int32", "env"),  # t, 1..T
    Signal("max_epochs", "[E]", "int32", "env"),  # T (terminal iff epoch == max_epochs)
    Signal("val_acc", "[E]", "float32", "env"),  # pp
    Signal("val_loss", "[E]", "float32", "env"),
    Signal("train_acc", "[E]", "float32", "env"),  # pp
    Signal("train_loss", "[E]", "float32", "env"),
    Signal("acc_delta", "[E]", "float32", "env"),  # tracker accuracy_delta, pp
    Signal("loss_delta", "[E]", "float32", "env"),  # tracker prev_val_loss - val_loss; +inf at t = 1
    Signal("host_max_acc", "[E]", "float32", "env"),  # pp
    Signal("plateau_epochs", "[E]", "int32", "env"),
    Signal("host_stabilized", "[E]", "int32", "env"),  # 0 / 1 latch
    Signal("host_params", "[E]", "float32", "env"),
    # active_seed_params: all slots holding a seed, fossils included
    Signal("seed_params", "[E]", "float32", "env"),
    # active seeds' training FLOPs per step / the host's (0: no count)
    Signal("seed_flop_share", "[E]", "float32", "env"),
    Signal("num_contributing_fossilized", "[E]", "int32", "env"),
    Signal("total_seeds", "[E]", "int32", "env"),
    Signal("panic", "[E]", "bool", "env"),  # governor panicked (and rolled back) this epoch: reward gets -10
    # seeds the last lifecycle step (end of the previous epoch) auto-culled
    Signal("auto_culls", "[E]", "int32", "env"),
    # per slot
    Signal("slot_enabled", "[E, S]", "bool", "slot"),
    Signal("slot_occupied", "[E, S]", "bool", "slot"),  # holds a seed (state not None, stage not DORMANT)
    Signal("slot_stage", "[E, S]", "int32", "slot"),  # SeedStage value, 0 when empty
    Signal("slot_previous_stage", "[E, S]", "int32", "slot"),
    Signal("slot_eis", "[E, S]", "int32", "slot"),  # epochs_in_current_stage
    Signal("slot_age", "[E, S]", "int32", "slot"),  # epochs_total
    Signal("slot_alpha", "[E, S]", "float32", "slot"),
    Signal("slot_blueprint", "[E, S]", "int32", "slot"),  # menu index, -1 when empty or not in the menu
    Signal("slot_total_improvement", "[E, S]", "float32", "slot"),  # I, pp
    Signal("slot_stage_improvement", "[E, S]", "float32", "slot"),  # improvement_since_stage_start, pp
    Signal("slot_contribution", "[E, S]", "float32", "slot_value"),  # c this epoch (0.0 when invalid)
    Signal("slot_contribution_valid", "[E, S]", "bool", "slot_value"),  # c is not None
    Signal("slot_acc_at_germination", "[E, S]", "float32", "slot_value"),
    Signal("slot_acc_at_germination_valid", "[E, S]", "bool", "slot_value"),
)

# name -> (shape, dtype), in contract order
SIGNAL_FIELDS: Mapping[str, tuple[str, str]] = {s.name: (s.shape, s.dtype) for s in SIGNALS}


def signal_names(part: str, dtype: str | None = None) -> tuple[str, ...]:
    """The names of one part's signals (of one dtype, if given), in contract order."""
    if part not in PARTS:
        raise ValueError(f"no signal part {part!r}: the parts are {list(PARTS)}")
    return tuple(s.name for s in SIGNALS if s.part == part and dtype in (None, s.dtype))


SIGNAL_DTYPES = frozenset({"float32", "int32", "bool"})

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
