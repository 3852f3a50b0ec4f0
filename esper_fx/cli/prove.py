"""`python -m esper_fx.prove`: train the PPO controller, then compare every arm on unseen seeds.

    python -m esper_fx.prove                                   # quickstart: train, then 6 arms × 8 seeds
    python -m esper_fx.prove --arms wait random heuristic oracle --n-eval-seeds 8
    python -m esper_fx.prove --checkpoint runs/quickstart-…    # evaluate a trained run instead
    python -m esper_fx.prove --checkpoint out/train/ppo-seed42 out/train/ppo-seed7   # several, aggregated
    python -m esper_fx.prove --set reward.reward_family=contribution --set ppo.update_epochs=1   # an ablation
    python -m esper_fx.prove --train-seeds 42 7 11             # one controller per training seed, aggregated

Arms: `ppo` (the trained controller, greedy), `ppo_sampled` (the same policy, sampling), `wait` (the static
host), `random`, `heuristic`, `oracle` (the configured fixed schedule), `static_final` (per seed, the
architecture the first learned arm ended with — or the oracle's, or best_fixed's when it is listed without
the oracle — trained from scratch as a static
network), `static_matched` (that architecture trained for the grown run's training FLOPs, lr cosine-decayed
over its own steps), `best_fixed` (the best fixed schedule found on --tuning-seeds, then run on the
evaluation seeds; `esper_fx.evaluation.fair_controls`; `--best-fixed-pick cheapest` picks the cheapest schedule
within `--best-fixed-within` pp of the most accurate instead), or any registered controller name. Evaluation
seeds never overlap the training run's seeds.
The metric is the validation accuracy averaged over the last 3 epochs (`esper_fx.evaluation.episodes`); every pair
against `wait` and against the trained controller gets a paired difference, its 95% interval and a
verdict. Output: the table on the console (with parameters and training GFLOPs per arm), `<out>/prove.json`
(every per-seed number, training FLOPs included, and the controls' search table and FLOP ratios),
`<out>/prove.png` and `<out>/prove_compute.png` (accuracy against training compute, every arm).

`--static-budgets 0.4 0.6 0.8` adds `static_final@0.4`, … (static_final's network on that fraction of its own
training steps, decayed over them) and, for every grown arm, the compute it saved at equal accuracy against
that curve, with a bootstrap interval over the evaluation seeds (`esper_fx.evaluation.iso_accuracy`; table,
`prove.json`'s `iso_accuracy_saving`, the dashed curve in `prove_compute.png`). With `wait` (the host alone)
beside the curve, it also gives the ceiling of growth there: the most any growth from the host to static_final's
network could save at static_final's accuracy − 0.5 pp, if it transferred perfectly (`growth_ceiling`; under 30%,
no growth there can save 30%, so read it before a long grid).

`--train-seeds S1 S2 …` trains one controller per seed (`<out>/train/ppo-seed<S>`, each resumable with
`python -m esper_fx.train --resume`), runs each as `ppo[seed=S]` (and `static_final[seed=S]`, …) on the same
evaluation seeds, the other arms once, and adds the aggregate across training seeds
(`esper_fx.evaluation.across_seeds`); `prove.png` then shows the spread across training seeds. Several
`--checkpoint` runs that differ in their training seed alone (a stopped `--train-seeds` finished with
`train --resume`, or trainings of one configuration run apart) are played and aggregated the same way.

A bad flag, seed set, arm, output path or (with `--checkpoint`) a change to a field that fixes the policy's
shapes prints one line and exits 2, found before anything is trained or written. Ctrl-C or SIGTERM writes
`prove.json` of the evaluation episodes that finished (`"partial": true`), prints one message with the
command that continues it and exits 130 or 143.

`python -m esper_fx.prove --resume OUT` continues a prove stopped anywhere (a training seed, the best_fixed
search, the static arms, the evaluation) with the command line of its first start, kept in
`OUT/prove_command.json`: every finished training run, search point and evaluation episode is reused (each
episode is kept in `OUT/episodes/` as it finishes; `esper_fx.evaluation.resume`), a stopped training run
continues with train's own resume, and the rows, table and prove.json are those of an unbroken run. Only
where and how it runs may change (`RESUME_MAY_CHANGE`: `--device`, `--env-workers`, `--ray-address`,
`--data-dir`, `--quiet`, …); any other flag that differs from the first start's is refused by name, as
`train --resume` refuses one (`cli.parser.refuse_resume_changes`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from bridge.jax_env import ensure_jax_env
from esper_fx.cli.parser import (add_field_flags, add_set_option, command_line_changes, field_flags,
                                  note_old_spellings, old_set_keys, parse_sets, refuse_resume_changes, typed_path,
                                  with_sections)
from esper_fx.config import (AUTO, PRESET_NAMES, RESUME_OVERRIDABLE, SEED_MAX, SEED_MIN, TrainingConfig,
                             flat_view)
from esper_fx.evaluation.fair_controls import (DEFAULT_TUNING_SEEDS, MIX_TUNING_SEEDS_PER_TASK, PickRule,
                                               default_tuning_seeds)
from esper_fx.distributed.runtime import INSTALL_HINT, RayAddressError, check_ray_address, ray_installed
from esper_fx.command import EXIT_OK, CommandParser
from esper_fx.configuration.checks import no_effect
from esper_fx.errors import ConfigError
from esper_fx.evaluation.resume import COMMAND_NAME
from esper_fx.evaluation.seed_sets import MAX_EVAL_SEEDS
from esper_fx.outputs.checkpoint import CheckpointError, shape_fields
from esper_fx.outputs.provenance import collect, run_devices
from esper_fx.stopping import deferred_stops, exit_code, ignore_stops, sigterm_stops, stop_signal

NAME = "esper_fx.prove"
DEFAULT_ARMS = ("ppo", "wait", "random", "heuristic", "oracle", "static_final")
DEFAULT_EVAL_SEEDS = 8
DEFAULT_EVAL_SEED_OFFSET = 900_000
LEARNED_ARMS = {"ppo": True, "ppo_sampled": False}  # arm -> greedy
PPO_CONTROLLERS = ("ppo_lstm", "ppo_mlp")  # the checkpoints the learned arms play
# what `--resume` may change: the fields train's resume may change (where and how it runs), less the training's
# episodes, which change its result; and of prove's own flags, how much it prints
RESUME_MAY_CHANGE = tuple(name for name in RESUME_OVERRIDABLE if name not in ("n_episodes", "run_dir"))
RESUME_MAY_CHANGE_FLAGS = ("--quiet",)


ProveError = ConfigError  # a bad flag or configuration: one line, exit 2, nothing written


def build_parser() -> CommandParser:
    p = CommandParser(NAME,
                      description="Train the PPO controller and compare it with the static host, random, the "
                                  "heuristic, a fixed growth schedule and a static copy of its final architecture, "
                                  "on evaluation seeds it never saw.",
                      epilog="--seed is the training run's seed (default: the preset's); --train-seeds trains one "
                             "run per seed instead. By default (--env-workers "
                             "auto) training uses Ray env workers and the evaluation episodes run as Ray tasks, "
                             "one per usable core at a time; with --env-workers N, N at a time; with 0 everything "
                             "runs in this process. The table is the same.")
    p.add_argument("--preset", default="quickstart", help=f"base preset, one of {', '.join(PRESET_NAMES)}")
    p.add_argument("--arms", nargs="+", default=None, metavar="ARM",
                   help=f"arms to compare (default: {' '.join(DEFAULT_ARMS)}; with another controller configured, "
                        f"`--set controller=reinforce`, its name in ppo's place: an arm is named by its controller)")
    p.add_argument("--train-episodes", dest="n_episodes", type=int, help=argparse.SUPPRESS)  # --episodes' old name
    p.add_argument("--eval-seeds", type=int, nargs="+", metavar="S", help="explicit evaluation seeds")
    p.add_argument("--n-eval-seeds", type=int, metavar="N",
                   help=f"number of evaluation seeds (default {DEFAULT_EVAL_SEEDS})")
    p.add_argument("--eval-seed-offset", type=int, metavar="K",
                   help=f"first evaluation seed (default {DEFAULT_EVAL_SEED_OFFSET})")
    p.add_argument("--tuning-seeds", type=int, nargs="+", metavar="S", default=None,
                   help=f"where best_fixed searches its schedule (default {' '.join(map(str, DEFAULT_TUNING_SEEDS))}, "
                        f"and for a task mix the first seeds from there that draw each task, "
                        f"{MIX_TUNING_SEEDS_PER_TASK} per task); "
                        f"disjoint from training and evaluation seeds")
    add_pick_flags(p)
    p.add_argument("--checkpoint", metavar="RUN_DIR", nargs="+",
                   help="evaluate this trained run instead of training one; several runs that differ in their "
                        "training seed alone are played as ppo[seed=S] each, with the aggregate across them")
    p.add_argument("--train-seeds", type=int, nargs="+", metavar="S",
                   help="train one controller per seed (instead of --seed), each on its own run directory, and "
                        "report each seed's rows and the aggregate across them")
    p.add_argument("--static-budgets", type=float, nargs="+", metavar="F", default=None,
                   help="also train static_final on these fractions of its own budget (e.g. 0.4 0.6 0.8), each "
                        "decayed over its own steps, and report every grown arm's compute saved at equal accuracy "
                        "against that curve (needs static_final in --arms)")
    add_set_option(p)
    p.add_argument("--out", metavar="DIR", help="output directory (default runs/prove-<preset>-<UTC time>)")
    p.add_argument("--json", metavar="PATH", help="JSON results (default <out>/prove.json)")
    p.add_argument("--quiet", action="store_true", help="only the final table")
    p.add_argument("--resume", metavar="OUT",
                   help="continue the prove stopped in OUT with its first start's command line (kept in OUT), "
                        "reusing every finished training run, search point and episode; only where and how it "
                        "runs may change (--device, --env-workers, --ray-address, --data-dir, --quiet)")
    add_field_flags(p, ("n_episodes", "seed", "device", "env_workers", "ray_address", "data_root"))
    return p


def add_pick_flags(parser: argparse.ArgumentParser) -> None:
    """A flag per field of `fair_controls.PickRule` (`--best-fixed-pick`, `--best-fixed-within`), built from its
    declaration: its help, metavar and default; unset, it parses as None (`pick_options` checks it)."""
    from dataclasses import fields

    for f in fields(PickRule):
        parser.add_argument(_pick_flag(f.name), dest=f.name, type=type(f.default), default=None,
                            metavar=f.metadata.get("metavar"), help=f"{f.metadata['help']} (default {f.default})")


def _pick_flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def pick_options(args: argparse.Namespace) -> dict[str, Any]:
    """The `PickRule` fields the command line gives (`compare`'s options of the same names), each checked: a
    bad value, or one given when no arm is best_fixed, is refused by its flag. Raises ProveError."""
    from dataclasses import fields

    given = {f.name: getattr(args, f.name) for f in fields(PickRule) if getattr(args, f.name, None) is not None}
    for name, value in given.items():
        if "best_fixed" not in args.arms:
            raise ProveError(f"{_pick_flag(name)}: no arm of {' '.join(args.arms)} searches a fixed schedule "
                             f"(list best_fixed in --arms, or drop the flag)")
        try:
            PickRule(**{name: value})
        except ValueError as exc:
            raise ProveError(f"{_pick_flag(name)}: {exc}") from None
    return given


# ----------------------------------------------------------------------------------------------
# configuration
# ----------------------------------------------------------------------------------------------


class Resolved(NamedTuple):
    """What a prove command line asks for, checked."""

    config: TrainingConfig  # the base configuration every arm starts from
    policy: Any  # the trained policy to evaluate, a dict training seed -> policy for several runs, or None
    seeds: range | list[int]  # the evaluation seeds
    train_seeds: list[int] | None  # `--train-seeds`, or the seeds of several `--checkpoint` runs; None: one


def resolve(args: argparse.Namespace) -> Resolved:
    """The command line's configuration, policy and seeds (`Resolved`). Raises ProveError."""
    sets = parse_sets(args.sets)
    typed_arms = args.arms is not None
    if not typed_arms:
        args.arms = list(DEFAULT_ARMS)
    check_nothing_ignored(args, sets)
    pick_options(args)
    seeds = eval_seeds(args)
    train_seeds = train_seed_list(args)
    policy = None
    try:
        if args.checkpoint is not None:
            loaded = load_checkpoints(args.checkpoint)
            base = loaded[0][1]
            policy = loaded[0][2] if len(loaded) == 1 else {config.seed: pol for _, config, pol in loaded}
        else:
            base = TrainingConfig.preset(args.preset)
        changes = with_sections(base, command_line_changes(sets, args))
        config = base.replace(**changes, run_dir=None, resume_path=None) if changes else base
    except (ValueError, TypeError, OSError, CheckpointError) as exc:
        raise ProveError(str(exc)) from None
    if policy is not None:
        check_policy_fields(base, config, " ".join(args.checkpoint))
    args.arms = arms_named_by_controller(args.arms, config, typed_arms, policy is not None)
    for line in no_effect(config, flat_view(command_line_changes(sets, args)), arm_controllers(args.arms, config)):
        print(f"{NAME}: note: {line}", file=sys.stderr)
    if isinstance(policy, dict):
        train_seeds = list(policy)
    explicit = config.env_workers != AUTO and config.env_workers > 0
    if explicit and not ray_installed():
        raise ProveError(f"--env-workers {config.env_workers}: {INSTALL_HINT}")
    if config.env_workers != 0:
        try:
            check_ray_address(config.ray_address)
        except RayAddressError as exc:
            raise ProveError(str(exc)) from None
    from esper_fx.evaluation.seed_sets import check_disjoint, check_training_seeds, check_tuning_seeds

    if args.tuning_seeds is None:
        args.tuning_seeds = list(default_tuning_seeds(config))
    tuning = args.tuning_seeds if "best_fixed" in args.arms else None
    try:
        if train_seeds is not None:
            check_training_seeds(config, train_seeds, seeds, tuning)
        else:
            check_disjoint(config, seeds)
            if tuning is not None:
                check_tuning_seeds(config, tuning, seeds)
    except ValueError as exc:
        raise ProveError(str(exc)) from None
    return Resolved(config, policy, seeds, train_seeds)


# what may differ between several `--checkpoint` runs played together: where and how each ran, and its seed
_RUN_ONLY = frozenset(RESUME_OVERRIDABLE) - {"n_episodes"} | {"seed", "resume_path"}


def load_checkpoints(paths: Sequence[str]) -> list[tuple[str, TrainingConfig, Any]]:
    """(path, training configuration, policy) of each `--checkpoint` run. Several must be runs of one
    configuration (episodes included) with distinct training seeds. Raises ProveError."""
    from esper_fx.evaluation.episodes import load_policy

    loaded = [(path, *load_policy(path)) for path in paths]
    first_path, first, _ = loaded[0]
    theirs = flat_view(first.to_dict(every_constant=True))
    by_seed: dict[int, str] = {}
    for path, config, _ in loaded:
        if config.seed in by_seed:
            raise ProveError(f"--checkpoint: {by_seed[config.seed]} and {path} were both trained with seed "
                             f"{config.seed}; several runs must have distinct training seeds")
        by_seed[config.seed] = path
        mine = flat_view(config.to_dict(every_constant=True))
        differ = [name for name in sorted(set(mine) | set(theirs)) if name not in _RUN_ONLY
                  and mine.get(name) != theirs.get(name)]
        if differ:
            raise ProveError(f"--checkpoint {path}: trained with {differ[0]} {mine.get(differ[0])!r}, {first_path} "
                             f"with {theirs.get(differ[0])!r}; several runs must differ in their training seed alone")
    return loaded


def train_seed_list(args: argparse.Namespace) -> list[int] | None:
    """`--train-seeds` checked (`seed_sets.check_train_seeds`: distinct signed 64-bit seeds), or None."""
    from esper_fx.evaluation.seed_sets import check_train_seeds

    if args.train_seeds is None:
        return None
    try:
        return check_train_seeds(args.train_seeds)
    except ValueError as exc:
        raise ProveError(f"--train-seeds: {exc}") from None


def check_nothing_ignored(args: argparse.Namespace, sets: dict[str, Any]) -> None:
    """A flag or setting that would change nothing is refused, not silently ignored: `--episodes` or
    `--train-seeds` beside `--checkpoint` (nothing is trained), `--seed` (or `--set seed`) beside
    `--train-seeds` or several `--checkpoint` runs, `--n-eval-seeds` or `--eval-seed-offset` beside
    `--eval-seeds`, an `oracle` setting when no arm plays the oracle's schedule (`oracle`, or `best_fixed`
    with its blend)."""
    if args.checkpoint is not None and args.n_episodes is not None:
        raise ProveError(f"--episodes: --checkpoint {' '.join(args.checkpoint)} is evaluated as trained, nothing is "
                         f"trained (drop --episodes, or --checkpoint to train a new run)")
    if args.eval_seeds is not None and (args.n_eval_seeds is not None or args.eval_seed_offset is not None):
        raise ProveError("--eval-seeds lists the evaluation seeds: --n-eval-seeds and --eval-seed-offset would be "
                         "ignored (drop them)")
    if args.train_seeds is not None and args.checkpoint is not None:
        raise ProveError(f"--train-seeds: --checkpoint {' '.join(args.checkpoint)} is evaluated as trained, nothing "
                         f"is trained (drop --train-seeds, or --checkpoint to train one controller per seed)")
    if args.checkpoint is not None and len(args.checkpoint) > 1 and (args.seed is not None or "seed" in sets):
        flag = "--seed" if args.seed is not None else "--set seed"
        raise ProveError(f"--checkpoint: each of several runs is played with its own training seed: {flag} would "
                         f"be ignored (drop {flag})")
    if args.train_seeds is not None and (args.seed is not None or "seed" in sets):
        flag = "--seed" if args.seed is not None else "--set seed"
        raise ProveError(f"--train-seeds sets each training run's seed: {flag} would be ignored (drop {flag})")
    if "oracle" in sets and not {"oracle", "best_fixed"} & set(args.arms):
        raise ProveError(f"--set oracle.*: no arm of {' '.join(args.arms)} plays the oracle's schedule (list oracle "
                         f"or best_fixed in --arms, or drop the setting)")


def eval_seeds(args: argparse.Namespace) -> range | list[int]:
    """The evaluation seeds: `--eval-seeds`, or `--n-eval-seeds` from `--eval-seed-offset` (a range, never
    enumerated here), each a signed 64-bit seed, distinct, at most MAX_EVAL_SEEDS."""
    if args.eval_seeds is not None:
        seeds = list(args.eval_seeds)
        outside = [s for s in seeds if not SEED_MIN <= s <= SEED_MAX]
        if outside:
            raise ProveError(f"--eval-seeds: {outside[0]} is not a signed 64-bit seed (from {SEED_MIN} to {SEED_MAX})")
        if len(set(seeds)) != len(seeds):
            raise ProveError(f"evaluation seeds must be distinct (got {seeds})")
    else:
        n = DEFAULT_EVAL_SEEDS if args.n_eval_seeds is None else args.n_eval_seeds
        first = DEFAULT_EVAL_SEED_OFFSET if args.eval_seed_offset is None else args.eval_seed_offset
        if n < 1:
            raise ProveError(f"--n-eval-seeds must be >= 1 (got {n})")
        if n > MAX_EVAL_SEEDS:
            raise ProveError(f"--n-eval-seeds {n}: at most {MAX_EVAL_SEEDS} (one episode per arm and seed)")
        if not (SEED_MIN <= first and first + n - 1 <= SEED_MAX):
            raise ProveError(f"--eval-seed-offset {first} with --n-eval-seeds {n}: the evaluation seeds must be "
                             f"signed 64-bit seeds (from {SEED_MIN} to {SEED_MAX})")
        seeds = range(first, first + n)
    if len(seeds) > MAX_EVAL_SEEDS:
        raise ProveError(f"--eval-seeds lists {len(seeds)} seeds: at most {MAX_EVAL_SEEDS}")
    return seeds


def policy_fields(controller: str) -> tuple[str, ...]:
    """The fields a trained policy of `controller` depends on, which `--checkpoint` keeps."""
    return tuple(name for name in shape_fields(controller) if name != "n_envs")


def _policy_value(config: TrainingConfig, name: str) -> Any:
    values = {"slots": list(config.enabled_slots), "blueprint_menu": list(config.menu),
              "controller": config.controller_name}
    return values[name] if name in values else flat_view(config.to_dict())[name]


def check_policy_fields(trained: TrainingConfig, config: TrainingConfig, checkpoint: str) -> None:
    """A checkpoint's policy is evaluated only on what it was trained for: `--set` may not change a field
    its shapes (or the meaning of its observations) depend on: the checkpoint's (`checkpoint.shape_fields`
    of its controller, its network's width included), but n_envs (evaluation runs one env per episode)."""
    for name in policy_fields(trained.controller_name):
        before, after = _policy_value(trained, name), _policy_value(config, name)
        if before != after:
            raise ProveError(f"--set {name}: the policy of {checkpoint} was trained with {name} {before!r}; "
                             f"it cannot be evaluated with {after!r} (drop --set {name}, or train a new run)")


def check_outputs(out: Path, json_path: Path | None) -> None:
    """The output directory can be created (or is an empty, writable directory) and `--json` names a file
    in an existing directory (or in the output directory); checked before anything runs or is written."""
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise ProveError(f"--out {out}: exists and is not a directory")
        if any(out.iterdir()):
            raise ProveError(f"output directory {out} is not empty")
        if not os.access(out, os.W_OK | os.X_OK):
            raise ProveError(f"--out {out}: the directory is not writable")
    else:
        ancestor = next((p for p in out.parents if p.exists()), Path(out.anchor))
        if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
            raise ProveError(f"--out {out}: cannot be created ({ancestor} is not a writable directory)")
    if json_path is None:
        return
    if json_path.is_dir():
        raise ProveError(f"--json {json_path}: is a directory (name a file)")
    parent = json_path.parent
    if parent == out:
        return
    if not parent.is_dir():
        raise ProveError(f"--json {json_path}: its directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (json_path.exists() and not os.access(json_path, os.W_OK)):
        raise ProveError(f"--json {json_path}: not writable")


def arm_table(names: Sequence[str], config: TrainingConfig, policy: Any,
              static_budgets: Sequence[float] | None = None) -> dict[str, Any]:
    """Arm name -> a `compare` arm. Learned arms share one trained policy (trained once). Every arm is
    checked against the configuration here (e.g. the oracle's schedule against the enabled slots).
    `static_budgets`: `static_final` on those fractions of its budget, right after it (`arms.budget_arms`)."""
    from esper_fx.controller_names import NAMES
    from esper_fx.evaluation.arms import STATIC_FINAL, Trained, TrainedSeeds, budget_arms, default_source
    from esper_fx.evaluation.fair_controls import BEST_FIXED, STATIC_MATCHED

    if len(set(names)) != len(names):
        raise ProveError(f"--arms lists an arm twice: {list(names)}")
    if static_budgets and STATIC_FINAL not in names:
        raise ProveError("--static-budgets trains static_final on fractions of its budget: list static_final in "
                         "--arms (it is the full budget)")
    arms: dict[str, Any] = {}
    played = None if policy is None else config.controller_name  # the controller the checkpoint holds
    if isinstance(policy, dict):  # several --checkpoint runs, one per training seed
        trained = TrainedSeeds({seed: Trained(config.replace(seed=seed), p) for seed, p in policy.items()})
    else:
        trained = Trained(config, policy) if policy is not None else None
    for name in names:
        if name in LEARNED_ARMS:
            if played is not None and played not in PPO_CONTROLLERS:
                raise ProveError(f"--arms {name}: the --checkpoint run holds a {played!r} controller, and {name} "
                                 f"plays a PPO one; its arm is named by its controller (--arms "
                                 f"{' '.join(_with_arm_of(played, names))})")
            source = trained if trained is not None else config.controller_name
            arms[name] = {"controller": source, "greedy": LEARNED_ARMS[name]}
        elif played is not None and _canonical(name) == played:  # the checkpoint's own controller plays it
            arms[name] = {"controller": trained, "greedy": True}
        elif name in (STATIC_FINAL, STATIC_MATCHED, BEST_FIXED):
            if name != BEST_FIXED:  # the static arms rebuild the architecture an earlier arm ended with
                source = next((n for n in names if n in LEARNED_ARMS or _trains(n, config)), default_source(names))
                if source not in names[:names.index(name)]:
                    raise ProveError(f"--arms: {name} rebuilds the architecture {source!r} ended with; list "
                                     f"{source!r} before it")
            arms[name] = name
            if name == STATIC_FINAL and static_budgets:
                try:
                    arms.update(budget_arms(static_budgets))
                except ValueError as exc:
                    raise ProveError(f"--static-budgets: {exc}") from None
        else:
            try:
                NAMES.canonical(name)
            except ValueError:
                raise ProveError(f"unknown arm {name!r}: use ppo, ppo_sampled, static_final, static_matched, "
                                 f"best_fixed or a controller name "
                                 f"{NAMES.choices()}") from None
            try:
                config.replace(controller=name)
            except (ValueError, TypeError) as exc:
                raise ProveError(f"arm {name!r}: {exc}") from None
            arms[name] = name
    if played is not None and not any(isinstance(arm, dict) and arm.get("controller") is trained
                                      for arm in arms.values()):
        arm = "ppo" if played in PPO_CONTROLLERS else played
        raise ProveError(f"--checkpoint: no arm of {' '.join(names)} plays the checkpoint's {played!r} controller "
                         f"(list {arm} in --arms, or drop --checkpoint)")
    return arms


def arms_named_by_controller(names: Sequence[str], config: TrainingConfig, typed: bool,
                             checkpoint: bool) -> list[str]:
    """The arms, each learned one named by its controller: the learned arms `ppo` and `ppo_sampled` play a PPO
    controller, so with another one configured (`controller=reinforce`) the default arms have its name in
    `ppo`'s place, and a typed `ppo` is refused naming the arm to list. (A `--checkpoint` is checked against its
    controller in `arm_table`.)"""
    names = list(names)
    played = config.controller_name
    if checkpoint or played in PPO_CONTROLLERS or not any(name in LEARNED_ARMS for name in names):
        return names
    if not typed:
        return _with_arm_of(played, names)
    name = next(name for name in names if name in LEARNED_ARMS)
    raise ProveError(f"--arms {name} plays a PPO controller, and this run's controller is {played!r}: its arm is "
                     f"named by its controller (--arms {' '.join(_with_arm_of(played, names))}), or set "
                     f"controller=ppo_lstm")


def _with_arm_of(controller: str, names: Sequence[str]) -> list[str]:
    """`names` with the learned arms' place taken by `controller`'s own arm (its name), each arm once."""
    return list(dict.fromkeys(controller if n == "ppo" else n for n in names if n != "ppo_sampled"))


def arm_controllers(names: Sequence[str], config: TrainingConfig) -> set[str]:
    """The controllers the arms `names` play (canonical names): the learned arms the configured (or the
    checkpoint's) one, best_fixed the oracle's schedule, a controller's name that controller; the static arms
    play none."""
    from esper_fx.evaluation.fair_controls import BEST_FIXED

    played = {config.controller_name if name in LEARNED_ARMS else "oracle" if name == BEST_FIXED else _canonical(name)
              for name in names}
    return {c for c in played if c is not None}


def _canonical(name: str) -> str | None:
    """The controller `name` names (an alias resolved), or None for an arm that names none."""
    from esper_fx.controller_names import NAMES

    try:
        return NAMES.canonical(name)
    except ValueError:
        return None


def _trains(name: str, config: TrainingConfig) -> bool:
    """Whether the arm `name` is a registered learning controller other than the `ppo` arms (`reinforce`, one
    registered by the user): `compare` trains it, and a static arm listed after it rebuilds what it grew."""
    from esper_fx.evaluation.arms import _learns

    try:
        return _learns(name, name, config)
    except ValueError:  # not a controller's name: arm_table reports it
        return False


def arm_runs(arms: dict[str, Any], config: TrainingConfig, train_seeds: Sequence[int] | None) -> int:
    """How many arms run on the evaluation seeds: with `--train-seeds`, a learned arm (and a static arm
    rebuilding it) once per training seed (`arms.per_seed_arms`: at least one arm must learn)."""
    if train_seeds is None:
        return len(arms)
    from esper_fx.evaluation.arms import per_seed_arms

    try:
        return len(per_seed_arms(arms, config, train_seeds)[0])
    except ValueError as exc:
        raise ProveError(f"--train-seeds: {exc} (list ppo in --arms)") from None


def out_dir(args: argparse.Namespace) -> Path:
    if args.out:
        return Path(os.path.abspath(args.out))
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    return Path(os.path.abspath(os.path.join("runs", f"prove-{args.preset}-{stamp}")))


# ----------------------------------------------------------------------------------------------
# the command
# ----------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """The exit code of one command line: 0 done, 2 a bad input (one line, nothing written), 1 a run that
    cannot go on, 130 / 143 stopped by Ctrl-C / SIGTERM (prove.json of the finished episodes written)."""
    ensure_jax_env(warn=False)
    argv = list(sys.argv[1:] if argv is None else argv)
    with sigterm_stops():
        try:
            args = build_parser().parse_args(argv)
            command = None if args.resume is not None else argv  # recorded in the output directory
            if args.resume is not None:
                args = resumed_args(argv)
            config, policy, seeds, train_seeds = resolve(args)
            arms = arm_table(args.arms, config, policy, args.static_budgets)
            runs = arm_runs(arms, config, train_seeds)
            out = out_dir(args)
            json_path = Path(os.path.abspath(args.json)) if args.json else None
            if command is not None:
                check_outputs(out, json_path)
            note_old_spellings(old_set_keys(args.sets))
        except ConfigError as exc:
            return CommandParser(NAME).fail(exc)
        except KeyboardInterrupt as stop:
            print(f"\nesper_fx.prove: interrupted ({_signal_name(stop_signal(stop))}) before anything ran",
                  file=sys.stderr)
            return exit_code(stop_signal(stop))
        return run_prove(args, config, arms, list(seeds), out, json_path or out / "prove.json", runs, train_seeds,
                         command)


def run_as_command(argv: Sequence[str] | None = None) -> int:
    """`main` as the process's command (`python -m esper_fx.prove`): once it returns, the process exits, and a
    signal then (in Ray's or JAX's exit handlers) printed "Exception ignored in atexit callback" tracebacks:
    it is ignored, said in one line when the prove had finished."""
    code = main(argv)
    ignore_stops(None if code != EXIT_OK else
                 "esper_fx.prove: {signal} as prove exits: its results are all written; nothing is lost")
    return code


def resumed_args(argv: Sequence[str]) -> argparse.Namespace:
    """`--resume OUT`: the command line of the prove started in OUT (`COMMAND_NAME`), read as at its start,
    with the resume's own flags on top; a flag that would change the result (any but `RESUME_MAY_CHANGE` and
    `RESUME_MAY_CHANGE_FLAGS`) and differs from the first start's is refused by name. Values are compared as
    they resolve: paths (`PATH_FLAGS`) made absolute, each against the folder it was typed in
    (`typed_path`: a relative path typed on a resume from another folder is read from the first start's, in a
    line on stderr), and a flag left out as the value it then took (`with_resolved_defaults`), so typing a
    default, or a path to the same file, changes nothing. Raises ProveError."""
    given = vars(_given_flags(argv))
    out = Path(os.path.abspath(given.pop("resume")))
    record = out / COMMAND_NAME
    try:
        kept = json.loads(record.read_text(encoding="utf-8"))
        if not isinstance(kept, dict):
            raise TypeError(f"a JSON object was expected, not {type(kept).__name__}")
        first_argv, cwd = kept["argv"], kept["cwd"]
        if not (isinstance(first_argv, list) and all(isinstance(a, str) for a in first_argv)):
            raise TypeError(f"argv must be a list of strings (got {first_argv!r:.80})")
        if not isinstance(cwd, str):
            raise TypeError(f"cwd must be a folder's path (got {cwd!r:.80})")
    except FileNotFoundError:
        raise ProveError(f"--resume {out}: no prove was started there ({COMMAND_NAME} is missing); start one "
                         f"without --resume") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ProveError(f"--resume {out}: {record} cannot be read ({type(exc).__name__}: {exc}); start the "
                         f"prove again in a new --out") from None
    try:
        first = build_parser().parse_args(first_argv)
    except ConfigError as exc:
        raise ProveError(f"--resume {out}: the command line kept in {record} no longer parses ({exc})") from None
    if "out" in given:
        raise ProveError(f"--resume {out} continues the prove in {out}: drop --out")
    for name in PATH_FLAGS:  # every path as the command that typed it read it: absolute
        if getattr(first, name) is not None:
            setattr(first, name, _paths(getattr(first, name), cwd))
        if given.get(name) is not None:
            given[name] = _paths(given[name], cwd, _flag_of(name))
    fields = {ff.key for ff in field_flags()}
    sets = given.pop("sets", [])
    changes = command_line_changes(parse_sets(sets), argparse.Namespace(**given))
    own = {f"--{name.replace('_', '-')}": value for name, value in given.items() if name not in fields}
    if own or changes:
        base = resolve(argparse.Namespace(**vars(first))).config
        kept_own = with_resolved_defaults(vars(first), base)
        refuse_resume_changes({f"--{name.replace('_', '-')}": value for name, value in kept_own.items()}, own,
                              RESUME_MAY_CHANGE_FLAGS, "the first start")
    if changes:
        refuse_resume_changes(base.to_dict(every_constant=True), with_sections(base, changes), RESUME_MAY_CHANGE,
                              "the first start")
    for name, value in given.items():
        setattr(first, name, value)
    for key in flat_view(parse_sets(sets)):  # a --set on the resume wins over the first start's flag for that field
        if key in fields and key not in given:
            setattr(first, key, None)
    first.sets = [*first.sets, *sets]
    first.out, first.resume, first.resume_argv = str(out), str(out), list(argv)
    return first


# the flags that name files or folders, read against the folder the command was typed in
PATH_FLAGS = ("checkpoint", "json", "data_root")


def _flag_of(name: str) -> str:
    return {"data_root": "--data-dir"}.get(name, f"--{name.replace('_', '-')}")


def _paths(value: str | list[str], first_cwd: str, flag: str | None = None) -> str | list[str]:
    """A path flag's value (one path or a list), each path made absolute: typed on the first start (`flag`
    None) against its folder `first_cwd`; typed on a resume, by `typed_path`."""
    one = (lambda p: os.path.normpath(os.path.join(first_cwd, p))) if flag is None else \
        (lambda p: typed_path(p, first_cwd, flag, NAME))
    return [one(p) for p in value] if isinstance(value, list) else one(value)


def with_resolved_defaults(args: dict[str, Any], config: TrainingConfig) -> dict[str, Any]:
    """prove's own flags with each one left out (None) as the value it resolves to: the tuning seeds (those of
    `default_tuning_seeds`), the evaluation seeds' count and offset (without --eval-seeds) and best_fixed's
    pick rule (`PickRule`'s defaults)."""
    from dataclasses import fields as dataclass_fields

    resolved = dict(args)
    defaults = {"tuning_seeds": list(default_tuning_seeds(config)),
                **({"n_eval_seeds": DEFAULT_EVAL_SEEDS, "eval_seed_offset": DEFAULT_EVAL_SEED_OFFSET}
                   if args.get("eval_seeds") is None else {}),
                **{f.name: f.default for f in dataclass_fields(PickRule)}}
    for name, value in defaults.items():
        if resolved.get(name) is None:
            resolved[name] = value
    return resolved


def _given_flags(argv: Sequence[str]) -> argparse.Namespace:
    """The flags `argv` gives, and only those (no defaults)."""
    parser = build_parser()
    for action in parser._actions:
        action.default = argparse.SUPPRESS
    return parser.parse_args(argv)


def run_prove(args: argparse.Namespace, config: TrainingConfig, arms: dict[str, Any], seeds: list[int],
              out: Path, json_path: Path, runs: int | None = None, train_seeds: list[int] | None = None,
              command: Sequence[str] | None = None) -> int:
    """Train, evaluate, write; a stop writes what finished, a setup problem or a failed run is one line.
    `runs`: the arms that run on the evaluation seeds (`arm_runs`; default one per arm); `train_seeds`:
    those of `--train-seeds` or of several `--checkpoint` runs (None: one controller); `command`: a first
    start's command line, recorded in `out` for `--resume` (None: a resume, recorded already)."""
    from esper_fx.cli.run import _error_exit_code, one_line
    from esper_fx.training.run_state import Interrupted

    started = time.perf_counter()
    held: list[Any] = []  # the output folder's lock, once `_run_prove` took it (released when prove ends)
    try:
        return _run_prove(args, config, arms, seeds, out, json_path, started, train_seeds, command, held)
    except (KeyboardInterrupt, Interrupted) as stop:
        return _stopped(args, config, seeds, json_path, stop, started, runs or len(arms), out)
    except Exception as exc:  # noqa: BLE001 - sorted below; anything else is a bug and keeps its traceback
        code = _error_exit_code(exc)
        if code is None:
            raise
        print(f"esper_fx.prove: error: {one_line(exc)}", file=sys.stderr)
        return code
    finally:
        for lock in held:
            lock.release()


def _run_prove(args, config, arms, seeds, out, json_path, started, train_seeds=None, command=None,
               held=None) -> int:
    from esper_fx.errors import OutputError
    from esper_fx.outputs.folder_lock import FolderLock
    from esper_fx.training.threads import limit_cpu_threads
    from esper_fx.evaluation.comparison import compare
    from esper_fx.training.preflight import check_before_writing, check_data

    # before out/ is created: the devices, W&B's settings, the data folder and the dataset (one line, exit 2)
    check_before_writing(config.replace(run_dir=None, resume_path=None))  # (a --checkpoint's config names its run)
    check_data(config)
    out.mkdir(parents=True, exist_ok=True)
    # one prove at a time in OUT (two resumes at once played every episode twice, until one died on the
    # other's files): another holding it is named, exit 2
    (held if held is not None else []).append(FolderLock.take(out, "prove output folder"))
    if command is not None or getattr(args, "resume_argv", None) is not None:
        with deferred_stops():  # first, so that a stop anywhere after it can be resumed
            keep_command(out, command, getattr(args, "resume_argv", None))
    say = (lambda line: None) if args.quiet else (lambda line: print(line, flush=True))
    limit_cpu_threads(config, say)
    say(f"prove: preset {args.preset}, task {config.task.value}, arms {', '.join(arms)}, "
        f"evaluation seeds {seeds[0]}..{seeds[-1]} ({len(seeds)}), output {out}")
    say(workers_line(config, arms, seeds, args.tuning_seeds, train_seeds))
    table = compare(arms, config, seeds, progress=say, train_dir=str(out / "train"), quiet_training=args.quiet,
                    tuning_seeds=args.tuning_seeds, train_seeds=train_seeds, resume=out, **pick_options(args))
    wall = time.perf_counter() - started
    print(table.to_text())
    with deferred_stops(reraise=False) as late:  # the evaluation is complete: a late stop waits for its record
        try:
            write_json(json_path, report_of(table, config, wall, out=out))
        except OutputError as exc:  # every episode is kept in out/: a resume writes the record again at once
            raise OutputError(f"{exc}; every finished episode is kept in {out}: make room, then "
                              f"python -m esper_fx.prove --resume {out}") from None
    if late.held is not None:
        print(f"esper_fx.prove: interrupted ({_signal_name(late.held)}) as its results were written: {json_path} "
              f"is whole; the plots are not drawn (python -m esper_fx.prove --resume {out} draws them)",
              file=sys.stderr)
        return exit_code(late.held)
    try:
        trained = f"{len(train_seeds)} training seeds × " if train_seeds else ""
        table.plot(out / "prove.png", title=f"{config.task.value}: {trained}{len(seeds)} evaluation seeds")
        from esper_fx.evaluation.compute_plot import accuracy_vs_compute

        accuracy_vs_compute(table, out / "prove_compute.png",
                            title=f"{config.task.value}: accuracy against training compute")
    except KeyboardInterrupt as stop:
        print(f"esper_fx.prove: prove.png or prove_compute.png not written ({_signal_name(stop_signal(stop))}); the results are in "
              f"{json_path}", file=sys.stderr)
        return exit_code(stop_signal(stop))
    for arm, r in table.trained.items():
        workers = (r.summary.get("timing") or {}).get("env_workers", 0)
        print(f"trained {arm}: {r.summary['episodes']} episodes in {r.summary['wall_time_s']:.0f} s "
              f"({f'{workers} Ray env workers' if workers else 'envs in process'})")
    print(f"prove: {wall:.0f} s in all; wrote {json_path}, {out / 'prove.png'} and {out / 'prove_compute.png'}")
    return EXIT_OK


def workers_line(config: TrainingConfig, arms: Any, seeds: Any, tuning_seeds: Any, train_seeds: Any = None) -> str:
    """What `--env-workers` (default `auto`) gives training and the evaluation episodes, before they run."""
    from esper_fx.distributed.auto import choose_eval_workers, choose_workers
    from esper_fx.evaluation.arm_runner import evaluation_episodes

    n = evaluation_episodes(arms, config, seeds, tuning_seeds, train_seeds)
    evaluation = choose_eval_workers(config, n)
    at_a_time = f"{evaluation.n} at a time as Ray tasks" if evaluation.n else "in this process"
    return (f"prove: env workers: training {choose_workers(config).describe()}; {n} evaluation episodes "
            f"{at_a_time} ({'auto: ' if evaluation.auto else ''}{evaluation.why})")


def keep_command(out: Path, first: Sequence[str] | None, resume: Sequence[str] | None) -> None:
    """`COMMAND_NAME` in `out`: a first start's command line and folder (`first`), or one more resume's command
    line, folder and UTC time appended to its `resumes` (`resume`)."""
    from esper_fx.outputs.durable import replace_text

    if first is not None:
        kept = {"argv": list(first), "cwd": os.getcwd(), "resumes": []}
    else:
        kept = json.loads((out / COMMAND_NAME).read_text(encoding="utf-8"))
        kept["resumes"] = [*kept.get("resumes", []), {"argv": list(resume), "cwd": os.getcwd(),
                                                      "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]
    replace_text(out / COMMAND_NAME, json.dumps(kept, indent=2) + "\n")


def command_history(out: Path | None) -> dict[str, Any]:
    """prove.json's `command` (the first start's command line, which the results answer) and `resumes` (each
    resume's), read from `COMMAND_NAME`; without it (an older output folder), this process's command line."""
    try:
        kept = json.loads((out / COMMAND_NAME).read_text(encoding="utf-8"))
        return {"command": [sys.argv[0], *kept["argv"]], "resumes": list(kept.get("resumes", []))}
    except (TypeError, OSError, ValueError, KeyError):
        return {"command": list(sys.argv), "resumes": []}


def report_of(table: Any, config: TrainingConfig, wall: float, stopped: dict[str, Any] | None = None,
              out: Path | None = None) -> dict:
    """prove.json: the table, the command with its resumes (`command_history`), the configuration, where it ran
    from (`outputs.provenance`), the training runs (and how it was stopped)."""
    provenance = collect(run_devices(config.device, config.env_devices), started=time.time() - wall)
    report = {**table.to_dict(), **command_history(out), "config": config.to_dict(), "wall_s": wall,
              "provenance": provenance,
              "training": {arm: {"run_dir": r.run_dir, "episodes": r.summary["episodes"],
                                 "wall_s": r.summary["wall_time_s"]} for arm, r in table.trained.items()}}
    if stopped is not None:
        report["stopped"] = stopped
    return report


def write_json(path: Path, report: dict[str, Any]) -> None:
    """prove.json written whole or not at all (`durable.write_whole`); a failure (a full disk) is an
    OutputError naming the file, the file as it was."""
    from esper_fx.errors import OutputError
    from esper_fx.outputs.durable import write_whole

    try:
        write_whole(path, json.dumps(report, indent=2) + "\n")
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


def _signal_name(signum: int) -> str:
    import signal

    return signal.Signals(signum).name


def _stopped(args, config: TrainingConfig, seeds: list[int], json_path: Path, stop: BaseException,
             started: float, runs: int, out: Path | None = None) -> int:
    """After Ctrl-C or SIGTERM: prove.json of the finished episodes (marked partial), one message, the exit
    code of the signal. A second signal meanwhile is ignored: prove is stopping."""
    from esper_fx.evaluation.comparison_table import ComparisonTable

    signum = int(getattr(stop, "signum", stop_signal(stop)))
    table = getattr(stop, "partial", None) or ComparisonTable([], [], {}, {}, list(seeds), True)
    finished = sum(len(eps) for eps in table.episodes.values())
    stopped = {"signal": _signal_name(signum), "episodes_finished": finished}
    training = getattr(stop, "run_dir", None)  # run_state.Interrupted: a training run stopped early
    if training is not None:
        stopped.update(training_run_dir=training, training_checkpoint=stop.checkpoint)
    with deferred_stops(reraise=False):
        try:
            if json_path.parent.is_dir():
                write_json(json_path, report_of(table, config, time.perf_counter() - started, stopped, out))
                wrote = f"wrote {json_path} (partial)"
            else:
                wrote = "nothing written"
        except OSError as exc:
            wrote = f"could not write {json_path}: {exc.strerror or exc}"
    resume = ""
    if out is not None and (out / COMMAND_NAME).is_file():
        resume = f"; continue with: python -m esper_fx.prove --resume {out}"
    print(f"\nesper_fx.prove: interrupted ({stopped['signal']}): {finished} evaluation episode(s) of "
          f"{len(seeds) * max(1, runs)} finished; {wrote}{resume}", file=sys.stderr)
    return exit_code(signum)


if __name__ == "__main__":
    sys.exit(run_as_command())
