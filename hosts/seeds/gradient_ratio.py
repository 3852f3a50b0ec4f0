"""Gradient-activity ratio, the G2 input (BEHAVIOUR §2.13).

`gradient_stats(model)` runs after backward() on the last training step of an epoch and returns
squared gradient norms as device tensors (no host sync: no .item(), no python bool of a tensor).
`gradient_ratio` turns them into the parameter-normalised ratio; `ratio_ema` keeps the per-slot EMA
(the env pool holds one value per slot). The loop reads the values back once per epoch and writes them into the slots.
"""

from __future__ import annotations

import math
from typing import Iterable, NamedTuple

import torch
from torch import nn

from esper_fx.contracts.stages import SeedStage

GRADIENT_RATIO_EMA_DECAY = 0.9  # per epoch
GRADIENT_NORM_EPS = 1e-8

MEASURED_STAGES = (SeedStage.TRAINING, SeedStage.BLENDING)


class SquaredNorm(NamedTuple):
    sq: torch.Tensor  # 0-dim float32 on the parameters' device: Σ‖grad‖²
    numel: int  # Σ numel over the parameters that have a gradient


class GradientStats(NamedTuple):
    host: SquaredNorm
    seeds: dict[str, SquaredNorm]  # slot id -> that slot's seed (gate excluded)


def squared_grad_norm(params: Iterable[nn.Parameter], device: torch.device | None = None) -> SquaredNorm:
    """Σ‖grad‖² (float32, on device) and Σ numel over parameters whose grad is not None."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return SquaredNorm(torch.zeros((), device=device), 0)
    sq = torch.stack([torch.linalg.vector_norm(g.detach(), dtype=torch.float32) for g in grads]).square().sum()
    return SquaredNorm(sq, sum(g.numel() for g in grads))


def gradient_stats(model, slot_ids: Iterable[str] | None = None) -> GradientStats:
    """Host and per-slot seed gradient statistics for slots whose seed is in TRAINING or BLENDING.

    `model` is a MorphogeneticModel after backward (unscale first under fp16 AMP). `slot_ids` restricts
    the slots considered (default: every enabled slot)."""
    host_params = model.host_parameters()
    device = host_params[0].device if host_params else None
    host = squared_grad_norm(host_params, device)
    ids = model.canonical_slots if slot_ids is None else slot_ids
    seeds = {
        s: squared_grad_norm(model.slot(s).seed_parameters(), device)
        for s in ids
        if model.slot(s).stage in MEASURED_STAGES
    }
    return GradientStats(host, seeds)


def gradient_ratio(host: SquaredNorm, seed: SquaredNorm) -> torch.Tensor:
    """(√seed_sq/√n_seed) / (√host_sq/√n_host + 1e-8); 0 if a norm < 1e-8 or a count is 0; no upper clamp."""
    host_norm, seed_norm = torch.sqrt(host.sq), torch.sqrt(seed.sq)
    if host.numel == 0 or seed.numel == 0:
        return torch.zeros_like(seed_norm)
    ratio = (seed_norm / math.sqrt(seed.numel)) / (host_norm / math.sqrt(host.numel) + GRADIENT_NORM_EPS)
    too_small = (host_norm < GRADIENT_NORM_EPS) | (seed_norm < GRADIENT_NORM_EPS)
    return torch.where(too_small, torch.zeros_like(ratio), ratio)


def seed_gradient_norm(seed: SquaredNorm) -> torch.Tensor:
    """‖g_seed‖ = √seed_sq, the telemetry g of BEHAVIOUR §8.4."""
    return torch.sqrt(seed.sq)


def ratio_ema(previous, ratio):
    """First value as is, then 0.9·ema + 0.1·ratio. Works on floats and tensors alike."""
    if previous is None:
        return ratio
    return GRADIENT_RATIO_EMA_DECAY * previous + (1.0 - GRADIENT_RATIO_EMA_DECAY) * ratio

