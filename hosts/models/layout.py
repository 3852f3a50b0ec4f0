"""The memory layout of activations: channels_last for every CNN host, seed and image batch.

Convolutions, batch norm and max-pooling run markedly faster on NHWC memory than on NCHW, on the CPU
(oneDNN) as on CUDA (cuDNN, tensor cores under AMP). A tensor keeps the logical shape [N, C, H, W]
either way; only its strides differ. A layout conversion costs a full copy, so the rule is to have
none inside an epoch: the images are stored channels_last (`hosts.data.task_data`), augmentation
writes channels_last (`hosts.data.batching`), hosts are built channels_last (`MorphogeneticModel`) and
every seed and gate is placed channels_last (`SeedSlot`). Transformer hosts keep the default layout.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

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
