"""Moving packed host-side tables to the env device as separate signal tensors.

The DLPack bridge wants every signal tensor contiguous and freshly allocated (ARCHITECTURE §2). The
helpers here pack several fields into one CPU tensor, make a single host→device copy, and then split
it on the device into fresh contiguous tensors (device-side copies only).
"""

from __future__ import annotations

from typing import Sequence

import torch


def upload_rows(rows: Sequence[Sequence[float]], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """A [E, N] list of rows -> one fresh contiguous tensor on `device` (one host→device copy)."""
    if not rows:
        raise ValueError("upload_rows needs at least one row")
    host = torch.tensor([list(row) for row in rows], dtype=dtype)
    return host.to(device)


def upload_columns(packed: torch.Tensor, widths: Sequence[int], device: torch.device | str) -> list[torch.Tensor]:
    """Split a [E, Σwidths] CPU tensor into fresh contiguous [E, w] tensors on `device`."""
    if sum(widths) != packed.shape[1]:
        raise ValueError(f"column widths {list(widths)} do not add up to {packed.shape[1]}")
    on_device = packed.to(device)
    out, start = [], 0
    for width in widths:
        out.append(on_device[:, start : start + width].clone(memory_format=torch.contiguous_format))
        start += width
    return out


def upload_planes(packed: torch.Tensor, device: torch.device | str) -> list[torch.Tensor]:
    """Split a [k, E, S] CPU tensor into k fresh contiguous [E, S] tensors on `device`."""
    on_device = packed.to(device)
    return [on_device[i].clone(memory_format=torch.contiguous_format) for i in range(packed.shape[0])]
