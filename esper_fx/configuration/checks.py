"""A run's settings coerced and checked (`check_config`, called as a `TrainingConfig` is built): each value
read into its type (an enum, a tuple, an int for a whole float), and every rule between settings, each
refusal one line naming the setting."""

from __future__ import annotations

import re
from typing import Any, Mapping

from esper_fx.configuration.choices import AUTO, RETIRED_TELEMETRY_LEVELS, TelemetryLevel, WandbMode
from esper_fx.configuration.keys import sections_of
from esper_fx.contracts.blueprints import BLUEPRINT_NAMES
from esper_fx.contracts.lifecycle import LIFECYCLES
from esper_fx.contracts.observation import WITHHOLDABLE
from esper_fx.contracts.run_settings import SEED_OPTIMIZER_STATES, AmpDtype, DataPath, DataSplit, Task
from esper_fx.contracts.slots import parse_slot_id
from esper_fx.contracts.tasks import LR_SCHEDULES, TASK_NAMES, mix_mismatch, task_slot_ids
from esper_fx.controller_names import NAMES
from rl import validate as check
from rl.config import check_rotation

# Seeds seed torch (which takes 64-bit integers) and jax (signed 64-bit) with seed + small offsets.
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1
# Upper bounds on the run's sizes: far beyond any useful run, far below what exhausts a machine's memory.
SIZE_LIMITS = {"n_episodes": 2**40, "n_envs": 1024, "max_epochs": 10_000, "checkpoint_every": 2**40}
DATA_SIZE_LIMITS = {"synthetic_train_samples": 1_000_000, "synthetic_test_samples": 1_000_000,
                    "batch_size_per_env": 65_536, "val_batch_size": 65_536, "num_workers": 256}
POLICY_DEVICE = re.compile(r"auto|cpu|cuda:\d+")
ENV_DEVICE = re.compile(r"cpu|cuda:\d+")
ENUMS: Mapping[str, type] = {"task": Task, "data_split": DataSplit, "data_path": DataPath, "amp_dtype": AmpDtype,
                             "telemetry_level": TelemetryLevel, "wandb": WandbMode}


def check_config(config: Any) -> None:
    """Coerce and check every setting of `config` (a `TrainingConfig` being built) in place; raise ValueError."""
    for step in (_coerce, _check_counts, _check_slots, _check_data, _check_mix, _check_workers,
                 _check_menu_and_rotation):
        step(config)


def _set(config: Any, name: str, value: Any) -> None:
    object.__setattr__(config, name, value)


def _coerce(c: Any) -> None:
    if isinstance(c.telemetry_level, str) and c.telemetry_level in RETIRED_TELEMETRY_LEVELS:
        raise ValueError(RETIRED_TELEMETRY_LEVELS[c.telemetry_level])
    for name, cls in ENUMS.items():
        _set(c, name, check.enum(name, cls, getattr(c, name)))
    NAMES.canonical(check.text("controller", c.controller))
    for name in ("slots", "env_devices", "blueprint_menu", "static_seeds", "task_mix", "observe_withheld"):
        value = getattr(c, name)
        if value is not None:
            _set(c, name, check.string_list(name, value))
    for name in ("run_dir", "resume_path"):
        _set(c, name, check.text(name, getattr(c, name), optional=True))
    check.text("data_root", c.data_root)
    check.text("wandb_project", c.wandb_project)
    for name, section in sections_of(type(c)).items():
        value = getattr(c, name)
        if isinstance(value, Mapping):
            _set(c, name, section.from_dict(value))
        elif not isinstance(value, section):
            raise ValueError(f"{name} must be a {section.__name__} or a mapping (got {value!r})")
    for name in ("amp", "discard_rolled_back_envs", "use_telemetry", "observe_log_params", "observe_fit_gap",
                 "one_seed_at_a_time", "germination_deadline", "tensorboard", "report"):
        check.boolean(name, getattr(c, name))


def _check_counts(c: Any) -> None:
    for name in ("n_episodes", "n_envs", "max_epochs", "checkpoint_every"):
        _set(c, name, check.at_least_one(name, getattr(c, name)))
    for name in ("seed", "data_seed"):
        _set(c, name, check.int_between(name, getattr(c, name), SEED_MIN, SEED_MAX))
    _set(c, "max_seeds", check.optional_at_least("max_seeds", c.max_seeds, 1))
    for name, limit in SIZE_LIMITS.items():
        check.at_most(name, getattr(c, name), limit)
    if c.ppo.num_minibatches > c.n_envs:
        raise ValueError(f"num_minibatches must be <= n_envs (got num_minibatches={c.ppo.num_minibatches}, "
                         f"n_envs={c.n_envs})")
    _set(c, "min_cull_age", check.optional_at_least("min_cull_age", c.min_cull_age, 1))
    if c.lifecycle not in LIFECYCLES:
        raise ValueError(f"lifecycle must be one of {list(LIFECYCLES)} (got {c.lifecycle!r})")
    if c.fossil_release is not None:
        check.boolean("fossil_release", c.fossil_release)


def _check_slots(c: Any) -> None:
    if not c.slots:
        raise ValueError("slots cannot be empty")
    for slot in c.slots:
        try:
            parse_slot_id(slot)
        except ValueError as exc:
            raise ValueError(f"Invalid slot configuration: slots: {exc}") from None
    duplicates = sorted({s for s in c.slots if c.slots.count(s) > 1})
    if duplicates:
        raise ValueError(f"Invalid slot configuration: slots contains duplicates {duplicates}")
    available = task_slot_ids(c.task)
    missing = [s for s in c.slots if s not in available]
    if missing:
        raise ValueError(f"Invalid slot configuration: slots {missing} are not injection points of task "
                         f"{c.task.value!r} (available: {list(available)})")


def _check_mix(c: Any) -> None:
    mix = tuple(name.lower() for name in c.task_mix)
    for name in mix:
        if name not in TASK_NAMES:
            raise ValueError(f"task_mix: unknown task {name!r}; available tasks: {list(TASK_NAMES)}")
        why = mix_mismatch(c.task.value, name)
        if why:
            raise ValueError(f"task_mix: {name!r} cannot share a run with task {c.task.value!r}: {why}")
    if len(set(mix)) != len(mix):
        raise ValueError(f"task_mix lists a task twice (got {list(mix)})")
    _set(c, "task_mix", mix)
    for name in c.observe_withheld:
        if name not in WITHHOLDABLE:
            raise ValueError(f"observe_withheld: unknown feature group {name!r}; choose from {list(WITHHOLDABLE)}")
    if len(set(c.observe_withheld)) != len(c.observe_withheld):
        raise ValueError(f"observe_withheld lists a group twice (got {list(c.observe_withheld)})")


def _check_data(c: Any) -> None:
    if c.lr_schedule not in LR_SCHEDULES:
        raise ValueError(f"lr_schedule must be one of {list(LR_SCHEDULES)} (got {c.lr_schedule!r})")
    _set(c, "lr_schedule_steps", check.optional_at_least("lr_schedule_steps", c.lr_schedule_steps, 1))
    for name in ("lr_warmup_fraction", "lr_decay_fraction"):
        value = check.number(name, getattr(c, name))
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1] (got {value})")
    if c.lr_warmup_fraction + c.lr_decay_fraction > 1.0:
        raise ValueError(f"lr_warmup_fraction + lr_decay_fraction must be at most 1 (got "
                         f"{c.lr_warmup_fraction} + {c.lr_decay_fraction})")
    _set(c, "seed_lr_rewarm_steps", check.int_between("seed_lr_rewarm_steps", c.seed_lr_rewarm_steps, 0, 2**31 - 1))
    _set(c, "train_steps_budget", check.optional_at_least("train_steps_budget", c.train_steps_budget, 1))
    for name in ("seed_lr_scale", "host_width"):
        value = check.number(name, getattr(c, name))
        if not 0.0 < value <= 64.0:
            raise ValueError(f"{name} must be in (0, 64] (got {value})")
        _set(c, name, value)
    if c.seed_optimizer_state not in SEED_OPTIMIZER_STATES:
        raise ValueError(f"seed_optimizer_state must be one of {list(SEED_OPTIMIZER_STATES)} "
                         f"(got {c.seed_optimizer_state!r})")
    if c.host_width != 1.0 and c.topology != "cnn":
        raise ValueError(f"host_width scales a CNN host's channels; task {c.task.value!r} has a "
                         f"{c.topology} host (leave host_width at 1)")
    for name in ("batch_size_per_env", "val_samples", "val_batch_size", "num_workers"):
        _set(c, name, check.optional_at_least(name, getattr(c, name), 1 if name != "num_workers" else 0))
    _set(c, "max_train_batches", check.optional_at_least("max_train_batches", c.max_train_batches, 0))
    for name in ("synthetic_train_samples", "synthetic_test_samples"):
        _set(c, name, check.integer(name, getattr(c, name)))
        if not getattr(c, name) >= 10:
            raise ValueError(f"{name} must be >= 10 (got {getattr(c, name)})")
    for name, limit in DATA_SIZE_LIMITS.items():
        check.at_most(name, getattr(c, name), limit)
    _check_devices(c)


def _check_devices(c: Any) -> None:
    if c.device == "cuda":  # torch's name for the current GPU: the first
        _set(c, "device", "cuda:0")
    if isinstance(c.env_devices, (list, tuple)):
        _set(c, "env_devices", tuple("cuda:0" if d == "cuda" else d for d in c.env_devices))
    if not isinstance(c.device, str) or not POLICY_DEVICE.fullmatch(c.device):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda:N' (got {c.device!r})")
    if c.env_devices is not None:
        bad = [d for d in c.env_devices if not ENV_DEVICE.fullmatch(d)]
        if not c.env_devices or bad:
            raise ValueError(f"env_devices must list one or more of 'cpu' and 'cuda:N' (got {list(c.env_devices)!r})")
        if len(c.env_devices) > c.n_envs:
            raise ValueError(f"env_devices lists {len(c.env_devices)} devices but n_envs is {c.n_envs}")


def _check_workers(c: Any) -> None:
    workers = c.env_workers
    if isinstance(workers, str) and workers.strip().isdigit():
        workers = int(workers)
    if workers != AUTO:
        if isinstance(workers, str):
            raise ValueError(f"env_workers must be 'auto' or an integer in [0, n_envs={c.n_envs}] (got {workers!r})")
        workers = check.int_between("env_workers", workers, 0, c.n_envs)
    _set(c, "env_workers", workers)
    if c.ray_address is not None:
        if not isinstance(c.ray_address, str) or not c.ray_address.strip():
            raise ValueError(f"ray_address must be None or a Ray address such as 'auto' or '10.0.0.1:6379' "
                             f"(got {c.ray_address!r})")
        if c.env_workers == 0:
            raise ValueError(f"ray_address {c.ray_address!r} needs env_workers >= 1 (got 0)")


def _check_menu_and_rotation(c: Any) -> None:
    topology = c.topology
    if c.blueprint_menu is not None:
        menu = c.blueprint_menu
        registered = BLUEPRINT_NAMES[topology]
        if len(menu) < 2 or menu[0] != "noop" or len(set(menu)) != len(menu):
            raise ValueError(f"blueprint_menu must hold >= 2 unique names with 'noop' first (got {list(menu)})")
        unknown = [m for m in menu if m not in registered]
        if unknown:
            raise ValueError(f"blueprint_menu entries {unknown} are not registered {topology} blueprints "
                             f"(available: {list(registered)})")
    if c.heuristic.blueprint_rotation is not None:
        check_rotation(c.heuristic.blueprint_rotation, c.menu)
    if c.controller_name == "oracle":
        c.oracle.check_against(c.enabled_slots, c.menu, c.max_epochs)
    c.static_seed_map  # validates every entry


# ----------------------------------------------------------------------------------------------
# settings that do nothing in a run
# ----------------------------------------------------------------------------------------------

# The nested configs each controller reads (its canonical name -> section); a section read by none of a run's
# controllers does nothing in it (`learner` is read by every run: the reward's shaping discounts with its γ). Of
# `ppo`'s keys every run reads num_minibatches (checked against n_envs).
SECTION_OF_CONTROLLER = {"ppo_lstm": "ppo", "ppo_mlp": "ppo", "reinforce": "reinforce", "heuristic": "heuristic",
                         "oracle": "oracle"}
PPO_KEYS_EVERY_RUN_READS = ("num_minibatches",)


def no_effect(config: Any, keys: Any, controllers: Any = None) -> list[str]:
    """For each of `keys` (the settings a command line or config file gave, `name.key` for a nested one) that
    does nothing in a run of `config` whose controllers are `controllers` (canonical names; default the
    config's own), one line saying why: a section no controller of the run reads, `fossil_release` under the
    `immediate` clock (no seed isolates the host there). (A scripted controller's tempo does act under the
    `reference` clock: its blend follows the tempo's epochs; only a learned controller's tempo head is held to
    the standard tempo there.)"""
    controllers = set(controllers or (config.controller_name,))
    read = {SECTION_OF_CONTROLLER[c] for c in controllers if c in SECTION_OF_CONTROLLER}
    lines = []
    for key in sorted(set(keys)):
        section, dot, name = key.partition(".")
        if dot and section in set(SECTION_OF_CONTROLLER.values()) and section not in read:
            if section == "ppo" and name in PPO_KEYS_EVERY_RUN_READS:
                continue
            lines.append(f"{key} has no effect here: no controller of this run ({', '.join(sorted(controllers))}) "
                         f"reads {section}'s settings")
        elif key == "fossil_release" and config.lifecycle == "immediate" and config.fossil_release is not None:
            lines.append("fossil_release has no effect here: under lifecycle=immediate no seed isolates the host, "
                         "so a fossil has nothing to release")
    return lines
