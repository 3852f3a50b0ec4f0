"""Slot ids: the canonical "r{row}c{col}" form, parsing and order (BEHAVIOUR §1.4)."""

from __future__ import annotations

import re
from typing import Iterable

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
