"""Where a run came from: the code, the packages, the machine, the command and the devices (`collect`).

A run directory keeps it in `provenance.json` from the run's start (so a run that stops or crashes keeps it)
and copies it into `summary.json` at the end; a resume keeps the first start's facts and appends its own to
the record's `resumes` (`with_resume`). `prove.json` holds it too, and report.html shows it in its header.
Everything here is read cheaply (well under half a second: versions come from the package metadata, torch's
from its own version string, and torch is never imported here) and nothing raises: what cannot be found is
null, and a missing git commit says why (`git_note`).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
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
RESUMES = "resumes"  # provenance.json's list of the resumes' records, oldest first
# the keys of a `collect()` record, in its order
FACTS = ("versions", "git", "git_note", "command", "cwd", "host", "platform", "cpu", "torch_threads", "devices",
         "started_utc")


def collect(devices: Mapping[str, Any] | None = None, started: float | None = None) -> dict[str, Any]:
    """This process's provenance as plain JSON values. `devices`: the devices the run uses (`run_devices`);
    `started`: when the work began, seconds since the epoch (default now)."""
    when = datetime.fromtimestamp(time.time() if started is None else started, timezone.utc)
    git, git_note = _safely(git_lookup) or (None, "the git commit could not be read")
    return {
        "versions": {"python": platform.python_version(), **{name: version(name) for name in PACKAGES}},
        "git": git,
        "git_note": git_note,  # why "git" is null (None when it is not)
        "command": list(sys.argv),
        "cwd": _safely(os.getcwd),  # the folder the command ran in: a resume reads relative paths from there
        "host": _safely(socket.gethostname),
        "platform": _safely(platform.platform),
        "cpu": _safely(cpu),
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
    """The version of `package` as the package reports it (None when it is not installed); torch's with its
    local build tag (`torch_version`)."""
    if package == "torch":
        return _safely(torch_version)
    return _safely(lambda: metadata.version(package))


_TORCH_VERSION_LINE = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.MULTILINE)


def torch_version() -> str | None:
    """`torch.__version__`, its local build tag (`+cpu`, `+cu132`) kept, since a build changes the numbers:
    the package metadata of the default CUDA wheels drops it (metadata 2.15.0, torch 2.15.0+cu132). Read from
    the module when this process has imported torch, else from the text of torch/version.py (importing torch
    would be slow), else the metadata; None when torch is not installed."""
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "__version__", None):
        return str(torch.__version__)
    spec = importlib.util.find_spec("torch")  # a top-level package: found, not imported
    if spec is None:
        return None
    for folder in spec.submodule_search_locations or ():
        try:
            found = _TORCH_VERSION_LINE.search((Path(folder) / "version.py").read_text(encoding="utf-8"))
        except OSError:
            continue
        if found:
            return found.group(1)
    return _safely(lambda: metadata.version("torch"))


def git_state(root: Path | None = None) -> dict[str, Any] | None:
    """{"commit", "dirty"} of the source checkout at `root` (default SOURCE_ROOT; dirty: a tracked file
    differs from the commit), or None when `root` is no git checkout (an installed package, a copy of the
    source), git is missing or too slow (`git_lookup` says which)."""
    return git_lookup(root)[0]


def git_lookup(root: Path | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """`git_state` and, when it is None, why (a short sentence; None when the commit was read)."""
    root = SOURCE_ROOT if root is None else Path(root)
    if not (root / ".git").exists():  # not "any repository above": a venv inside another project's checkout
        return None, (f"no git metadata: {root} has no .git (an installed package or a copy of the source), "
                      f"so no commit is recorded")
    commit, why = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return None, f"no commit recorded: `git rev-parse HEAD` in {root} {why}"
    changes, _ = _git(root, "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if changes is None else bool(changes)}, None


def _git(root: Path, *args: str) -> tuple[str | None, str | None]:
    """git's output in `root` (stripped) and None, or None and how it failed (an error, a timeout after
    GIT_TIMEOUT_S, or git missing)."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # `status` must not take the index lock of a checkout in use
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, env=env,
                              timeout=GIT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return None, f"took longer than {GIT_TIMEOUT_S:g} s"
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"could not run ({exc})"
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[0]
        return None, f"failed ({said})"
    return done.stdout.strip(), None


def with_resume(earlier: Any, resume: Mapping[str, Any],
                source: str | os.PathLike | None = None) -> dict[str, Any]:
    """The provenance record of a resumed run: `earlier` (the run's provenance.json as read, None when it
    could not be read) with `resume` (this process's `collect()`, and where it resumed) appended to its
    `resumes`. The first start's facts are kept as they are; a record that cannot be read keeps none, its
    facts null and a `first_start_note` saying why (`source`: the file it came from)."""
    if isinstance(earlier, Mapping):
        record = dict(earlier)
        resumes = record.get(RESUMES)
        kept = list(resumes) if isinstance(resumes, list) else []
    else:
        where = source if source is not None else PROVENANCE_NAME
        record = {key: None for key in FACTS}
        record["first_start_note"] = f"the first start's facts are unknown: {where} was missing or unreadable"
        kept = []
    record[RESUMES] = [*kept, dict(resume)]
    return record



def cpu() -> dict[str, Any]:
    """The CPU's model name and the vector instruction set torch's CPU kernels use on it (`AVX2`, `AVX512`, ...;
    None when this process has not imported torch): two CPUs that differ in it sum in different orders, so a
    run's numbers differ in their last digits, and twelve epochs of training amplify them."""
    model = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), None)
    except OSError:
        pass
    torch = sys.modules.get("torch")
    capability = _safely(lambda: str(torch.backends.cpu.get_cpu_capability())) if torch is not None else None
    return {"model": model or platform.processor() or None, "torch_capability": capability}


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
