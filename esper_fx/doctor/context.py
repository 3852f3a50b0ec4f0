"""What every check of the doctor sees (`Context`) and may raise (`NotRun`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass
class Context:
    """What every check sees: the torch and JAX devices, and a scratch directory."""

    torch_device: torch.device
    jax_device: Any
    scratch: Path
    cli_run: Path | None = None  # the run directory of cli_run (checkpoint checks use it)

    @property
    def cuda(self) -> bool:
        return self.torch_device.type == "cuda"


class NotRun(Exception):
    """Raised by a check that cannot run here; the message says why."""
