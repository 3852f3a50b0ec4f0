"""`python -m esper_fx.train`: the command line a researcher runs (SPEC §14.4).

This module parses the command line into a validated `TrainingConfig`; `esper_fx.cli.run` runs it.

Configuration is layered: the preset (default `quickstart`), then `--config PATH` (replaces the
preset, strict), then single-field flags. Any invalid configuration prints one line naming the
problem to stderr and exits 2 before anything is written.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from esper_fx.training import compile_cache
from esper_fx.cli.run import EXIT_INTERRUPTED, config_summary, run_from_cli  # noqa: F401 (re-exported)
from esper_fx.config import PRESET_NAMES, TrainingConfig, absolute_paths
from esper_fx.controllers.registry import REGISTRY
from esper_fx.errors import SetupError
from esper_fx.distributed.runtime import INSTALL_HINT, ray_installed
from esper_fx.training.stopping import exit_code, sigterm_stops, stop_signal

EXIT_CONFIG_ERROR = 2
DEFAULT_RUNS_DIR = "runs"


class ConfigError(SetupError, ValueError):
    """A configuration problem reported to the user as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, nothing written
        raise ConfigError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m esper_fx.train",
        description="Train a morphogenetic host with a seed controller (default: the offline "
                    "quickstart preset on shapes10 with the PPO/LSTM controller).",
    )
    p.add_argument("--preset", default=None, help=f"base preset, one of {', '.join(PRESET_NAMES)} "
                   "(default: quickstart)")
    p.add_argument("--config", metavar="PATH", help="JSON config file; replaces the preset entirely")
    p.add_argument("--controller", help=f"one of {', '.join(REGISTRY.choices())}")
    p.add_argument("--task", help="cifar10, cifar10_deep, tinystories, shapes10 or pytext")
    p.add_argument("--seed", type=int, help="run seed")
    p.add_argument("--episodes", type=int, dest="n_episodes", help="total number of episodes")
    p.add_argument("--n-envs", type=int, dest="n_envs", help="environments per batch")
    p.add_argument("--max-epochs", type=int, dest="max_epochs", help="episode length T in epochs")
    p.add_argument("--slots", nargs="+", metavar="SLOT", help="enabled slots, e.g. r0c0 r0c1")
    p.add_argument("--device", help="policy device: auto, cpu or cuda:N")
    p.add_argument("--devices", nargs="+", dest="env_devices", metavar="DEV",
                   help="env devices, env i runs on DEV[i %% len]")
    p.add_argument("--data-path", dest="data_path", help="device (default) or loader")
    p.add_argument("--num-workers", type=int, dest="num_workers", help="DataLoader workers (loader path)")
    p.add_argument("--env-workers", type=int, dest="env_workers", metavar="N",
                   help="run the envs in N Ray actors (0: in this process; needs the [ray] extra)")
    p.add_argument("--ray-address", dest="ray_address", metavar="ADDR",
                   help="join the Ray cluster at ADDR (default: start a local Ray for the run)")
    p.add_argument("--data-dir", dest="data_root", metavar="DIR", help="dataset directory (CIFAR-10, "
                   "TinyStories)")
    p.add_argument("--amp", action="store_true", default=None, help="mixed precision on CUDA envs")
    p.add_argument("--amp-dtype", dest="amp_dtype", help="float16 (default) or bfloat16")
    p.add_argument("--data-split", dest="data_split", help="shared (default) or full")
    p.add_argument("--val-samples", type=int, dest="val_samples", help="first N validation samples")
    p.add_argument("--run-dir", dest="run_dir", metavar="DIR", help="run directory, new or empty (default "
                   "runs/<preset>-<UTC timestamp>-<random suffix>)")
    p.add_argument("--resume", dest="resume_path", metavar="PATH", help="resume from a run directory "
                   "or checkpoint")
    p.add_argument("--checkpoint-every", type=int, dest="checkpoint_every", metavar="N",
                   help="checkpoint every N batches")
    p.add_argument("--telemetry-level", dest="telemetry_level",
                   help="normal (default) or debug (every reward component goes into events.jsonl)")
    p.add_argument("--no-tensorboard", action="store_false", dest="tensorboard", default=None,
                   help="no TensorBoard scalars in <run dir>/tb/")
    p.add_argument("--no-report", action="store_false", dest="report", default=None,
                   help="no plots/ and report.html at the end of the run")
    p.add_argument("--no-compile-cache", action="store_false", dest="compile_cache", default=None,
                   help=f"do not use JAX's persistent compilation cache (also {compile_cache.ENV_SWITCH}=0)")
    p.add_argument("--compile-cache-dir", dest="compile_cache_dir", metavar="DIR",
                   help=f"compilation cache directory (also {compile_cache.ENV_DIR}; default "
                        f"{compile_cache.default_dir()})")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    return p


_FIELD_FLAGS = (
    "controller", "task", "seed", "n_episodes", "n_envs", "max_epochs", "slots", "device", "env_devices",
    "data_path", "num_workers", "env_workers", "ray_address", "data_root", "amp", "amp_dtype", "data_split", "val_samples", "run_dir",
    "resume_path", "checkpoint_every", "telemetry_level", "tensorboard", "report",
)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {name: getattr(args, name) for name in _FIELD_FLAGS if getattr(args, name) is not None}


def resolve_config(argv: Sequence[str] | None = None) -> tuple[TrainingConfig, argparse.Namespace]:
    """Parse the command line into a validated config. Raises ConfigError; writes nothing."""
    args = build_parser().parse_args(argv)
    if args.config is not None and args.preset is not None:
        raise ConfigError("--config replaces the preset: pass either --config or --preset, not both")
    if args.resume_path is not None:
        return _with_ray(absolute_paths(_resume_config(args))), args
    try:
        if args.config is not None:
            base = TrainingConfig.from_json(args.config)
        else:
            base = TrainingConfig.preset(args.preset or "quickstart")
        overrides = _overrides(args)
        config = base.replace(**overrides) if overrides else base
    except (ValueError, TypeError) as exc:
        raise ConfigError(str(exc)) from None
    if config.run_dir is None and config.resume_path is None:
        label = Path(args.config).stem if args.config else (args.preset or "quickstart")
        config = config.replace(run_dir=default_run_dir(label))
    return _with_ray(absolute_paths(config)), args


def _with_ray(config: TrainingConfig) -> TrainingConfig:
    """The config, when its env workers can run: Ray must be installed (else one line on how)."""
    if config.env_workers > 0 and not ray_installed():
        raise ConfigError(f"--env-workers {config.env_workers}: {INSTALL_HINT}")
    return config


def default_run_dir(label: str, now: datetime | None = None) -> str:
    """runs/<label>-<UTC timestamp to the millisecond>-<4 random hex digits>: two launches in the same
    second (or millisecond) get different directories (and the run directory's lock catches the rest)."""
    now = now or datetime.now(timezone.utc)
    stamp = now.strftime("%Y%m%dT%H%M%S") + f".{now.microsecond // 1000:03d}Z"
    return os.path.join(DEFAULT_RUNS_DIR, f"{label}-{stamp}-{secrets.token_hex(2)}")


# On resume the checkpoint's config is authoritative; only these may differ (SPEC §7.8).
RESUME_OVERRIDABLE = ("n_episodes", "device", "env_devices", "run_dir", "checkpoint_every", "data_root",
                      "num_workers", "env_workers", "ray_address", "data_path", "amp", "amp_dtype", "tensorboard", "report")


def _resume_config(args: argparse.Namespace) -> TrainingConfig:
    if args.config is not None or args.preset is not None:
        raise ConfigError("--resume takes the configuration from the checkpoint: drop --config/--preset")
    saved, run_dir = _resumed(args.resume_path)
    overrides = _overrides(args)
    overrides.pop("resume_path")
    for name, value in overrides.items():
        current = saved.to_dict()[name]
        wanted = list(value) if isinstance(value, (list, tuple)) else value
        if name not in RESUME_OVERRIDABLE and wanted != current:
            raise ConfigError(f"--resume: {name} cannot change on resume (the checkpoint has {current!r}, "
                              f"the command line {wanted!r})")
    run_dir = overrides.pop("run_dir", None) or run_dir
    overrides = {k: v for k, v in overrides.items() if k in RESUME_OVERRIDABLE}
    try:
        return saved.replace(**overrides, run_dir=run_dir, resume_path=str(args.resume_path))
    except (ValueError, TypeError) as exc:
        raise ConfigError(str(exc)) from None


def _resumed(path: str) -> tuple[TrainingConfig, str]:
    """The configuration and the run directory a resume continues: the checkpoint's, or, for a run stopped
    before its first checkpoint, its config.json (the run restarts from batch 0 in its directory)."""
    from esper_fx.outputs.checkpoint import CheckpointError, NoCheckpoint, read_manifest
    from esper_fx.training.preflight import restartable_run

    try:
        manifest = read_manifest(path)
        source, config, run_dir = manifest["_path"], manifest["config"], str(Path(manifest["_path"]).parent.parent)
    except NoCheckpoint as exc:
        restart = restartable_run(path)
        if restart is None:
            raise ConfigError(f"cannot resume from {path!r}: {exc}") from None
        source, run_dir = str(restart / "config.json"), str(restart)
        try:
            return TrainingConfig.from_json(source, saved=True), run_dir
        except ValueError as bad:
            raise ConfigError(f"cannot resume from {path!r}: {bad}") from None
    except CheckpointError as exc:
        raise ConfigError(f"cannot resume from {path!r}: {exc}") from None
    try:
        return TrainingConfig.from_saved(config), run_dir
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"cannot resume from {source}: its config is invalid: {exc}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """The exit code of one command line (see `esper_fx.cli.run`). SIGTERM is taken like Ctrl-C from the
    start: a run stopped at any point ends with a message, never a traceback."""
    with sigterm_stops():
        try:
            config, args = resolve_config(argv)
        except ConfigError as exc:
            print(f"esper_fx.train: error: {exc}", file=sys.stderr)
            return EXIT_CONFIG_ERROR
        except KeyboardInterrupt as stop:
            print(f"\nInterrupted ({signal.Signals(stop_signal(stop)).name}) before the run started.", file=sys.stderr)
            return exit_code(stop_signal(stop))
        return run_from_cli(config, quiet=args.quiet, compile_cache_dir=args.compile_cache_dir,
                            compile_cache_enabled=args.compile_cache)


if __name__ == "__main__":
    sys.exit(main())
