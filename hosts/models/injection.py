"""InjectionSpec: one injection point of a host (BEHAVIOUR §1.4)."""

from __future__ import annotations

from dataclasses import dataclass

from esper_fx.contracts import parse_slot_id


@dataclass(frozen=True)
class InjectionSpec:
    """Where a slot sits in a host: id `r{row}c{col}`, channel width, relative position and layer range."""

    slot_id: str
    channels: int
    position: float
    layer_range: tuple[int, int]

    def __post_init__(self) -> None:
        parse_slot_id(self.slot_id)  # raises SlotIdError (a ValueError) on a malformed id
        if int(self.channels) <= 0:
            raise ValueError(f"InjectionSpec.channels must be > 0 (got {self.channels})")
        if not 0.0 <= float(self.position) <= 1.0:
            raise ValueError(f"InjectionSpec.position must lie in [0, 1] (got {self.position})")
        start, end = self.layer_range
        if start < 0 or start > end:
            raise ValueError(f"InjectionSpec.layer_range needs 0 <= start <= end (got {self.layer_range})")


def segment_index(slot_ids: list[str], seg: str) -> int:
    """Index of `seg` among a host's injection ids; unknown ids raise ValueError listing the valid ones."""
    try:
        return slot_ids.index(seg)
    except ValueError:
        raise ValueError(f"unknown segment {seg!r}; available injection points: {slot_ids}") from None
