"""`python -m esper_fx.doctor [--device cuda:N] [--json PATH]`: does esper_fx work on this machine?

The one command to run on a new machine. It reports the versions and the devices torch and JAX see,
then runs each check and prints it as `passed`, `failed` (with the reason) or `not run` (with why):

    versions          python, torch (its CUDA), jax, jaxlib, flax, optax, orbax, numpy
    devices           what torch and JAX see; fails when torch has a GPU and JAX none (--device auto refuses)
    same_gpu          torch's cuda:N and JAX's GPU N are one card: a tensor crosses DLPack onto that device
    handoff_cpu       the zero-copy hand-off both ways on the CPU (same buffer, same values)
    handoff_cuda      the same on the GPU, and the stream order: JAX reads what a torch side stream wrote,
                      a torch side stream reads what JAX wrote, no host synchronisation in between
    amp_fp16_no_sync  an fp16 AMP env-epoch that never synchronises with the host (torch's sync debug mode)
    amp_bf16_no_sync  the same in bf16
    streams           per-env streams against one stream: the same results, and both timings
    memory_flat       reserved GPU memory flat over several episodes (streams reused)
    cli_run           a short training run through the CLI on the device
    checkpoint        that run's checkpoint restored onto its own device
    gpu_checkpoint_on_cpu  a GPU-written checkpoint restored onto the CPU
    jax_memory        JAX's memory settings (preallocation must be off beside torch)

Without CUDA the CUDA checks are `not run`, never `passed`. Exit 0 when nothing failed, 1 when a check
failed, 2 for a bad command line (one line on stderr, nothing written).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform
import stat
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import torch

from esper_fx.config import POLICY_DEVICE
from esper_fx.devices import jax_gpus, policy_devices
from bridge.jax_env import ensure_jax_env
from esper_fx.errors import EXIT_OK, EXIT_RUN_FAILED, EXIT_SETUP_ERROR, CommandParser, ConfigError
from esper_fx.errors import DeviceUnavailableError

PASSED, FAILED, NOT_RUN = "passed", "failed", "not run"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = EXIT_OK, EXIT_RUN_FAILED, EXIT_SETUP_ERROR  # esper_fx.errors' table
PACKAGES = ("torch", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy")
# the small workload of the pool checks and the CLI run (shapes10 at a few hundred samples)
SMALL_RUN = dict(task="shapes10", controller="ppo_lstm", n_envs=2, max_epochs=3, n_episodes=2, seed=3,
                 synthetic_train_samples=256, synthetic_test_samples=64, batch_size_per_env=32,
                 max_train_batches=2, checkpoint_every=1)
SMALL_POOL = dict(task="shapes10", n_envs=3, max_epochs=6, slots=("r0c0", "r0c1"), batch_size_per_env=128,
                  max_train_batches=4, synthetic_train_samples=2048, synthetic_test_samples=512, val_samples=512)
MEMORY_EPISODES = 5
MEMORY_TOLERANCE = 1.05  # reserved memory may grow 5% after the second episode


class UsageError(ConfigError):
    """A bad command line: one line, exit 2."""


@dataclass
class Check:
    name: str
    status: str
    detail: str
    seconds: float = 0.0


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


# ----------------------------------------------------------------------------------------------
# the command line
# ----------------------------------------------------------------------------------------------


def build_parser() -> CommandParser:
    p = CommandParser("esper_fx.doctor", description="Check that esper_fx works on this machine.")
    p.add_argument("--device", default="auto", help="auto (cuda:0 if torch and JAX both see a GPU, else cpu), cpu or cuda:N")
    p.add_argument("--json", metavar="PATH", help="also write the report as JSON to PATH")
    return p


def resolve_devices(name: str) -> tuple[torch.device, Any]:
    """The torch and JAX devices of --device (`esper_fx.devices`); UsageError (naming --device) if either side
    lacks it. An `auto` the two halves cannot share runs the checks on the CPU (and `devices` fails, saying why)."""
    if not POLICY_DEVICE.fullmatch(name):
        raise UsageError(f"argument --device: expected auto, cpu or cuda:N (got {name!r})")
    try:
        return policy_devices(name)
    except DeviceUnavailableError as exc:
        if name == "auto":
            return policy_devices("cpu")
        raise UsageError(f"argument --device: {exc}") from None


def check_json_path(path: str | None) -> None:
    """--json names a file that can be written, checked before the checks run (they take up to a minute):
    its folder exists, it is no folder, and the file (a device such as /dev/full included) or its folder
    takes a write (a read-only mount, a folder or file without write permission)."""
    if path is None:
        return
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise UsageError(f"argument --json: directory {parent} does not exist")
    if Path(path).is_dir():
        raise UsageError(f"argument --json: {path} is a directory")
    reason = _unwritable(Path(path))
    if reason is not None:
        raise UsageError(f"argument --json: cannot write {path}: {reason}")


def _unwritable(path: Path) -> str | None:
    """Why `path` cannot be written, found without changing it (None: it can). An existing file is opened for
    writing and given an empty write, which a full device refuses; a new file needs a writable folder."""
    if path.exists():
        if stat.S_ISFIFO(path.stat().st_mode):
            return None  # (opening a pipe waits for its reader)
        try:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"")
            finally:
                os.close(fd)
        except OSError as exc:
            return exc.strerror or type(exc).__name__
        return None
    parent = path.resolve().parent
    if os.access(parent, os.W_OK | os.X_OK):
        return None
    return "Read-only file system" if os.statvfs(parent).f_flag & os.ST_RDONLY else "Permission denied"


def main(argv: Sequence[str] | None = None) -> int:
    ensure_jax_env(warn=False)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        check_json_path(args.json)
        torch_device, jax_device = resolve_devices(args.device)
    except ConfigError as exc:
        return parser.fail(exc)
    with tempfile.TemporaryDirectory(prefix="esper_fx_doctor_") as scratch:
        checks = run_checks(Context(torch_device, jax_device, Path(scratch)), print_check)
    if args.json:
        report = {"device": str(torch_device), "jax_device": str(jax_device),
                  "ok": not any(c.status == FAILED for c in checks), "checks": [asdict(c) for c in checks]}
        try:
            Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        except OSError as exc:  # (the disk filled meanwhile)
            return parser.fail(OSError(f"cannot write --json {args.json}: {exc.strerror or exc}"))
    failed = [c.name for c in checks if c.status == FAILED]
    print(f"\n{len(checks) - len(failed)} of {len(checks)} checks did not fail"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return EXIT_FAILED if failed else EXIT_OK


def print_check(check: Check) -> None:
    print(f"{check.status:>8}  {check.name:<22} {check.detail}", flush=True)


def run_checks(ctx: Context, report: Callable[[Check], None] = lambda c: None) -> list[Check]:
    """Every check in order; one that raises fails with the exception's first line."""
    out = []
    for name, needs_cuda, fn in CHECKS:
        started = time.perf_counter()
        if needs_cuda and not ctx.cuda:
            check = Check(name, NOT_RUN, f"needs a CUDA device (running on {ctx.torch_device})")
        else:
            try:
                check = Check(name, PASSED, fn(ctx))
            except NotRun as why:
                check = Check(name, NOT_RUN, str(why))
            except Exception as exc:  # noqa: BLE001 - a check that breaks has failed; say how
                check = Check(name, FAILED, _first_line(exc))
        check.seconds = round(time.perf_counter() - started, 2)
        report(check)
        out.append(check)
    return out


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


# ----------------------------------------------------------------------------------------------
# versions, devices, JAX memory
# ----------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------
# the hand-off
# ----------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------
# the env pool on the device
# ----------------------------------------------------------------------------------------------


def _pool(ctx: Context, **overrides):
    from esper_fx.config import TrainingConfig
    from esper_fx.training.pools import pool_settings
    from hosts.env import EnvPool

    use_streams = overrides.pop("use_streams", True)
    config = TrainingConfig(**{**SMALL_POOL, "device": str(ctx.torch_device), **overrides})
    pool = EnvPool(pool_settings(config), use_streams=use_streams)
    pool.build_envs(0)
    return pool


def _actions(pool, op: int) -> np.ndarray:
    """Every env's action: `op` on slot 1 with blueprint 1, blend 1 and the standard tempo."""
    from esper_fx.contracts.actions import DEFAULT_TEMPO

    return np.array([(1, 1, 1, op, DEFAULT_TEMPO)] * pool.n_active, dtype=np.int32)


def _epochs(pool, epochs: int) -> list[dict]:
    """Germinate in r0c1, then wait; the signals of every epoch."""
    from esper_fx.contracts.actions import LifecycleOp

    out = []
    for t in range(epochs):
        out.append(pool.train_and_validate())
        pool.apply(_actions(pool, int(LifecycleOp.GERMINATE if t == 0 else LifecycleOp.WAIT)))
    return out


def _amp_no_sync(ctx: Context, dtype: str) -> str:
    pool = _pool(ctx, amp=True, amp_dtype=dtype)
    _epochs(pool, 2)  # a seed and its optimizer exist from here on
    torch.cuda.synchronize(ctx.torch_device)
    torch.cuda.set_sync_debug_mode("error")
    try:
        pool.train_epoch()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    pool.validate()
    loss = pool.signals()["train_loss"]
    if not torch.isfinite(loss).all():
        raise RuntimeError(f"non-finite training loss in {dtype}")
    return f"{pool.steps_per_epoch} steps x {pool.n_active} envs in {dtype}, no host synchronisation"


def check_amp_fp16(ctx: Context) -> str:
    return _amp_no_sync(ctx, "float16")


def check_amp_bf16(ctx: Context) -> str:
    return _amp_no_sync(ctx, "bfloat16")


def check_streams(ctx: Context) -> str:
    timings, results = {}, {}
    for use_streams in (True, False):
        pool = _pool(ctx, use_streams=use_streams)
        _epochs(pool, 1)  # warm-up: cuDNN autotuning, allocator
        torch.cuda.synchronize(ctx.torch_device)
        started = time.perf_counter()
        results[use_streams] = _epochs(pool, 3)
        torch.cuda.synchronize(ctx.torch_device)
        timings[use_streams] = (time.perf_counter() - started) / 3
    for a, b in zip(results[True], results[False]):
        if not torch.allclose(a["val_loss"], b["val_loss"], rtol=1e-2, atol=1e-2):
            raise RuntimeError(f"per-env streams and one stream disagree: {a['val_loss']} vs {b['val_loss']}")
    return (f"per-env streams {timings[True] * 1e3:.1f} ms/epoch, one stream {timings[False] * 1e3:.1f} ms/epoch "
            f"({timings[False] / timings[True]:.2f}x), same results")


def check_memory_flat(ctx: Context) -> str:
    pool = _pool(ctx)
    reserved = []
    for b in range(MEMORY_EPISODES):
        pool.build_envs(b)
        _epochs(pool, 3)
        torch.cuda.synchronize(ctx.torch_device)
        reserved.append(torch.cuda.memory_reserved(ctx.torch_device))
    mib = [f"{r / 2**20:.0f}" for r in reserved]
    if max(reserved[2:]) > reserved[1] * MEMORY_TOLERANCE:
        raise RuntimeError(f"reserved memory grows over episodes: {mib} MiB")
    return f"reserved {mib} MiB over {MEMORY_EPISODES} episodes; {len(pool.streams)} streams reused"


# ----------------------------------------------------------------------------------------------
# the CLI and checkpoints
# ----------------------------------------------------------------------------------------------


def check_cli_run(ctx: Context) -> str:
    from esper_fx.cli.train import main as train_main

    config = ctx.scratch / "config.json"
    config.write_text(json.dumps({**SMALL_RUN, "device": str(ctx.torch_device)}))
    run_dir = ctx.scratch / "run"
    argv = ["--config", str(config), "--run-dir", str(run_dir), "--quiet", "--no-tensorboard", "--no-report"]
    out, err = io.StringIO(), io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = train_main(argv)
    if code != 0:
        raise RuntimeError(f"exit {code}: {err.getvalue().strip()[-300:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    ctx.cli_run = run_dir
    return (f"python -m esper_fx.train on {ctx.torch_device}: {summary['episodes']} episodes in "
            f"{time.perf_counter() - started:.1f} s, exit 0")


def _restored(ctx: Context, device: Any) -> tuple[dict, dict]:
    """The CLI run's checkpoint restored with a template on `device`, and the manifest."""
    from esper_fx.outputs import checkpoint as ckpt
    from esper_fx.controllers import protocol as ctl
    from esper_fx.controllers import registry
    from esper_fx.config import TrainingConfig
    from esper_fx.training.run_state import fresh_learner

    if ctx.cli_run is None:
        raise NotRun("cli_run did not finish (no checkpoint to restore)")
    manifest = ckpt.read_manifest(ctx.cli_run)
    config = TrainingConfig.from_dict(manifest["config"])
    spec = ctl.ControllerSpec.from_config(config)
    template = fresh_learner(registry.build(config.controller_name, spec), spec, config.seed, device)._asdict()
    return ckpt.load_trees(manifest, template), manifest


def _leaf_devices(tree: Any) -> set:
    return {d for leaf in jax.tree_util.tree_leaves(tree) if isinstance(leaf, jax.Array) for d in leaf.devices()}


def check_checkpoint(ctx: Context) -> str:
    trees, manifest = _restored(ctx, ctx.jax_device)
    if _leaf_devices(trees) != {ctx.jax_device}:
        raise RuntimeError(f"restored onto {_leaf_devices(trees)}, expected {ctx.jax_device}")
    return f"batch {manifest['next_batch_idx'] - 1} restored onto {ctx.jax_device}"


def check_gpu_checkpoint_on_cpu(ctx: Context) -> str:
    cpu = jax.devices("cpu")[0]
    trees, _ = _restored(ctx, cpu)
    if _leaf_devices(trees) != {cpu}:
        raise RuntimeError(f"restored onto {_leaf_devices(trees)}, expected the CPU")
    on_gpu, _ = _restored(ctx, ctx.jax_device)
    for a, b in zip(jax.tree_util.tree_leaves(trees), jax.tree_util.tree_leaves(on_gpu)):
        if not (jax.device_get(a) == jax.device_get(b)).all():
            raise RuntimeError("the CPU restore differs from the GPU restore")
    return f"a checkpoint written on {ctx.torch_device} restored onto {cpu}, same values"


# name, needs CUDA, function (in the order they run: cli_run before the checkpoint checks)
CHECKS: tuple[tuple[str, bool, Callable[[Context], str]], ...] = (
    ("versions", False, check_versions),
    ("devices", False, check_devices),
    ("same_gpu", True, check_same_gpu),
    ("handoff_cpu", False, check_handoff_cpu),
    ("handoff_cuda", True, check_handoff_cuda),
    ("amp_fp16_no_sync", True, check_amp_fp16),
    ("amp_bf16_no_sync", True, check_amp_bf16),
    ("streams", True, check_streams),
    ("memory_flat", True, check_memory_flat),
    ("cli_run", False, check_cli_run),
    ("checkpoint", False, check_checkpoint),
    ("gpu_checkpoint_on_cpu", True, check_gpu_checkpoint_on_cpu),
    ("jax_memory", False, check_jax_memory),
)
CUDA_CHECKS = tuple(name for name, needs_cuda, _ in CHECKS if needs_cuda)


if __name__ == "__main__":
    sys.exit(main())
