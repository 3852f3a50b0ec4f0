"""The run's devices, resolved and checked here and nowhere else (BEHAVIOUR §7.1).

    policy_devices(config.device)          # torch's policy device and the same device as JAX names it
    torch_device("auto")                   # cuda:0 when torch sees CUDA, else the CPU: the one `auto` rule

A device name is `auto`, `cpu` or `cuda:N`. `auto` is cuda:0 when torch sees CUDA, else the CPU; JAX must
then have that device too, or the run is refused with the hint to install JAX's CUDA plugin (the two halves
never run on different devices). A CUDA device needs an explicit index that torch (and, for the policy, JAX)
sees. Every problem is a `DeviceUnavailableError` (or, for a name without its index, a `ConfigError`): one
line, exit 2. The run, its preflight, the env pools (in process and Ray), `doctor` and `bench` all ask here.

The torch half imports no jax: jax loads only where a JAX device is resolved (`policy_devices`, `jax_gpus`),
so the env pools' devices (`esper_fx.training.pools.pool_settings`) are resolved without it.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

from esper_fx.config import TrainingConfig
from esper_fx.errors import ConfigError, DeviceUnavailableError

# the fix for "torch sees a GPU, JAX does not", in every message that says so
JAX_CUDA_HINT = "install JAX's CUDA plugin: pip install -e '.[cuda12]' or '.[cuda13]'"


def policy_jax_device(config: TrainingConfig) -> Any:
    """The JAX device a run's controller runs on (`policy_devices` of its `device`)."""
    return policy_devices(config.device)[1]


def torch_device(name: str) -> torch.device:
    """The torch device `name` stands for: `auto` is cuda:0 when torch sees CUDA, else the CPU; `cuda:N`
    must be a device torch sees."""
    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if device.index is None:
            raise ConfigError(f"CUDA device {name!r} needs an explicit index, e.g. 'cuda:0'")
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if device.index >= count:
            raise DeviceUnavailableError(f"device {name!r} is not available: torch sees {count} CUDA device(s) on "
                                         f"this machine (run on the CPU with --device cpu, or check the machine "
                                         f"with python -m esper_fx.doctor)")
    return device


def env_devices(config: TrainingConfig) -> tuple[torch.device, ...]:
    """Env i's device for every env of a TrainingConfig: `env_devices[i % len]`, or `device` for every env."""
    listed = [torch_device(name) for name in (config.env_devices or (config.device,))]
    return tuple(listed[i % len(listed)] for i in range(config.n_envs))


def policy_devices(name: str) -> tuple[torch.device, Any]:
    """The policy device `name` on both sides: torch's (`torch_device`) and the same device as JAX names it.
    An `auto` for which torch chose a GPU that JAX lacks is refused, not moved to the CPU."""
    device = torch_device(name)
    import jax

    if device.type == "cpu":
        return device, jax.devices("cpu")[0]
    gpus = jax_gpus()
    if device.index < len(gpus):
        return device, gpus[device.index]
    if name == "auto":
        raise DeviceUnavailableError(
            "device 'auto': torch sees a CUDA device but JAX has no GPU backend, so the two halves would "
            f"run on different devices; {JAX_CUDA_HINT}, or pass --device cpu")
    raise DeviceUnavailableError(f"device {name!r} is not available to JAX ({len(gpus)} GPU(s); {JAX_CUDA_HINT})")


def jax_gpus() -> list:
    """The GPUs JAX sees (none when it has no GPU backend)."""
    import jax

    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


def on_cuda(names: Iterable[str]) -> bool:
    """Whether any of these device names runs on CUDA (`auto` by the one rule), from the names alone: a
    `cuda:N` counts whether or not it exists (resolving it says so)."""
    names = [str(name) for name in names]
    return any(name.startswith("cuda") for name in names) or ("auto" in names and torch_device("auto").type == "cuda")


def envs_on_cuda(config: TrainingConfig) -> bool:
    """Whether an env of a TrainingConfig runs on CUDA (`on_cuda` of its env devices)."""
    return on_cuda(config.env_devices or (config.device,))
