"""The doctor's checks of the environment: versions, the devices torch and JAX see, JAX's memory settings."""

from __future__ import annotations

import os
import platform
from importlib import metadata

import jax
import torch

from esper_fx.devices import jax_gpus, policy_devices
from esper_fx.doctor.context import Context
from esper_fx.errors import DeviceUnavailableError

PACKAGES = ("torch", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy")


def check_versions(ctx: Context) -> str:
    found = [f"python {platform.python_version()}"]
    for name in PACKAGES:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} missing")
    found.append(f"torch CUDA {torch.version.cuda or 'none'}")
    return ", ".join(found)


def check_devices(ctx: Context) -> str:
    n_torch = torch.cuda.device_count() if torch.cuda.is_available() else 0
    names = [torch.cuda.get_device_name(i) for i in range(n_torch)]
    seen = (f"torch sees {n_torch} CUDA device(s){': ' + ', '.join(names) if names else ''}; "
            f"JAX backend {jax.default_backend()}, devices {[str(d) for d in jax.devices()]}")
    try:
        policy_devices("auto")
    except DeviceUnavailableError as exc:
        raise RuntimeError(f"{seen}. {exc}") from None
    return seen


def check_jax_memory(ctx: Context) -> str:
    settings = {k: os.environ.get(k, "unset") for k in
                ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR")}
    text = ", ".join(f"{k}={v}" for k, v in settings.items())
    if jax_gpus() and settings["XLA_PYTHON_CLIENT_PREALLOCATE"].lower() not in ("false", "0"):
        raise RuntimeError(f"{text}: JAX preallocates most of the GPU memory and leaves torch little; "
                           "set XLA_PYTHON_CLIENT_PREALLOCATE=false")
    stats = ctx.jax_device.memory_stats() if ctx.cuda else None
    if stats:
        text += f"; JAX in use on {ctx.jax_device}: {stats.get('bytes_in_use', 0) / 2**20:.1f} MiB"
    return text
