"""The doctor's checks of the hand-off between torch and JAX: zero copy both ways on the CPU and the GPU, one
card for both, and the stream order on the GPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from esper_fx.doctor.context import Context


def _zero_copy_both_ways(device: torch.device) -> str:
    from bridge.dlpack import to_jax, to_torch

    tensors = {"f": torch.arange(64, dtype=torch.float32, device=device) * 0.5,
               "i": torch.arange(64, dtype=torch.int32, device=device),
               "b": torch.arange(64, device=device) % 3 == 0}
    arrays = to_jax(tensors).tree
    for name, tensor in tensors.items():
        if arrays[name].unsafe_buffer_pointer() != tensor.data_ptr():
            raise RuntimeError(f"torch -> JAX copied {name} (another buffer)")
        back = to_torch(arrays[name])
        if back.data_ptr() != tensor.data_ptr() or not torch.equal(back, tensor):
            raise RuntimeError(f"JAX -> torch did not return the same buffer for {name}")
    made = jax.device_put(jnp.arange(64, dtype=jnp.float32), next(iter(arrays["f"].devices())))
    if to_torch(made).data_ptr() != made.unsafe_buffer_pointer():
        raise RuntimeError("a JAX-made array was copied on its way to torch")
    return f"float32, int32, bool: same buffer both ways on {device}"


def check_handoff_cpu(ctx: Context) -> str:
    return _zero_copy_both_ways(torch.device("cpu"))


def check_same_gpu(ctx: Context) -> str:
    from bridge.dlpack import to_jax

    tensor = torch.ones(8, device=ctx.torch_device)
    array = to_jax(tensor).tree
    if array.devices() != {ctx.jax_device} or array.unsafe_buffer_pointer() != tensor.data_ptr():
        raise RuntimeError(f"torch {ctx.torch_device} crossed to JAX {array.devices()}, expected {ctx.jax_device}")
    return f"torch {ctx.torch_device} ({torch.cuda.get_device_name(ctx.torch_device)}) is JAX {ctx.jax_device}"


def _slow_ones(device: torch.device) -> torch.Tensor:
    """All ones, after a chain of large matmuls (so a missing wait would read the buffer too early)."""
    ones = torch.ones(2048, 2048, device=device)
    for _ in range(16):
        ones = ones @ ones / 2048.0
    return ones


def check_handoff_cuda(ctx: Context) -> str:
    from bridge.dlpack import to_jax, to_torch

    detail = _zero_copy_both_ways(ctx.torch_device)
    side = torch.cuda.Stream(ctx.torch_device)
    with torch.cuda.device(ctx.torch_device), torch.cuda.stream(side):
        data = torch.zeros(1 << 20, device=ctx.torch_device)
        data.copy_(_slow_ones(ctx.torch_device)[0, 0].expand_as(data))
    total = jax.jit(lambda t: t.sum())(to_jax(data, stream=side).tree)
    if float(total) != float(1 << 20):
        raise RuntimeError("JAX read a torch side stream's tensor before the stream had written it")
    matrix = jax.device_put(jnp.ones((2048, 2048), jnp.float32), ctx.jax_device)
    for _ in range(16):
        matrix = matrix @ matrix / 2048.0
    tensor = to_torch((matrix[:4] * 3).astype(jnp.int32), stream=side)
    with torch.cuda.device(ctx.torch_device), torch.cuda.stream(side):
        summed = tensor.sum()
    side.synchronize()
    if int(summed) != 3 * 4 * 2048:
        raise RuntimeError("a torch side stream read JAX's array before JAX had written it")
    return detail + "; stream order right both ways"
