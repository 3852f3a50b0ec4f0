"""`python -m esper_fx.prove`: train the PPO controller, then compare every arm on unseen seeds.

    python -m esper_fx.prove                                   # quickstart: train, then 6 arms × 8 seeds
    python -m esper_fx.prove --arms wait random heuristic oracle --n-eval-seeds 8
    python -m esper_fx.prove --checkpoint runs/quickstart-…    # evaluate a trained run instead
    python -m esper_fx.prove --set reward_family=contribution --set update_epochs=1   # an ablation

Arms: `ppo` (the trained controller, greedy), `ppo_sampled` (the same policy, sampling), `wait` (the static
host), `random`, `heuristic`, `oracle` (the configured fixed schedule), `static_final` (per seed, the
architecture the first learned arm ended with — or the oracle's — trained from scratch as a static
network), or any registered controller name. Evaluation seeds never overlap the training run's seeds.
The metric is the validation accuracy averaged over the last 3 epochs (`esper_fx.evaluation.episodes`); every pair
against `wait` and against the trained controller gets a paired difference, its 95% interval and a
verdict. Output: the table on the console, `<out>/prove.json` (every per-seed number) and `<out>/prove.png`.
A bad flag prints one line and exits 2 with nothing written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from esper_fx.outputs.checkpoint import CheckpointError
from esper_fx.cli.parser import add_field_flags, add_set_option, field_values, parse_sets, with_sections
from esper_fx.config import PRESET_NAMES, TrainingConfig
from esper_fx.errors import EXIT_OK, CommandParser, ConfigError
from esper_fx.distributed.runtime import INSTALL_HINT, ray_installed

NAME = "esper_fx.prove"
DEFAULT_ARMS = ("ppo", "wait", "random", "heuristic", "oracle", "static_final")
DEFAULT_EVAL_SEEDS = 8
DEFAULT_EVAL_SEED_OFFSET = 900_000
LEARNED_ARMS = {"ppo": True, "ppo_sampled": False}  # arm -> greedy


ProveError = ConfigError  # a bad flag or configuration: one line, exit 2, nothing written


def build_parser() -> CommandParser:
    p = CommandParser(NAME,
                      description="Train the PPO controller and compare it with the static host, random, the "
                                  "heuristic, a fixed growth schedule and a static copy of its final architecture, "
                                  "on evaluation seeds it never saw.",
                      epilog="--seed is the training run's seed (default: the preset's); with --env-workers N the "
                             "evaluation episodes also run as Ray tasks, N at a time.")
    p.add_argument("--preset", default="quickstart", help=f"base preset, one of {', '.join(PRESET_NAMES)}")
    p.add_argument("--arms", nargs="+", default=list(DEFAULT_ARMS), metavar="ARM",
                   help=f"arms to compare (default: {' '.join(DEFAULT_ARMS)})")
    p.add_argument("--train-episodes", type=int, metavar="N", help="training episodes (default: the preset's)")
    p.add_argument("--eval-seeds", type=int, nargs="+", metavar="S", help="explicit evaluation seeds")
    p.add_argument("--n-eval-seeds", type=int, default=DEFAULT_EVAL_SEEDS, metavar="N",
                   help=f"number of evaluation seeds (default {DEFAULT_EVAL_SEEDS})")
    p.add_argument("--eval-seed-offset", type=int, default=DEFAULT_EVAL_SEED_OFFSET, metavar="K",
                   help=f"first evaluation seed (default {DEFAULT_EVAL_SEED_OFFSET})")
    p.add_argument("--checkpoint", metavar="RUN_DIR", help="evaluate this trained run instead of training one")
    add_set_option(p)
    p.add_argument("--out", metavar="DIR", help="output directory (default runs/prove-<preset>-<UTC time>)")
    p.add_argument("--json", metavar="PATH", help="JSON results (default <out>/prove.json)")
    p.add_argument("--quiet", action="store_true", help="only the final table")
    add_field_flags(p.add_argument_group("configuration fields (any other: --set KEY=VALUE)"),
                    ("seed", "env_workers", "ray_address"))
    return p


# ----------------------------------------------------------------------------------------------
# configuration
# ----------------------------------------------------------------------------------------------


def resolve(args: argparse.Namespace) -> tuple[TrainingConfig, Any, list[int]]:
    """(base config, the trained policy to evaluate or None, evaluation seeds). Raises ProveError."""
    policy = None
    try:
        if args.checkpoint is not None:
            from esper_fx.evaluation.episodes import load_policy

            base, policy = load_policy(args.checkpoint)
        else:
            base = TrainingConfig.preset(args.preset)
        changes = with_sections(base, {**parse_sets(args.sets), **field_values(args)})
        if args.train_episodes is not None:
            changes["n_episodes"] = args.train_episodes
        config = base.replace(**changes, run_dir=None, resume_path=None) if changes else base
    except (ValueError, TypeError, OSError, CheckpointError) as exc:
        raise ProveError(str(exc)) from None
    if config.env_workers > 0 and not ray_installed():
        raise ProveError(f"--env-workers {config.env_workers}: {INSTALL_HINT}")
    if args.eval_seeds is not None:
        seeds = list(args.eval_seeds)
    else:
        if args.n_eval_seeds < 1:
            raise ProveError(f"--n-eval-seeds must be >= 1 (got {args.n_eval_seeds})")
        seeds = list(range(args.eval_seed_offset, args.eval_seed_offset + args.n_eval_seeds))
    if len(set(seeds)) != len(seeds):
        raise ProveError(f"evaluation seeds must be distinct (got {seeds})")
    from esper_fx.evaluation.comparison import check_disjoint

    try:
        check_disjoint(config, seeds)
    except ValueError as exc:
        raise ProveError(str(exc)) from None
    return config, policy, seeds


def arm_table(names: Sequence[str], config: TrainingConfig, policy: Any) -> dict[str, Any]:
    """Arm name -> a `compare` arm. Learned arms share one trained policy (trained once)."""
    from esper_fx.evaluation.comparison import STATIC_FINAL, Trained
    from esper_fx.controllers.registry import REGISTRY

    arms: dict[str, Any] = {}
    for name in names:
        if name in LEARNED_ARMS:
            source = Trained(config, policy) if policy is not None else config.controller_name
            arms[name] = {"controller": source, "greedy": LEARNED_ARMS[name]}
        elif name == STATIC_FINAL:
            arms[name] = STATIC_FINAL
        else:
            try:
                REGISTRY.canonical(name)
            except ValueError:
                raise ProveError(f"unknown arm {name!r}: use ppo, ppo_sampled, static_final or a controller name "
                                 f"{REGISTRY.choices()}") from None
            arms[name] = name
    if len(set(names)) != len(names):
        raise ProveError(f"--arms lists an arm twice: {list(names)}")
    return arms


def out_dir(args: argparse.Namespace) -> Path:
    if args.out:
        return Path(os.path.abspath(args.out))
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    return Path(os.path.abspath(os.path.join("runs", f"prove-{args.preset}-{stamp}")))


# ----------------------------------------------------------------------------------------------
# the command
# ----------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        config, policy, seeds = resolve(args)
        arms = arm_table(args.arms, config, policy)
        out = out_dir(args)
        if out.exists() and any(out.iterdir()):
            raise ProveError(f"output directory {out} is not empty")
    except ConfigError as exc:
        return CommandParser(NAME).fail(exc)
    return run_prove(args, config, arms, seeds, out)


def run_prove(args: argparse.Namespace, config: TrainingConfig, arms: dict[str, Any], seeds: list[int],
              out: Path) -> int:
    from esper_fx.cli.run import limit_cpu_threads
    from esper_fx.evaluation.comparison import compare

    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    say = (lambda line: None) if args.quiet else (lambda line: print(line, flush=True))
    limit_cpu_threads(config, say)
    say(f"prove: preset {args.preset}, task {config.task.value}, arms {', '.join(arms)}, "
        f"evaluation seeds {seeds[0]}..{seeds[-1]} ({len(seeds)}), output {out}")
    table = compare(arms, config, seeds, progress=say, train_dir=str(out / "train"), quiet_training=args.quiet)
    wall = time.perf_counter() - started
    print(table.to_text())
    json_path = Path(args.json) if args.json else out / "prove.json"
    report = {**table.to_dict(), "command": sys.argv, "config": config.to_dict(), "wall_s": wall,
              "training": {arm: {"run_dir": r.run_dir, "episodes": r.summary["episodes"],
                                 "wall_s": r.summary["wall_time_s"]} for arm, r in table.trained.items()}}
    with open(json_path, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=2)
        fh.write("\n")
    table.plot(out / "prove.png", title=f"{config.task.value}: {len(seeds)} evaluation seeds")
    for arm, r in table.trained.items():
        print(f"trained {arm}: {r.summary['episodes']} episodes in {r.summary['wall_time_s']:.0f} s")
    print(f"prove: {wall:.0f} s in all; wrote {json_path} and {out / 'prove.png'}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
