"""The seed stages, their legal transitions and the gate each transition passes (BEHAVIOUR §1.1-§1.3)."""

from __future__ import annotations

from enum import IntEnum
from typing import Mapping


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
