"""How a host is laid out, as the rest of `hosts/` sees it: where its injection points sit, the memory layout
of its activations, and the LayerNorm epsilon its transformer layers and their seeds share.

Injection points (BEHAVIOUR §1.4). A host names each point between two of its blocks (or layers) with a
slot id and describes it with an `InjectionSpec` (channel width, relative position, layer range);
`MorphogeneticModel` places a `SeedSlot` at every enabled one, and the host routes through them by id
(`segment_index`).

Memory layout: channels_last for every CNN host, seed and image batch. Convolutions, batch norm and
max-pooling run markedly faster on NHWC memory than on NCHW, on the CPU (oneDNN) as on CUDA (cuDNN,
tensor cores under AMP). A tensor keeps the logical shape [N, C, H, W] either way; only its strides
differ. A layout conversion costs a full copy, so the rule is to have none inside an epoch: the images
are stored channels_last (`hosts.data.task_data`), augmentation writes channels_last
(`hosts.data.batching`), hosts are built channels_last (`MorphogeneticModel`) and every seed and gate
is placed channels_last (`SeedSlot`). Transformer hosts keep the default layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from esper_fx.contracts.slots import parse_slot_id

LN_EPS = 1e-5  # every LayerNorm of the transformer hosts and their seeds


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


CNN_LAYOUT = torch.channels_last


def memory_format(topology: str) -> torch.memory_format:
    """channels_last for the CNN topology, the default contiguous layout otherwise."""
    return CNN_LAYOUT if topology == "cnn" else torch.contiguous_format


def to_layout(module: nn.Module, topology: str) -> nn.Module:
    """The module with its 4-d parameters and buffers in the topology's layout (in place; returned)."""
    return module.to(memory_format=memory_format(topology))


def image_layout(images: torch.Tensor) -> torch.Tensor:
    """A 4-d image batch in the CNN layout (the tensor itself when it already is)."""
    return images.contiguous(memory_format=CNN_LAYOUT)


def spatial_mean(x: torch.Tensor) -> torch.Tensor:
    """[N, C, H, W] -> [N, C], the mean over H and W, as one average pool over the whole image: its
    backward writes the gradient channels_last, where the backward of `x.mean(dim=(2, 3))` (and of
    adaptive pooling to 1×1, which becomes that mean) expands it into a new NCHW tensor."""
    return F.avg_pool2d(x, x.shape[2:]).flatten(1)
