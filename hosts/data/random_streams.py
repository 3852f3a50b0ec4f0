"""Pure seed mixing for every data random stream (BEHAVIOUR §7.2 item 6).

`mix_seed(a, b, ...)` folds a tuple of integers into one 63-bit seed with SplitMix64 steps, so a
stream seeded from (seed, batch_idx, epoch[, env]) is reproducible from those numbers alone: no
generator runs on across batches, and resuming at batch k reproduces batch k exactly.
"""

from __future__ import annotations

import torch

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _splitmix64(z: int) -> int:
    z = (z + _GOLDEN) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def mix_seed(*values: int) -> int:
    """A pure 63-bit seed from any number of integers (order matters; negative values are allowed)."""
    state = 0x243F6A8885A308D3  # pi's fraction bits: a fixed, arbitrary start
    for value in values:
        state = _splitmix64(state ^ (int(value) & _MASK64))
    return state & ((1 << 63) - 1)


def make_generator(device: torch.device | str, *values: int) -> torch.Generator:
    """A torch.Generator on `device`'s type, seeded with mix_seed(*values). Never the global RNG."""
    device = torch.device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(mix_seed(*values))
    return gen
