"""Floating-point operations of a network, counted from its layers' shapes (per sample).

One pure function per layer kind gives that layer's forward FLOPs for one sample from its shapes:

    conv2d      2·(C_in/groups)·k_h·k_w · C_out·H_out·W_out   (+ C_out·H_out·W_out with a bias)
    linear      2·in·out · rows                               (+ out·rows with a bias; rows = vectors per sample)
    norm        NORM_FLOPS_PER_ELEMENT · elements             (batch/group/layer norm: subtract, divide, scale, shift)
    activation  1 · elements                                   (ReLU, GELU, sigmoid, tanh: one op each)
    max_pool    (k_h·k_w − 1) · output elements                (comparisons)

A multiply-add counts 2. The backward pass of a layer counts BACKWARD_FACTOR (2) times its forward: the
gradient with respect to the input and the one with respect to the weights each cost about one forward
(the usual convention; a layer whose input needs no gradient still counts 2). Work done outside modules
(residual additions, blends, the global mean, functional attention products) is not counted: for the
small CNNs of this project it is well under 1% of the total.

`forward_flops(module, input_shape)` runs the module with its tensors swapped for meta-device ones (no
data, no random numbers, nothing of the real module read or changed), records every leaf module's input and output shapes with
forward hooks and sums the per-kind counts; a leaf kind that holds parameters but has no count raises.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Callable, Sequence

import torch
from torch import nn

BACKWARD_FACTOR = 2
NORM_FLOPS_PER_ELEMENT = 4
META_BATCH = 2  # samples in the traced (data-free) batch


def conv2d_flops(c_in: int, c_out: int, kernel: Sequence[int], groups: int, out_hw: Sequence[int],
                 bias: bool) -> int:
    """Forward FLOPs of one sample through a 2-D convolution."""
    outputs = c_out * out_hw[0] * out_hw[1]
    return 2 * (c_in // groups) * kernel[0] * kernel[1] * outputs + (outputs if bias else 0)


def linear_flops(in_features: int, out_features: int, rows: int, bias: bool) -> int:
    """Forward FLOPs of `rows` vectors (of one sample) through a linear layer."""
    return rows * (2 * in_features * out_features + (out_features if bias else 0))


def norm_flops(elements: int) -> int:
    """Forward FLOPs of a batch, group or layer norm over `elements` values of one sample."""
    return NORM_FLOPS_PER_ELEMENT * elements


def activation_flops(elements: int) -> int:
    return elements


def max_pool_flops(kernel: Sequence[int], out_elements: int) -> int:
    return (kernel[0] * kernel[1] - 1) * out_elements


def backward_flops(forward: int) -> int:
    return BACKWARD_FACTOR * forward


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _elements(shape: Sequence[int]) -> int:
    return math.prod(shape[1:])  # per sample: the batch dimension left out


def _conv(m: nn.Conv2d, x: Sequence[int], y: Sequence[int]) -> int:
    return conv2d_flops(m.in_channels, m.out_channels, m.kernel_size, m.groups, y[2:], m.bias is not None)


def _linear(m: nn.Linear, x: Sequence[int], y: Sequence[int]) -> int:
    rows = math.prod(x[1:-1]) if len(x) > 2 else 1
    return linear_flops(m.in_features, m.out_features, rows, m.bias is not None)


_LAYER_COUNTS: dict[type, Callable[[nn.Module, Sequence[int], Sequence[int]], int]] = {
    nn.Conv2d: _conv,
    nn.Linear: _linear,
    nn.BatchNorm2d: lambda m, x, y: norm_flops(_elements(y)),
    nn.GroupNorm: lambda m, x, y: norm_flops(_elements(y)),
    nn.LayerNorm: lambda m, x, y: norm_flops(_elements(y)),
    nn.ReLU: lambda m, x, y: activation_flops(_elements(y)),
    nn.GELU: lambda m, x, y: activation_flops(_elements(y)),
    nn.Sigmoid: lambda m, x, y: activation_flops(_elements(y)),
    nn.Tanh: lambda m, x, y: activation_flops(_elements(y)),
    nn.MaxPool2d: lambda m, x, y: max_pool_flops(_pair(m.kernel_size), _elements(y)),
    nn.Identity: lambda m, x, y: 0,
    nn.Embedding: lambda m, x, y: 0,  # a table lookup
    nn.Dropout: lambda m, x, y: 0,
}


def layer_flops(module: nn.Module, in_shape: Sequence[int], out_shape: Sequence[int]) -> int:
    """Forward FLOPs per sample of one leaf module given its input and output shapes ([N, ...])."""
    for kind in type(module).__mro__:
        if kind in _LAYER_COUNTS:
            return int(_LAYER_COUNTS[kind](module, in_shape, out_shape))
    if any(True for _ in module.parameters(recurse=False)):
        raise ValueError(f"no FLOP count for layer kind {type(module).__name__}")
    return 0


def _is_leaf(module: nn.Module) -> bool:
    return next(module.children(), None) is None


@contextmanager
def _meta_tensors(module: nn.Module):
    """Every parameter and buffer of `module` swapped for a data-free meta tensor of the same shape and
    layout for the body, then put back: the module's own tensors are neither read nor changed."""
    saved = []
    for m in module.modules():
        for store in (m._parameters, m._buffers):
            for name, t in store.items():
                if t is not None:
                    saved.append((store, name, t))
                    store[name] = torch.empty_like(t, device="meta")
    try:
        yield
    finally:
        for store, name, t in saved:
            store[name] = t


def traced_flops(module: nn.Module, run: Callable[[nn.Module], object]) -> int:
    """Forward FLOPs per sample of `run(module)` on meta tensors (its inputs: `meta_input`, two samples so
    that a training-mode batch norm is legal; every count is per sample)."""
    total = 0

    def hook(m, inputs, output):
        nonlocal total
        x = inputs[0].shape if inputs and isinstance(inputs[0], torch.Tensor) else output.shape
        total += layer_flops(m, tuple(x), tuple(output.shape))

    handles = [m.register_forward_hook(hook) for m in module.modules() if _is_leaf(m)]
    try:
        with torch.no_grad(), _meta_tensors(module):
            run(module)
    finally:
        for h in handles:
            h.remove()
    return total


def meta_input(shape: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A data-free tensor of `shape` (batch included); images in the channels_last layout the CNNs use."""
    layout = torch.channels_last if len(shape) == 4 else torch.contiguous_format
    return torch.empty(tuple(shape), device="meta", dtype=dtype, memory_format=layout)


def forward_flops(module: nn.Module, input_shape: Sequence[int], dtype: torch.dtype = torch.float32) -> int:
    """Forward FLOPs of one sample of shape `input_shape` (no batch dimension) through `module`."""
    x = meta_input((META_BATCH, *input_shape), dtype)
    return traced_flops(module, lambda m: m(x))
