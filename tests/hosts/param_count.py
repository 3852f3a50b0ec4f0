"""A test helper: the trainable parameters of a module, each shared tensor counted once."""

from torch import nn


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for p in module.parameters() if p.requires_grad}.values())
