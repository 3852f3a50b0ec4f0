"""The arms of a comparison: what an arm may be (a controller, a learning controller trained here, a
`Trained` policy, `static_final` / `static_matched` / `best_fixed`, or a dict of options), how one is built
into an `episodes.Arm` (training it when it learns), and `per_seed_arms`, one arm per training seed."""

from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple, Sequence

from esper_fx.config import TrainingConfig
from esper_fx.evaluation import across_seeds
from esper_fx.evaluation.fair_controls import BEST_FIXED, STATIC_MATCHED
from esper_fx.evaluation.seed_sets import check_disjoint

STATIC_FINAL = "static_final"


class Trained(NamedTuple):
    """A trained learning controller: its training configuration and its policy (`episodes.Policy`)."""

    config: TrainingConfig
    policy: Any


class TrainedSeeds(NamedTuple):
    """One trained learning controller per training seed (seed -> `Trained`), e.g. the runs of an earlier
    `--train-seeds` read back: `per_seed_arms` plays each as that seed's arm, as if it had just trained it."""

    by_seed: Mapping[int, Trained]


def is_control(arm: Any, kind: str) -> bool:
    return arm == kind or (isinstance(arm, Mapping) and arm.get("controller") == kind)


def is_static_final(arm: Any) -> bool:
    return is_control(arm, STATIC_FINAL)


def static_source(static_final_of: str | None, learned: list[str], arms: Mapping[str, Any], name: str,
                  kind: str = STATIC_FINAL) -> str:
    """The arm whose architecture the static arm `name` rebuilds: its own "of" (one training seed's learned
    arm, `per_seed_arms`), else `static_final_of`, else the first learned arm, else `default_source`."""
    source = source_named(arms[name]) or static_final_of or (learned[0] if learned else default_source(arms))
    names = list(arms)
    if source not in arms or names.index(source) > names.index(name):
        raise ValueError(f"{kind} needs the arm whose architecture it rebuilds ({source!r}) listed before it")
    return source


def default_source(names: Any) -> str:
    """A static arm's source when no arm learns: "oracle", or "best_fixed" when that is listed and the oracle
    is not (the static curve of the best fixed schedule's network)."""
    return BEST_FIXED if BEST_FIXED in names and "oracle" not in names else "oracle"


def source_named(arm: Any) -> str | None:
    return arm.get("of") if isinstance(arm, Mapping) else None


def budget_arms(fractions: Sequence[float]) -> dict[str, dict[str, Any]]:
    """`static_final` on each fraction of its own budget (`iso_accuracy.budget_arm` names them); listed after
    `static_final`, they rebuild its source's network (`fair_controls.budget_overrides`)."""
    from esper_fx.evaluation.iso_accuracy import budget_arm, check_budgets

    return {budget_arm(f): {"controller": STATIC_FINAL, "budget": f} for f in check_budgets(fractions)}


def fossils_of(source: list[Any]) -> Callable[[int], dict[str, Any]]:
    by_seed = {e.seed: tuple(e.fossils) for e in source}
    return lambda seed: {"static_seeds": by_seed[seed]}


def build_arm(name: str, arm: Any, config: TrainingConfig, seeds: list[int], train_dir: str | None,
              say: Callable[[str], None], quiet: bool, cache: dict, resume: bool = False):
    """(evaluate.Arm, the training RunResult or None). Arms trained alike share one run (`cache`). `resume`:
    a run kept in `train_dir` is reused, or continued where it stopped (`evaluation.resume.trained_run`)."""
    from esper_fx.controllers.protocol import frozen
    from esper_fx.evaluation import episodes as ev
    from esper_fx.training.run import run

    spec = _arm_spec(name, arm)
    greedy = spec.get("greedy", True)
    if isinstance(spec.get("controller"), Trained):
        return ev.Arm.trained(name, spec["controller"].config, spec["controller"].policy, greedy=greedy), None
    arm_config, bundle = _bundle(spec, config)
    if not bundle.learns:
        return ev.Arm.build(name, arm_config, bundle), None
    check_disjoint(arm_config, seeds)
    key = (bundle.name, repr(sorted((spec.get("config") or {}).items())), repr(spec.get("reward_fn")))
    if key not in cache:
        say(f"compare: training {name} ({bundle.name}, {arm_config.n_episodes} episodes)")
        run_dir = False if train_dir is None else f"{train_dir}/{across_seeds.run_dir_name(name)}"
        if resume and run_dir:
            from esper_fx.evaluation.resume import trained_run

            cache[key] = trained_run(arm_config, bundle, spec.get("reward_fn"), run_dir, quiet)
        else:
            cache[key] = run(arm_config, controller=bundle, reward_fn=spec.get("reward_fn"), run_dir=run_dir,
                             quiet=quiet)
    result = cache[key]
    policy = ev.Policy(result.controller_state, result.obs_rms)
    return ev.Arm(name, arm_config, frozen(bundle, greedy=greedy), policy=policy), result


def _arm_spec(name: str, arm: Any) -> Mapping[str, Any]:
    """An arm as a dict of controller, reward_fn, config and greedy (a bare controller: its controller)."""
    spec = arm if isinstance(arm, Mapping) else {"controller": arm}
    unknown = set(spec) - {"controller", "reward_fn", "config", "greedy"}
    if unknown:
        raise ValueError(f"arm {name!r}: unknown keys {sorted(unknown)}; use controller, reward_fn, config, greedy")
    return spec


def _bundle(spec: Mapping[str, Any], config: TrainingConfig) -> tuple[TrainingConfig, Any]:
    """(the arm's config, its controller bundle) of an arm that is not a `Trained`."""
    from esper_fx.controllers import protocol as ctl
    from esper_fx.controllers import registry

    arm_config = config.replace(**dict(spec.get("config") or {}))
    controller = spec.get("controller", arm_config.controller_name)
    bundle = registry.build(controller, ctl.ControllerSpec.from_config(arm_config))
    named = isinstance(controller, str) and registry.NAMES.canonical(controller)
    if bundle.learns and named and named != arm_config.controller_name:
        # a learning arm named by its controller trains under that name: its run directory then resumes, and
        # `prove --checkpoint` rebuilds, the controller it trained
        arm_config = arm_config.replace(controller=controller)
        bundle = registry.build(controller, ctl.ControllerSpec.from_config(arm_config))
    return arm_config, bundle


# ----------------------------------------------------------------------------------------------
# several training seeds
# ----------------------------------------------------------------------------------------------


def per_seed_arms(arms: Mapping[str, Any], config: TrainingConfig, train_seeds: Sequence[int],
                  static_final_of: str | None = None) -> tuple[dict[str, Any], dict[str, dict[int, str]]]:
    """(the arms to run, arm -> {training seed: the name its episodes go under}). Each learning arm becomes
    one arm per training seed S (`<arm>[seed=S]`, trained with config.seed = S, or for a `TrainedSeeds` its
    seed S's controller); so does a `static_final` or `static_matched` that rebuilds a learning arm's
    network (each rebuilding its seed's); every other arm runs once, the same for every seed. ValueError
    when no arm learns, an arm is already `Trained`, or a `TrainedSeeds` has other seeds than `train_seeds`."""
    learning = [name for name, arm in arms.items() if _learns(name, arm, config)]
    if not learning:
        raise ValueError(f"no arm learns ({', '.join(arms)}): there is nothing to train per training seed")
    source = static_final_of or learning[0]
    out: dict[str, Any] = {}
    layout: dict[str, dict[int, str]] = {}
    for name, arm in arms.items():
        static = is_static_final(arm) or is_control(arm, STATIC_MATCHED)
        if name not in learning and not (static and source in learning):
            out[name], layout[name] = arm, dict.fromkeys(train_seeds, name)
            continue
        layout[name] = {t: across_seeds.arm_name(name, t) for t in train_seeds}
        spec = dict(arm) if isinstance(arm, Mapping) else {"controller": arm}
        runs = spec.get("controller")
        if isinstance(runs, TrainedSeeds) and sorted(runs.by_seed) != sorted(train_seeds):
            raise ValueError(f"arm {name!r} holds the controllers of training seeds {sorted(runs.by_seed)}, not of "
                             f"{sorted(train_seeds)}")
        for t in train_seeds:
            if static:
                out[layout[name][t]] = {**spec, "of": across_seeds.arm_name(source, t)}
            elif isinstance(runs, TrainedSeeds):
                out[layout[name][t]] = {**spec, "controller": runs.by_seed[t]}
            else:
                out[layout[name][t]] = {**spec, "config": {**dict(spec.get("config") or {}), "seed": t}}
    return out, layout


def trained_seeds_of(arms: Mapping[str, Any]) -> list[int] | None:
    """The training seeds of the arms' `TrainedSeeds` (they must agree), or None when no arm holds any."""
    controllers = (arm.get("controller") if isinstance(arm, Mapping) else arm for arm in arms.values())
    held = [list(c.by_seed) for c in controllers if isinstance(c, TrainedSeeds)]
    if not held:
        return None
    if any(sorted(seeds) != sorted(held[0]) for seeds in held):
        raise ValueError(f"the trained arms hold controllers of different training seeds: {held}")
    return held[0]


def _learns(name: str, arm: Any, config: TrainingConfig) -> bool:
    """Whether `arm` is trained by `compare` (a learning controller, not yet trained)."""
    if any(is_control(arm, kind) for kind in (STATIC_FINAL, STATIC_MATCHED, BEST_FIXED)):
        return False
    spec = _arm_spec(name, arm)
    if isinstance(spec.get("controller"), Trained):
        raise ValueError(f"arm {name!r} is trained already; training seeds train one controller per seed (give its "
                         f"controller's name instead, or one `TrainedSeeds` of every seed's run)")
    if isinstance(spec.get("controller"), TrainedSeeds):
        return True
    return _bundle(spec, config)[1].learns
