"""`python -m esper_fx.doctor [--device cuda:N] [--json PATH] [--full]`: does esper_fx work on this machine?

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
    epoch_audit       a 3-batch tiny quickstart: nothing compiled after batch 0, host syncs only on the whitelist
    jax_memory        JAX's memory settings (preallocation must be off beside torch)

The checks live by family: `environment.py` (versions, devices, JAX memory), `handoff.py` (the hand-off),
`env_pool.py` (AMP, streams, memory), `training_run.py` (the CLI run and its checkpoint); this module runs
them and reports. Without CUDA the CUDA checks are `not run`, never `passed`. Exit 0 when nothing failed,
1 when a check failed, 2 for a bad command line (one line on stderr, nothing written).

`--full` is the GPU check (`full.py`, issue 55): these checks, the quickstart with the breakdown of its time,
the `gpu` tests and the quick benchmarks on the device, each a child process with a timeout, in at most 8
minutes, into one JSON file; `--full --tiny` is its small form for CI on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from bridge.jax_env import ensure_jax_env
from esper_fx.config import POLICY_DEVICE
from esper_fx.devices import policy_devices
from esper_fx.doctor import full
from esper_fx.doctor.context import Context, NotRun
from esper_fx.doctor.env_pool import check_amp_bf16, check_amp_fp16, check_memory_flat, check_streams
from esper_fx.doctor.environment import check_devices, check_jax_memory, check_versions
from esper_fx.doctor.handoff import check_handoff_cpu, check_handoff_cuda, check_same_gpu
from esper_fx.doctor.training_run import (check_checkpoint, check_cli_run, check_epoch_audit,
                                          check_gpu_checkpoint_on_cpu)
from esper_fx.command import EXIT_OK, EXIT_RUN_FAILED, EXIT_SETUP_ERROR, CommandParser
from esper_fx.errors import ConfigError, DeviceUnavailableError
from esper_fx.outputs.durable import write_whole

PASSED, FAILED, NOT_RUN = "passed", "failed", "not run"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = EXIT_OK, EXIT_RUN_FAILED, EXIT_SETUP_ERROR  # esper_fx.errors' table

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
    ("epoch_audit", True, check_epoch_audit),
    ("jax_memory", False, check_jax_memory),
)
CUDA_CHECKS = tuple(name for name, needs_cuda, _ in CHECKS if needs_cuda)


class UsageError(ConfigError):
    """A bad command line: one line, exit 2."""


@dataclass
class Check:
    name: str
    status: str
    detail: str
    seconds: float = 0.0


# ----------------------------------------------------------------------------------------------
# the command line
# ----------------------------------------------------------------------------------------------


def build_parser() -> CommandParser:
    p = CommandParser("esper_fx.doctor", description="Check that esper_fx works on this machine.")
    p.add_argument("--device", default="auto", help="auto (cuda:0 if torch and JAX both see a GPU, else cpu), cpu or cuda:N")
    p.add_argument("--json", metavar="PATH", help="also write the report as JSON to PATH")
    p.add_argument("--full", action="store_true",
                   help="the GPU check (esper_fx/doctor/full.py): these checks, the quickstart with the breakdown of "
                        "its time, the gpu tests and the quick benchmarks on the device, each with a timeout, in "
                        f"at most {full.BUDGET_S / 60:.0f} minutes; --json gets every part's result")
    p.add_argument("--tiny", action="store_true",
                   help="with --full: the form CI runs on the CPU (a one-batch quickstart, one benchmark, no gpu "
                        "tests, no training check), well under a minute")
    p.add_argument("--quickstart-dir", metavar="DIR",
                   help="with --full: keep the quickstart's run directory here (default: a temporary one, removed)")
    p.add_argument("--skip", nargs="+", default=[], metavar="CHECK", help=argparse.SUPPRESS)  # (--full --tiny's)
    p.add_argument("--budget-s", type=float, default=full.BUDGET_S, help=argparse.SUPPRESS)  # (the tests')
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


def check_quickstart_dir(path: str) -> str:
    """--quickstart-dir as an absolute path, read from the folder the doctor was typed in (its parts run in the
    checkout's folder); a folder that already holds something, a run among them, is refused before any part
    runs (the quickstart would refuse it after the checks had run)."""
    from esper_fx.outputs.run_directory import run_dir_entries

    folder = Path(os.path.abspath(path))
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"argument --quickstart-dir: {folder} exists and is not a folder")
    if folder.is_dir() and run_dir_entries(folder):
        raise UsageError(f"argument --quickstart-dir: {folder} is not empty (it holds "
                         f"{', '.join(run_dir_entries(folder)[:3])}): name a new or empty folder")
    return str(folder)


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
        unknown = sorted(set(args.skip) - {name for name, _, _ in CHECKS})
        if unknown:
            raise UsageError(f"argument --skip: no check {', '.join(unknown)}")
        if (args.tiny or args.quickstart_dir) and not args.full:
            raise UsageError(f"argument {'--tiny' if args.tiny else '--quickstart-dir'}: only with --full")
        if args.quickstart_dir:
            args.quickstart_dir = check_quickstart_dir(args.quickstart_dir)
    except ConfigError as exc:
        return parser.fail(exc)
    if args.full:
        return full.full_check(str(torch_device), args.json, tiny=args.tiny, budget_s=args.budget_s,
                               quickstart_dir=args.quickstart_dir,
                               argv=list(sys.argv[1:] if argv is None else argv))
    with tempfile.TemporaryDirectory(prefix="esper_fx_doctor_") as scratch:
        checks = run_checks(Context(torch_device, jax_device, Path(scratch)), print_check, skip=args.skip)
    if args.json:
        report = {"device": str(torch_device), "jax_device": str(jax_device),
                  "ok": not any(c.status == FAILED for c in checks), "checks": [asdict(c) for c in checks]}
        try:  # whole or not at all
            write_whole(Path(args.json), json.dumps(report, indent=2) + "\n")
        except OSError as exc:  # (the disk filled meanwhile)
            return parser.fail(OSError(f"cannot write --json {args.json}: {exc.strerror or exc}"))
    failed = [c.name for c in checks if c.status == FAILED]
    print(f"\n{len(checks) - len(failed)} of {len(checks)} checks did not fail"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return EXIT_FAILED if failed else EXIT_OK


# ----------------------------------------------------------------------------------------------
# running the checks
# ----------------------------------------------------------------------------------------------


def print_check(check: Check) -> None:
    print(f"{check.status:>8}  {check.name:<22} {check.detail}", flush=True)


def run_checks(ctx: Context, report: Callable[[Check], None] = lambda c: None,
               skip: Sequence[str] = ()) -> list[Check]:
    """Every check in order (those in `skip` not run); one that raises fails with the exception's first line."""
    out = []
    for name, needs_cuda, fn in CHECKS:
        started = time.perf_counter()
        if name in skip:
            check = Check(name, NOT_RUN, "left out (--skip)")
        elif needs_cuda and not ctx.cuda:
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

