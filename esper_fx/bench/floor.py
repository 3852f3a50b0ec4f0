"""The FLOP floor of an env-epoch: multiply-adds counted per layer, at a measured matmul rate.

`layer_macs(model, sample)` runs one forward pass with hooks on every convolution and linear layer and
records, per layer, the multiply-adds of one sample and whether the layer's input needs a gradient.
Training a sample costs each layer its forward multiply-adds, as many again for the weight gradient, and
as many again for the input gradient unless the input is the data itself (the first layer). Validation
costs the forward pass. `matmul_rate` is the best single-call rate of a large float32 matmul on the device:
what dense arithmetic reaches there. floor = 2 · multiply-adds / rate.

Everything else an epoch does (batch norm, activations, pooling, the optimiser, data) is not counted, so
the floor is a bound no implementation reaches; the benchmark reports how many floors an epoch takes.
"""

from __future__ import annotations

import dataclasses
import time

import torch
from torch import nn

MATMUL_SIZE = 1024  # n of the n×n×n float32 matmul whose best time gives the rate
MATMUL_REPS = 20


@dataclasses.dataclass(frozen=True)
class LayerMacs:
    name: str
    macs: int  # multiply-adds of one sample's forward pass
    input_grad: bool  # the backward pass computes this layer's input gradient


def _macs(module: nn.Module, output: torch.Tensor) -> int:
    """Multiply-adds per sample of one conv or linear call: each output value sums fan-in products."""
    per_sample = output[0].numel()
    if isinstance(module, nn.Conv2d):
        kh, kw = module.kernel_size
        return per_sample * (module.in_channels // module.groups) * kh * kw
    return per_sample * module.in_features


def layer_macs(model: nn.Module, sample: torch.Tensor) -> list[LayerMacs]:
    """Per conv / linear layer, in call order: multiply-adds per sample and whether its input needs a grad.

    `sample` is a batch of at least one input; the model's parameters must require grad as in training.
    The model runs once in eval mode (no batch-norm statistics move) and is put back in its mode."""
    records: list[LayerMacs] = []
    names = {module: name for name, module in model.named_modules()}

    def hook(module, inputs, output):
        records.append(LayerMacs(names[module], _macs(module, output), bool(inputs[0].requires_grad)))

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad():
            model(sample)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return records


def epoch_macs(layers: list[LayerMacs], train_samples: int, val_samples: int) -> int:
    """Multiply-adds of an epoch: forward + weight grad (+ input grad) per training sample, forward per
    validation sample."""
    train = sum(2 * layer.macs + (layer.macs if layer.input_grad else 0) for layer in layers)
    forward = sum(layer.macs for layer in layers)
    return train_samples * train + val_samples * forward


def matmul_rate(device: torch.device, sync=lambda: None, size: int = MATMUL_SIZE, reps: int = MATMUL_REPS) -> float:
    """FLOP/s of the fastest of `reps` float32 size×size×size matmuls on `device` (torch's current threads)."""
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    out = torch.empty(size, size, device=device)
    torch.mm(a, b, out=out)
    sync()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        sync()
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best
