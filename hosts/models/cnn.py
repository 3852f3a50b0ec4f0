"""CNNHost: the small convolutional host of the CIFAR-type tasks (BEHAVIOUR §3.1), and the shapes16 host."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from esper_fx.contracts.slots import format_slot_id
from hosts.layout import InjectionSpec, segment_index, spatial_mean

CIFAR_CLASSES = 10
FASHION_WIDTHS = (4, 8, 16)
FASHION_KERNEL = 3
GROWTH_WIDTH = 16


class ConvBlock(nn.Sequential):
    """Conv k×k (no bias, 'same' padding; k = 3 unless given) -> BatchNorm2d -> ReLU, PyTorch default init.
    The ReLU works in place on the batch norm's output (batch norm's backward reads its input, not its
    output), saving a pass."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3) -> None:
        super().__init__(
            nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        )


class CNNHost(nn.Module):
    """n_blocks ConvBlocks (channels base·2^i), a MaxPool after block i iff i < pool_layers, GAP + Linear.

    Injection point `r0c{i}` sits after block i and its pool. `widths`, `kernel_size` and `pooled` (one
    bool per block) replace the CIFAR layout when given: `CNNHost.pointwise()` is the shapes16 host,
    `CNNHost.fashion()` the Fashion-MNIST host (one input channel), `CNNHost.growth()` the `fashion_growth`
    host. `width` multiplies every block's channels (rounded, at least 1): the run's `host_width`.
    """

    def __init__(
        self, num_classes: int = CIFAR_CLASSES, base_channels: int = 8, n_blocks: int = 3, pool_layers: int | None = None,
        *, widths: Sequence[int] | None = None, kernel_size: int = 3, pooled: Sequence[bool] | None = None,
        in_channels: int = 3, width: float = 1.0,
    ) -> None:
        super().__init__()
        widths = [base_channels * 2**i for i in range(n_blocks)] if widths is None else [int(w) for w in widths]
        if not width > 0:
            raise ValueError(f"CNNHost width must be > 0 (got {width})")
        widths = [max(1, round(w * width)) for w in widths]
        n_blocks = len(widths)
        if n_blocks < 2:
            raise ValueError(f"CNNHost needs n_blocks >= 2 (got {n_blocks})")
        self.n_blocks = n_blocks
        self.pool_layers = n_blocks if pool_layers is None else pool_layers
        if pooled is None:
            pooled = [i < self.pool_layers for i in range(n_blocks)]
        if len(pooled) != n_blocks:
            raise ValueError(f"pooled needs one flag per block ({n_blocks}), got {len(pooled)}")
        self.blocks = nn.ModuleList(
            ConvBlock(c_in, c_out, kernel_size) for c_in, c_out in zip([in_channels] + widths[:-1], widths)
        )
        self.pools = nn.ModuleList(nn.MaxPool2d(2, 2) if p else nn.Identity() for p in pooled)
        self.classifier = nn.Linear(widths[-1], num_classes)
        self.channels = tuple(widths)
        self.segment_ids = [format_slot_id(0, i) for i in range(n_blocks)]

    @classmethod
    def cifar10(cls, num_classes: int = CIFAR_CLASSES, width: float = 1.0) -> "CNNHost":
        return cls(num_classes=num_classes, base_channels=8, n_blocks=3, width=width)

    @classmethod
    def cifar10_deep(cls, num_classes: int = CIFAR_CLASSES, width: float = 1.0) -> "CNNHost":
        return cls(num_classes=num_classes, base_channels=8, n_blocks=5, pool_layers=5, width=width)

    @classmethod
    def pointwise(cls, num_classes: int = CIFAR_CLASSES, width: float = 1.0) -> "CNNHost":
        """The shapes16 host (826 parameters): three 1×1 blocks of 16 channels, pools after the second and
        third. Every layer sees one pixel, so the host tells colours apart but no stripe, edge or shape;
        slot r0c0 sits at full resolution, where a 3×3 seed gives it the receptive field it lacks."""
        return cls(num_classes=num_classes, widths=(16, 16, 16), kernel_size=1, pooled=(False, True, True),
                   width=width)

    @classmethod
    def spatial(cls, num_classes: int = CIFAR_CLASSES, width: float = 1.0) -> "CNNHost":
        """The shapes16 host with 3×3 blocks (the `shapes16_spatial` variant): it sees stripes, edges and
        shapes by itself, so a seed has less to add."""
        return cls(num_classes=num_classes, widths=(16, 16, 16), kernel_size=3, pooled=(False, True, True),
                   width=width)

    @classmethod
    def narrow(cls, num_classes: int = CIFAR_CLASSES, width: float = 1.0) -> "CNNHost":
        """3×3 blocks of 4 channels (the `shapes16_narrow` variant): it sees space but holds little."""
        return cls(num_classes=num_classes, widths=(4, 4, 4), kernel_size=3, pooled=(False, True, True), width=width)

    @classmethod
    def fashion(cls, num_classes: int = CIFAR_CLASSES, width: float = 1.0) -> "CNNHost":
        """The Fashion-MNIST host: grey input, FASHION_WIDTHS channels, 3×3 blocks, pools after every block."""
        return cls(num_classes=num_classes, widths=FASHION_WIDTHS, kernel_size=FASHION_KERNEL, in_channels=1,
                   width=width)

    @classmethod
    def growth(cls, num_classes: int = CIFAR_CLASSES, width: float = 1.0) -> "CNNHost":
        """The `fashion_growth` host (docs/LEARNING.md §11): Fashion-MNIST's grey input, three 3×3 blocks of
        GROWTH_WIDTH channels, pools after every block. Every block after the first maps its width to itself,
        so a host-initialised seed in any slot copies a block of the host (`neighbour_block`)."""
        return cls(num_classes=num_classes, widths=(GROWTH_WIDTH,) * 3, kernel_size=3, in_channels=1, width=width)

    def injection_specs(self) -> list[InjectionSpec]:
        return [
            InjectionSpec(seg, self.channels[i], (i + 1) / self.n_blocks, (i, i + 1))
            for i, seg in enumerate(self.segment_ids)
        ]

    def neighbour_block(self, seg: str) -> nn.Module | None:
        """The host block a host-initialised seed in slot `seg` copies (BEHAVIOUR §4.5): the block after the
        slot when it maps the slot's width to itself, else the block before it when that one does, else None."""
        i = segment_index(self.segment_ids, seg)
        width = self.channels[i]
        for j in (i + 1, i):
            if j < self.n_blocks and self.blocks[j][0].in_channels == width == self.blocks[j][0].out_channels:
                return self.blocks[j]
        return None

    def _run_blocks(self, x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        for i in range(start, stop):
            x = self.pools[i](self.blocks[i](x))
        return x

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(spatial_mean(x))

    def forward_to_segment(self, seg: str, x: torch.Tensor, from_seg: str | None = None) -> torch.Tensor:
        """Blocks after `from_seg` (or from the input) up to and including block `seg`, each with its pool."""
        start = 0 if from_seg is None else segment_index(self.segment_ids, from_seg) + 1
        return self._run_blocks(x, start, segment_index(self.segment_ids, seg) + 1)

    def forward_from_segment(self, seg: str, x: torch.Tensor) -> torch.Tensor:
        """The blocks after `seg`, then global average pool and the classifier."""
        return self._head(self._run_blocks(x, segment_index(self.segment_ids, seg) + 1, self.n_blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._head(self._run_blocks(x, 0, self.n_blocks))
