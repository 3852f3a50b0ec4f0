"""`python -m esper_fx.train`: the command line a researcher runs (SPEC §14.4).

This module parses the command line into a validated `TrainingConfig`; `esper_fx.cli_run` runs it.

Configuration is layered: the preset (default `quickstart`), then `--config PATH` (replaces the
preset, strict), then single-field flags. Any invalid configuration prints one line naming the
problem to stderr and exits 2 before anything is written.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from esper_fx import compile_cache
from esper_fx.cli_run import EXIT_INTERRUPTED, config_summary, run_from_cli  # noqa: F401 (re-exported)
from esper_fx.config import PRESET_NAMES, TrainingConfig
from esper_fx.controller_registry import REGISTRY

EXIT_CONFIG_ERROR = 2


class ConfigError(ValueError):
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
    p.add_argument("--data-dir", dest="data_root", metavar="DIR", help="dataset directory (CIFAR-10, "
                   "TinyStories)")
    p.add_argument("--amp", action="store_true", default=None, help="mixed precision on CUDA envs")
    p.add_argument("--amp-dtype", dest="amp_dtype", help="float16 (default) or bfloat16")
    p.add_argument("--data-split", dest="data_split", help="shared (default) or full")
    p.add_argument("--val-samples", type=int, dest="val_samples", help="first N validation samples")
    p.add_argument("--run-dir", dest="run_dir", metavar="DIR", help="run directory (default "
                   "runs/<preset>-<UTC timestamp>)")
    p.add_argument("--resume", dest="resume_path", metavar="PATH", help="resume from a run directory "
                   "or checkpoint")
    p.add_argument("--checkpoint-every", type=int, dest="checkpoint_every", metavar="N",
                   help="checkpoint every N batches")
    p.add_argument("--telemetry-level", dest="telemetry_level",
                   help="off, minimal, normal (default) or debug; off also removes telemetry features")
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
    "data_path", "num_workers", "data_root", "amp", "amp_dtype", "data_split", "val_samples", "run_dir",
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
        return _absolute_paths(_resume_config(args)), args
    try:
        if args.config is not None:
            base = TrainingConfig.from_json(args.config)
        else:
            base = TrainingConfig.preset(args.preset or "quickstart")
        overrides = _overrides(args)
        if "max_epochs" in overrides:
            overrides["chunk_length"] = overrides["max_epochs"]
        config = base.replace(**overrides) if overrides else base
    except (ValueError, TypeError) as exc:
        raise ConfigError(str(exc)) from None
    if config.run_dir is None and config.resume_path is None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        label = Path(args.config).stem if args.config else (args.preset or "quickstart")
        config = config.replace(run_dir=os.path.join("runs", f"{label}-{stamp}"))
    return _absolute_paths(config), args


def _absolute_paths(config: TrainingConfig) -> TrainingConfig:
    """Resolve the run directory and the resume path once, against the directory the user launched from."""
    changes = {name: os.path.abspath(getattr(config, name)) for name in ("run_dir", "resume_path")
               if getattr(config, name)}
    return config.replace(**changes) if changes else config


# On resume the checkpoint's config is authoritative; only these may differ (SPEC §7.8).
RESUME_OVERRIDABLE = ("n_episodes", "device", "env_devices", "run_dir", "checkpoint_every", "data_root",
                      "num_workers", "data_path", "amp", "amp_dtype", "tensorboard", "report")


def _resume_config(args: argparse.Namespace) -> TrainingConfig:
    from esper_fx.checkpoint import CheckpointError, read_manifest, resolve_checkpoint

    if args.config is not None or args.preset is not None:
        raise ConfigError("--resume takes the configuration from the checkpoint: drop --config/--preset")
    try:
        manifest = read_manifest(args.resume_path)
        saved = TrainingConfig.from_dict(manifest["config"])
    except (CheckpointError, ValueError, KeyError) as exc:
        raise ConfigError(f"cannot resume from {args.resume_path}: {exc}") from None
    overrides = _overrides(args)
    overrides.pop("resume_path")
    for name, value in overrides.items():
        current = getattr(saved, name)
        if name not in RESUME_OVERRIDABLE and value != current and not (
                isinstance(current, tuple) and tuple(value) == current):
            raise ConfigError(f"--resume: {name} cannot change on resume (checkpoint has {current!r})")
    ckpt_dir = resolve_checkpoint(args.resume_path)
    run_dir = overrides.pop("run_dir", None) or str(ckpt_dir.parent.parent)
    overrides = {k: v for k, v in overrides.items() if k in RESUME_OVERRIDABLE}
    try:
        return saved.replace(**overrides, run_dir=run_dir, resume_path=str(args.resume_path))
    except (ValueError, TypeError) as exc:
        raise ConfigError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config, args = resolve_config(argv)
    except ConfigError as exc:
        print(f"esper_fx.train: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    return run_from_cli(config, quiet=args.quiet, compile_cache_dir=args.compile_cache_dir,
                        compile_cache_enabled=args.compile_cache)


if __name__ == "__main__":
    sys.exit(main())
