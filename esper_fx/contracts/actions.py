"""The action heads, lifecycle ops, blends and tempos, and the per-head sizes (BEHAVIOUR §1.5, §2.14)."""

from __future__ import annotations

from enum import IntEnum

from esper_fx.contracts.blueprints import DEFAULT_NUM_BLUEPRINTS

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


def head_sizes(num_slots: int, num_blueprints: int = DEFAULT_NUM_BLUEPRINTS) -> tuple[int, ...]:
    """The per-head sizes given S and B: (slot, blueprint, blend, op, tempo)."""
    return (num_slots, num_blueprints, NUM_BLENDS, NUM_OPS, NUM_TEMPOS)
