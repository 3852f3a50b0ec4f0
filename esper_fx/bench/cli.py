"""`python -m esper_fx.bench [--quick] [--device cpu|cuda] [--only NAME ...] [--preset NAME ...] [--json PATH]`.

Runs the selected benchmarks in a fixed order, prints one table (rich on a terminal, plain otherwise)
and optionally writes JSON: {"meta": {...}, NAME: result, ...}, where each result holds its `cases`
(medians and p10/p90 in seconds for the measured implementation and its reference, and their `ratio`),
the ratio's definition, a `headline` and the `target` from the architecture's claims. A benchmark that
fails is recorded as {"error": "..."} and the exit status is 1; a bad flag or device choice prints one line
and exits with 2 (the exit codes of `esper_fx.errors`).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import json
import os
import platform
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from bridge.jax_env import ensure_jax_env
from esper_fx.command import EXIT_OK, EXIT_RUN_FAILED, CommandParser
from esper_fx.errors import ConfigError, DeviceUnavailableError

# name -> module under esper_fx.bench whose `run(settings) -> dict` measures it (imported on demand, so
# one benchmark whose dependencies are missing does not stop the others)
BENCHMARKS: dict[str, str] = {
    "act": "esper_fx.bench.bench_controller:run_act",
    "update": "esper_fx.bench.bench_controller:run_update",
    "bridge": "esper_fx.bench.bench_bridge:run",
    "host": "esper_fx.bench.bench_host:run",
    "data": "esper_fx.bench.bench_data:run",
    "e2e": "esper_fx.bench.bench_e2e:run",
    "ray": "esper_fx.bench.bench_ray:run",
    "default_workers_train": "esper_fx.bench.bench_default_workers:run_train",
    "default_workers_prove": "esper_fx.bench.bench_default_workers:run_prove",
    "notebooks": "esper_fx.bench.bench_notebooks:run",
}
# run only when named in --only (each runs whole commands or notebooks, minutes): the default selection leaves
# them out
ON_REQUEST = ("default_workers_train", "default_workers_prove", "notebooks")
GROUPS = {"default_workers": ON_REQUEST}  # --only NAME for several


NAME = "esper_fx.bench"


def build_parser() -> CommandParser:
    parser = CommandParser(
        NAME,
        description="Benchmarks of the esper_fx architecture, each against a reference measured in the same run.",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes and few repetitions (well under a minute)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--only", nargs="+", choices=[*BENCHMARKS, *GROUPS], metavar="NAME",
                        help=f"run only these benchmarks (of {', '.join([*BENCHMARKS, *GROUPS])}; "
                             f"{', '.join(ON_REQUEST)} run only when named)")
    parser.add_argument("--rounds", type=int, default=None, metavar="R",
                        help="interleaved rounds of the default_workers benchmarks (default 2)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON here")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", nargs="+", metavar="NAME", dest="presets",
                        help="presets the host benchmark measures at E = 4 (default: quickstart shapes10; "
                             "see esper_fx/bench/presets.py for the sizes)")
    parser.add_argument("--torch-threads", type=int, default=1, metavar="N",
                        help="torch intra-op threads (default 1; 0 keeps torch's default). On a small shared CPU "
                             "torch's OpenMP threads stall behind other processes and make the reference far "
                             "slower than it is; one thread is the reference's best case here")
    return parser


def selected(only: Sequence[str] | None) -> list[str]:
    """The benchmarks to run, in BENCHMARKS' order: those named (a group names its members), or every one
    but the ON_REQUEST ones."""
    if only is None:
        return [n for n in BENCHMARKS if n not in ON_REQUEST]
    named = {m for n in only for m in GROUPS.get(n, (n,))}
    return [n for n in BENCHMARKS if n in named]


def load(name: str) -> Callable[[Any], dict]:
    module_name, func = BENCHMARKS[name].split(":")
    return getattr(importlib.import_module(module_name), func)


def run_one(name: str, settings: Any) -> dict:
    try:
        return load(name)(settings)
    except Exception as err:  # recorded, reported, and turned into exit status 1
        traceback.print_exc(file=sys.stderr)
        return {"error": f"{type(err).__name__}: {err}"}


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op thread count set to `n` (0 leaves it) for the block, restored afterwards."""
    import torch

    before = torch.get_num_threads()
    if n > 0:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_all(names: Sequence[str], settings: Any) -> dict[str, dict]:
    import jax

    results: dict[str, dict] = {}
    device = settings.device.jax_device
    # only when needed: the default-device context is part of jit's cache key
    placed = jax.default_device(device) if device != jax.devices()[0] else contextlib.nullcontext()
    with placed:
        for name in names:
            print(f"running {name} ...", file=sys.stderr, flush=True)
            results[name] = run_one(name, settings)
    return results


def meta(settings: Any, args: argparse.Namespace) -> dict:
    import jax
    import torch

    return {
        "command": "python -m esper_fx.bench " + " ".join(sys.argv[1:]),
        "quick": args.quick,
        "seed": args.seed,
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "load_average_start": list(os.getloadavg()),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "jax": jax.__version__,
        **settings.device.describe(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """0 when every benchmark ran, 1 when one failed (recorded in its result), 2 for a bad command line or device."""
    ensure_jax_env(warn=False)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except ConfigError as err:
        return parser.fail(err)
    from esper_fx.bench import devices
    from esper_fx.bench.report import print_results
    from esper_fx.bench.settings import BenchSettings

    try:
        device = devices.resolve(args.device)
    except DeviceUnavailableError as err:
        return parser.fail(err)
    settings = BenchSettings(device=device, quick=args.quick, seed=args.seed,
                             presets=tuple(args.presets) if args.presets else None, rounds=args.rounds)
    if args.rounds is not None and args.rounds < 1:
        return parser.fail(ConfigError(f"--rounds must be >= 1 (got {args.rounds})"))
    names = selected(args.only)
    with torch_threads(args.torch_threads):
        info = meta(settings, args)
        results = run_all(names, settings)
    info["load_average_end"] = list(os.getloadavg())
    print_results(results)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": info, **results}, indent=2) + "\n")
    return EXIT_RUN_FAILED if any("error" in r for r in results.values()) else EXIT_OK
