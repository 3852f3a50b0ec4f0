"""Where a run came from: the code, the packages, the machine, the command and the devices (`collect`).

A run directory keeps it in `provenance.json` from the run's start (so a run that stops or crashes keeps it)
and copies it into `summary.json` at the end; `prove.json` holds it too, and report.html shows it in its
header. Everything here is read cheaply (well under half a second: versions come from the package metadata,
and torch is asked only when the process has imported it) and nothing raises: what cannot be found is null.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

PROVENANCE_NAME = "provenance.json"
PACKAGES = ("esper_fx", "torch", "jax", "jaxlib", "flax", "optax", "numpy", "ray")
GIT_TIMEOUT_S = 1.0
# the repository that holds the esper_fx package, when it runs from a source checkout (an editable install)
SOURCE_ROOT = Path(__file__).resolve().parents[2]


def collect(devices: Mapping[str, Any] | None = None, started: float | None = None) -> dict[str, Any]:
    """This process's provenance as plain JSON values. `devices`: the devices the run uses (`run_devices`);
    `started`: when the work began, seconds since the epoch (default now)."""
    when = datetime.fromtimestamp(time.time() if started is None else started, timezone.utc)
    return {
        "versions": {"python": platform.python_version(), **{name: version(name) for name in PACKAGES}},
        "git": _safely(git_state),
        "command": list(sys.argv),
        "host": _safely(socket.gethostname),
        "platform": _safely(platform.platform),
        "torch_threads": _safely(torch_threads),
        "devices": dict(devices) if devices is not None else None,
        "started_utc": when.isoformat(timespec="seconds"),
    }


def _safely(read: Callable[[], Any]) -> Any:
    """read(), or None when it fails in any way (provenance never costs a run)."""
    try:
        return read()
    except Exception:  # noqa: BLE001 - a fact that cannot be read is null
        return None


def version(package: str) -> str | None:
    """The installed version of `package` (None when it is not installed)."""
    return _safely(lambda: metadata.version(package))


def git_state(root: Path = SOURCE_ROOT) -> dict[str, Any] | None:
    """{"commit", "dirty"} of the source checkout at `root` (dirty: a tracked file differs from the commit),
    or None when `root` is no git checkout (an installed package), git is missing or too slow."""
    if not (root / ".git").exists():  # not "any repository above": a venv inside another project's checkout
        return None
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return None
    changes = _git(root, "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if changes is None else bool(changes)}


def _git(root: Path, *args: str) -> str | None:
    """git's output in `root` (stripped), or None when it fails or takes longer than GIT_TIMEOUT_S."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # `status` must not take the index lock of a checkout in use
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, env=env,
                              timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def torch_threads() -> int | None:
    """torch's intra-op thread count, when this process has imported torch (importing it would be slow)."""
    torch = sys.modules.get("torch")
    return None if torch is None else int(torch.get_num_threads())


def run_devices(device: str | None, env_devices: Sequence[str] | None) -> dict[str, Any]:
    """The devices a run's config names, resolved in this process as the run resolves them: the policy's,
    the envs' (env i runs on `envs[i % len]`) and the names of the CUDA devices torch sees. Ray env workers
    resolve theirs on their own machines."""
    listed = list(env_devices or [device])
    return {"policy": _resolved(device), "envs": [_resolved(d) for d in listed], "cuda": _safely(cuda_names)}


def _resolved(name: str | None) -> str | None:
    """"auto" as the run resolves it (`esper_fx.devices.torch_device`), other names as they are."""
    if name != "auto" or "torch" not in sys.modules:
        return name

    def resolve() -> str:
        from esper_fx.devices import torch_device

        return str(torch_device(name))

    return _safely(resolve) or name


def cuda_names() -> list[str] | None:
    """The names of the CUDA devices torch sees, once this process's torch has started CUDA (a run on a GPU
    has; asking a process that has not would start it, which is slow): None before that."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
