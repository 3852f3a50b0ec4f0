"""`python -m esper_fx.train`: the command line a researcher runs (BEHAVIOUR §14.4).

This module parses the command line into a validated `TrainingConfig`; `esper_fx.cli.run` runs it.

Configuration is layered: the preset (default `quickstart`), or `--config PATH` (replaces the preset,
strict), then `--set KEY=VALUE` (any field), then the single-field flags (one per field declared with a
help text in `esper_fx.config`; `esper_fx.cli.parser` builds them). Any invalid configuration prints
one line naming the problem to stderr and exits 2 before anything is written.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, Sequence

from bridge.jax_env import ensure_jax_env
from esper_fx.training import compile_cache
from esper_fx.outputs.run_names import default_run_dir
from esper_fx.cli.run import config_summary, run_from_cli  # noqa: F401 (config_summary re-exported)
from esper_fx.cli.parser import (add_field_flags, add_set_option, command_line_changes, note_old_spellings,
                                  old_set_keys, parse_sets, refuse_resume_changes, typed_path, with_sections)
from esper_fx.config import (AUTO, PRESET_NAMES, RESUME_OVERRIDABLE, TrainingConfig, absolute_paths, flat_view,
                             old_keys, read_config_json)
from esper_fx.configuration.checks import no_effect
from esper_fx.command import CommandParser
from esper_fx.contracts.tasks import DEFAULT_DATA_ROOT
from esper_fx.errors import ConfigError
from esper_fx.distributed.runtime import INSTALL_HINT, ray_installed
from esper_fx.stopping import exit_code, sigterm_stops, stop_signal

NAME = "esper_fx.train"
DEFAULT_PRESET = "quickstart"


def build_parser() -> CommandParser:
    """The command's own options, then one flag per configuration field (declared in `esper_fx.config`)."""
    p = CommandParser(NAME, description="Train a morphogenetic host with a seed controller (default: the offline "
                                        "quickstart preset, the shapes16 task with the PPO/LSTM controller).",
                      epilog="Layers: the preset (or --config), then --set, then the field flags. A bad value "
                             "prints one line naming it and exits 2, writing nothing.")
    cache_dir = "/".join(compile_cache.CACHE_SUBDIR)
    p.add_argument("--preset", default=None, metavar="NAME",
                   help=f"base preset, one of {', '.join(f'`{n}`' for n in PRESET_NAMES)} (default `{DEFAULT_PRESET}`)")
    p.add_argument("--config", metavar="PATH", help="JSON config file; replaces the preset entirely")
    add_set_option(p)
    p.add_argument("--no-compile-cache", action="store_false", dest="compile_cache", default=None,
                   help=f"do not use JAX's persistent compilation cache (also `{compile_cache.ENV_SWITCH}=0`)")
    p.add_argument("--compile-cache-dir", dest="compile_cache_dir", metavar="DIR",
                   help=f"where the compilation cache lives (also `{compile_cache.ENV_DIR}`; default "
                        f"`~/.cache/{cache_dir}`, or `$XDG_CACHE_HOME/{cache_dir}`)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    add_field_flags(p)
    return p


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The command line's changes to the base config: the --set items, then the field flags on top."""
    return command_line_changes(parse_sets(args.sets), args)


def resolve_config(argv: Sequence[str] | None = None) -> tuple[TrainingConfig, argparse.Namespace]:
    """Parse the command line into a validated config. Raises ConfigError; writes nothing but, when the config
    file or a `--set` item used a key of an earlier version (`lr` for `ppo.lr`), one line on stderr naming
    today's (`note_old_spellings`)."""
    args = build_parser().parse_args(argv)
    if args.config is not None and args.preset is not None:
        raise ConfigError("--config replaces the preset: pass either --config or --preset, not both")
    overrides = _overrides(args)
    if overrides.get("resume_path") is not None:
        config = _with_ray(absolute_paths(_resume_config(args, overrides)))
        note_old_spellings(old_set_keys(args.sets))
        return config, args
    old = old_set_keys(args.sets)
    given = set(flat_view(overrides))  # the settings the command line gave (a config file is often a whole config)
    try:
        if args.config is not None:
            data = read_config_json(args.config)
            old = [*old_keys(data), *old]
            try:
                base = TrainingConfig.from_dict(data)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"--config {args.config}: {exc}") from None
        else:
            base = TrainingConfig.preset(args.preset or DEFAULT_PRESET)
        config = base.replace(**with_sections(base, overrides)) if overrides else base
    except (ValueError, TypeError) as exc:
        raise ConfigError(str(exc)) from None
    if config.run_dir is None and config.resume_path is None:
        label = Path(args.config).stem if args.config else (args.preset or DEFAULT_PRESET)
        config = config.replace(run_dir=default_run_dir(label))
    config = _with_ray(absolute_paths(config))
    note_old_spellings(old)
    for line in no_effect(config, given):
        print(f"{NAME}: note: {line}", file=sys.stderr)
    return config, args


def _with_ray(config: TrainingConfig) -> TrainingConfig:
    """The config, when its env workers can run: an explicit `--env-workers N` needs Ray installed (else one
    line on how); `auto` falls back to the in-process pool when Ray cannot start (`distributed.auto`)."""
    if config.env_workers != AUTO and config.env_workers > 0 and not ray_installed():
        raise ConfigError(f"--env-workers {config.env_workers}: {INSTALL_HINT}")
    return config


def _resume_config(args: argparse.Namespace, overrides: dict[str, Any]) -> TrainingConfig:
    """The checkpoint's config with the command line's changes, each one a field declared resume-overridable
    (`RESUME_OVERRIDABLE`) or equal to the checkpoint's value."""
    if args.config is not None or args.preset is not None:
        raise ConfigError("--resume takes the configuration from the checkpoint: drop --config/--preset")
    resume_path = overrides.pop("resume_path")
    if not isinstance(resume_path, str):
        raise ConfigError(f"resume_path must be a path (got {resume_path!r})")
    saved, run_dir = _resumed(resume_path)
    first_cwd = first_start_folder(run_dir)
    for name, flag in PATH_FIELDS.items():  # a relative path as the first start would have read it
        if isinstance(overrides.get(name), str):
            overrides[name] = typed_path(overrides[name], first_cwd, flag, NAME)
        elif name == "data_root" and _relative_data_root(saved.data_root) and first_cwd is not None:
            saved = saved.replace(data_root=os.path.normpath(os.path.join(first_cwd, saved.data_root)))
    overrides = with_sections(saved, overrides)
    refuse_resume_changes(saved.to_dict(every_constant=True), overrides, RESUME_OVERRIDABLE)
    run_dir = overrides.pop("run_dir", None) or run_dir
    overrides = {k: v for k, v in overrides.items() if k in RESUME_OVERRIDABLE}
    try:
        return saved.replace(**overrides, run_dir=run_dir, resume_path=str(resume_path))
    except (ValueError, TypeError) as exc:
        raise ConfigError(str(exc)) from None


# the fields that name what the run reads, with their flags: typed relative on a resume, read from the first
# start's folder (a resume's --run-dir names where the continued run goes, read from where it is typed)
PATH_FIELDS = {"data_root": "--data-dir"}


def first_start_folder(run_dir: str) -> str | None:
    """The folder the run's first start was typed in (its provenance.json's `cwd`), or None when the run
    directory does not say (a run of an earlier version)."""
    from esper_fx.outputs.provenance import PROVENANCE_NAME

    try:
        cwd = json.loads(Path(run_dir, PROVENANCE_NAME).read_text(encoding="utf-8")).get("cwd")
    except (OSError, ValueError, AttributeError):
        return None
    return cwd if isinstance(cwd, str) and os.path.isabs(cwd) else None


def _relative_data_root(data_root: str) -> bool:
    """A data folder a run of an earlier version kept relative (today's first start keeps it absolute; the
    default `./data` stays as it is: it names the task's own default place)."""
    return not os.path.isabs(data_root) and Path(data_root) != Path(DEFAULT_DATA_ROOT)


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
        loaded = TrainingConfig.from_saved(config)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"cannot resume from {source}: its config is invalid: {exc}") from None
    note_earlier_version(config)
    return loaded, run_dir


def note_earlier_version(saved: Any) -> None:
    """One line on stderr when a checkpoint's config was written in an earlier version's keys (`ppo.gamma`
    before `learner.gamma`): it is read in today's, naming each moved key."""
    from esper_fx.configuration.keys import MOVED_KEYS, read_moved_keys

    moved = read_moved_keys(saved) if isinstance(saved, dict) else []
    if moved:
        print(f"{NAME}: note: the checkpoint was written by an earlier version; read in today's keys ("
              + ", ".join(f"{key!r} is now {MOVED_KEYS[key]!r}" for key in moved) + ")", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """The exit code of one command line (see `esper_fx.cli.run`). SIGTERM is taken like Ctrl-C from the
    start: a run stopped at any point ends with a message, never a traceback."""
    ensure_jax_env(warn=False)
    with sigterm_stops():
        try:
            config, args = resolve_config(argv)
        except ConfigError as exc:
            return CommandParser(NAME).fail(exc)
        except KeyboardInterrupt as stop:
            print(f"\nInterrupted ({signal.Signals(stop_signal(stop)).name}) before the run started.", file=sys.stderr)
            return exit_code(stop_signal(stop))
        return run_from_cli(config, quiet=args.quiet, compile_cache_dir=args.compile_cache_dir,
                            compile_cache_enabled=args.compile_cache)


if __name__ == "__main__":
    sys.exit(main())
