"""`bridge`: the torch → jax → torch round trip through `dlpack.to_jax` / `dlpack.to_torch`.

For float32 tensors from 1 KB to 64 MB, one round trip is timed, the sizes interleaved; the claim is that
it is zero copy, so its cost is flat in size (ratio largest / smallest median close to 1) and the pointers
match (`unsafe_buffer_pointer() == data_ptr()` both ways). The reference measured in the same run is the
round trip a project without DLPack would write: torch → numpy → `jnp.array` (a copy) → numpy →
`torch.tensor` (a copy), whose cost grows with size.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from bridge import dlpack
from esper_fx.bench.report import fmt_bytes
from esper_fx.bench.settings import BenchSettings, Reps
from esper_fx.bench.timing import Candidate, Timing, measure, measure_interleaved, ratio

KB = 1024
MB = 1024 * KB
FULL_SIZES = (1 * KB, 64 * KB, 1 * MB, 16 * MB, 64 * MB)
QUICK_SIZES = (1 * KB, 64 * KB, 1 * MB)
REPS = Reps(warmup=5, reps=100)
FLOAT32_BYTES = 4
FLATNESS_TARGET = 2.0  # the architecture's claim: round-trip cost within 2x from 1 KB to 64 MB


def roundtrip(tensor: torch.Tensor) -> torch.Tensor:
    """torch → jax → torch through the bridge (zero copy both ways)."""
    return dlpack.to_torch(dlpack.to_jax(tensor).tree)


def copy_roundtrip(tensor: torch.Tensor, jax_device: Any) -> torch.Tensor:
    """The reference: the same round trip by way of host numpy arrays, copying on each side."""
    array = jax.device_put(jnp.array(tensor.cpu().numpy(), copy=True), jax_device)
    return torch.tensor(np.asarray(array), device=tensor.device)


def zero_copy_both_ways(tensor: torch.Tensor) -> bool:
    """True iff the jax array views the tensor's memory and the tensor returned views it too."""
    handoff = dlpack.to_jax(tensor)
    back = dlpack.to_torch(handoff.tree)
    return handoff.tree.unsafe_buffer_pointer() == tensor.data_ptr() == back.data_ptr()


def _bridge_timings(settings: BenchSettings, tensors: dict[int, torch.Tensor]) -> dict[int, Timing]:
    """The bridge round trip at every size, interleaved across sizes (a load burst hits every size alike)."""
    candidates = {n: Candidate(partial(roundtrip, t), settings.device.torch_sync) for n, t in tensors.items()}
    reps = settings.reps(REPS)
    return measure_interleaved(candidates, reps.warmup, reps.reps)


def _copy_timings(settings: BenchSettings, tensors: dict[int, torch.Tensor]) -> dict[int, Timing]:
    """The copying reference, one size after the other (interleaved, a small copy would pay for the page
    faults and frees of the 64 MB one)."""
    device = settings.device
    reps = settings.reps(REPS)
    return {n: measure(Candidate(partial(copy_roundtrip, t, device.jax_device), device.torch_sync),
                       reps.warmup, reps.reps)
            for n, t in tensors.items()}


def _cases(settings: BenchSettings, sizes: tuple[int, ...]) -> list[dict]:
    tensors = {n: torch.randn(n // FLOAT32_BYTES, device=settings.device.torch_device) for n in sizes}
    # The bridge first, then the reference, never interleaved: the copy path frees up to 128 MB per call,
    # and that memory traffic would otherwise land inside the bridge's few microseconds.
    zero_copy = _bridge_timings(settings, tensors)
    copied = _copy_timings(settings, tensors)
    return [
        {"bytes": n, "bridge": zero_copy[n].as_dict(), "copy": copied[n].as_dict(),
         "ratio": ratio(copied[n], zero_copy[n]), "zero_copy": zero_copy_both_ways(t)}
        for n, t in tensors.items()
    ]


def run(settings: BenchSettings) -> dict:
    cases = _cases(settings, settings.sizes(FULL_SIZES, QUICK_SIZES))
    flatness = cases[-1]["bridge"]["median_s"] / cases[0]["bridge"]["median_s"]
    zero_copy = all(c["zero_copy"] for c in cases)
    span = f"{fmt_bytes(cases[0]['bytes'])} → {fmt_bytes(cases[-1]['bytes'])}"
    return {
        "what": "torch->jax->torch round trip of one float32 tensor via dlpack.to_jax / dlpack.to_torch",
        "reference": "copy: torch->numpy->jnp.array(copy)->numpy->torch.tensor (no DLPack)",
        "ratio_definition": "copy / bridge per size; flatness = bridge median at the largest / smallest size",
        "columns": {"case": "bytes", "measured": "bridge", "reference": "copy"},
        "cases": cases,
        "flatness": flatness,
        "zero_copy": zero_copy,
        "target": {"flatness_max": FLATNESS_TARGET, "met": flatness <= FLATNESS_TARGET and zero_copy},
        "headline": f"round trip {span}: largest/smallest = {flatness:.2f}× (target ≤ {FLATNESS_TARGET}×), "
                    f"zero copy at every size: {zero_copy}",
    }
