"""Where a benchmark runs: the torch device, the JAX device, and how each side waits for its work."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import torch

from esper_fx.devices import policy_devices

DEVICE_CHOICES = ("cpu", "cuda")


@dataclasses.dataclass(frozen=True)
class BenchDevice:
    name: str  # "cpu" or "cuda"
    torch_device: torch.device
    jax_device: Any

    def torch_sync(self, _result: Any = None) -> None:
        """Wait for queued torch work (a no-op on the CPU, where torch ops run synchronously)."""
        if self.torch_device.type == "cuda":
            torch.cuda.synchronize(self.torch_device)

    @staticmethod
    def jax_sync(result: Any) -> None:
        jax.block_until_ready(result)

    def describe(self) -> dict[str, Any]:
        info = {
            "device": self.name,
            "jax_backend": jax.default_backend(),
            "jax_device": str(self.jax_device),
            "torch_device": str(self.torch_device),
            "torch_threads": torch.get_num_threads(),
        }
        if self.torch_device.type == "cuda":
            info["gpu"] = torch.cuda.get_device_name(self.torch_device)
        return info


def resolve(name: str) -> BenchDevice:
    """The BenchDevice for "cpu" or "cuda" (cuda:0), resolved as a run's policy device is
    (`esper_fx.devices.policy_devices`): DeviceUnavailableError if torch or JAX cannot use it."""
    if name not in DEVICE_CHOICES:
        raise ValueError(f"unknown device {name!r}; expected one of {list(DEVICE_CHOICES)}")
    return BenchDevice(name, *policy_devices("cuda:0" if name == "cuda" else name))
