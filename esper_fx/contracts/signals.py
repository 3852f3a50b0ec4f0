"""The signals pytree, the single host -> controller contract, and its packing into one buffer per dtype
(BEHAVIOUR §7-§8)."""

from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple

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
