"""Blend schedules (BEHAVIOUR §2.12): linear, sigmoid and gated (trainable gate [fix])."""

from __future__ import annotations

import math

import torch
from torch import nn

from esper_fx.contracts.actions import BLEND_NAMES
from hosts.layout import spatial_mean

SIGMOID_STEEPNESS = 12.0
DEFAULT_BLEND = "sigmoid"  # a seed germinated without a blend


class BlendSchedule(nn.Module):
    """A ramp over `total_steps` ticks (epochs, or training steps: the seed clock's, BEHAVIOUR §2.14).
    `progress_alpha(k)` drives state.alpha; `forward_alpha(h)` the lerp."""

    name = ""

    def __init__(self, total_steps: int) -> None:
        super().__init__()
        if total_steps < 1:
            raise ValueError(f"blend total_steps must be >= 1 (got {total_steps})")
        self.total_steps = int(total_steps)
        self.current_step = 0

    def step(self, k: int) -> None:
        self.current_step = int(k)

    def progress_alpha(self, k: int) -> float:
        raise NotImplementedError

    def forward_alpha(self, h: torch.Tensor) -> torch.Tensor:
        """A 0-dim tensor on h's device and dtype (filled on device: no host sync)."""
        return h.new_full((), self.progress_alpha(self.current_step))


class LinearBlend(BlendSchedule):
    name = "linear"

    def progress_alpha(self, k: int) -> float:
        return min(1.0, max(0.0, k / self.total_steps))


class SigmoidBlend(BlendSchedule):
    name = "sigmoid"

    def progress_alpha(self, k: int) -> float:
        return 1.0 / (1.0 + math.exp(-SIGMOID_STEEPNESS * (k / self.total_steps - 0.5)))


class GatedBlend(BlendSchedule):
    """Per-sample α = gate(pool(h)); pool = mean over H, W (cnn) or T (transformer). The gate is trained."""

    name = "gated"

    def __init__(self, total_steps: int, channels: int, topology: str) -> None:
        super().__init__(total_steps)
        hidden = max(1, channels // 4)
        self.topology = topology
        self.gate = nn.Sequential(nn.Linear(channels, hidden), nn.ReLU(), nn.Linear(hidden, 1), nn.Sigmoid())

    def progress_alpha(self, k: int) -> float:
        return min(1.0, k / self.total_steps)

    def forward_alpha(self, h: torch.Tensor) -> torch.Tensor:
        if self.topology == "cnn":
            return self.gate(spatial_mean(h)).view(-1, 1, 1, 1)
        return self.gate(h.mean(dim=1)).view(-1, 1, 1)


def blend_name(blend: str | int) -> str:
    """Accept a blend name or a BlendAlgorithm index (0 linear, 1 sigmoid, 2 gated)."""
    if isinstance(blend, str):
        if blend not in BLEND_NAMES:
            raise ValueError(f"unknown blend {blend!r}; expected one of {list(BLEND_NAMES)}")
        return blend
    index = int(blend)
    if not 0 <= index < len(BLEND_NAMES):
        raise ValueError(f"unknown blend index {blend!r}; expected 0..{len(BLEND_NAMES) - 1}")
    return BLEND_NAMES[index]


def make_schedule(blend: str, total_steps: int, channels: int, topology: str) -> BlendSchedule:
    name = blend_name(blend)
    if name == "linear":
        return LinearBlend(total_steps)
    if name == "sigmoid":
        return SigmoidBlend(total_steps)
    return GatedBlend(total_steps, channels, topology)
