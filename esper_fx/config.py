"""`TrainingConfig`: every field, default and validation rule of a run (BEHAVIOUR §14).

The run's own settings (task, envs, episodes, devices, data, outputs) are fields here. The controller
side's settings live with the controller code and are nested: `config.ppo` (`rl.config.PPOConfig`),
`config.reward` (`rl.config.RewardConfig`), and the sections (`SECTIONS`, one JSON object each)
`config.heuristic`, `config.oracle` and `config.reinforce` (`rl.config.HeuristicConfig`, `OracleConfig`,
`ReinforceConfig`), each default written once, there, with its help (`rl.config.option`: the command line is
built from it). The PPO
fields and the reward's settings keep their flat names as keys: `TrainingConfig(lr=1e-4)`,
`config.replace(gamma=0.99)` and the JSON of `to_dict` / `from_dict`; the reward's constants are the keys
`reward.NAME` (`TrainingConfig(**{"reward.probation_base": 4})`, or `reward=RewardConfig(probation_base=4)`),
saved only when changed from their defaults. Each is read at its home, `config.ppo.lr`. `config.reward` also
carries the values a run gives the reward (its gamma, its min_cull_age, its lifecycle's legitimacy, its task's
loss scale), filled in here so each keeps one home: a key `reward.gamma` is refused, naming the run's setting.
Fields of earlier versions that changed nothing are refused in a config file (`RETIRED_FIELDS`) and
dropped from a saved one (`from_saved`), so every earlier checkpoint manifest still loads.

Imports neither torch nor jax, so the CLI can reject a bad configuration instantly.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any, Iterable, Mapping

from esper_fx.command import did_you_mean
from esper_fx.contracts.blueprints import BLUEPRINT_MENUS, BLUEPRINT_NAMES
from esper_fx.contracts.lifecycle import LIFECYCLES, LifecycleTimings, lifecycle_timings
from esper_fx.contracts.observation import WITHHOLDABLE, obs_dim
from esper_fx.contracts.slots import parse_slot_id, sort_slot_ids
from esper_fx.contracts.tasks import (
    DEFAULT_DATA_ROOT, LR_SCHEDULES, TASK_NAMES, mix_mismatch, task_facts, task_slot_ids,
)
from esper_fx.controller_names import NAMES
from esper_fx.presets import PRESET_NAMES, PRESETS
from rl import validate as check
from rl.config import (
    HeuristicConfig,
    OracleConfig,
    PPOConfig,
    ReinforceConfig,
    RewardFamily,
    REWARD_CONSTANTS,
    REWARD_FROM_RUN,
    REWARD_SETTINGS,
    RewardConfig,
    RewardMode,
    check_rotation,
    entropy_coefficient,
    field_names,
    option,
)

__all__ = [
    "TrainingConfig", "HeuristicConfig", "OracleConfig", "PPOConfig", "ReinforceConfig", "RewardConfig", "Task",
    "DataSplit", "DataPath", "AmpDtype", "RewardFamily", "RewardMode", "TelemetryLevel", "WandbMode", "PRESET_NAMES",
]

Task = StrEnum("Task", {name.upper(): name for name in TASK_NAMES})


class DataSplit(StrEnum):
    SHARED = "shared"
    FULL = "full"


class DataPath(StrEnum):
    DEVICE = "device"
    LOADER = "loader"


class AmpDtype(StrEnum):
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"


class WandbMode(StrEnum):
    """Weights & Biases logging (`esper_fx.outputs.wandb_log`): none, live, or files for `wandb sync` later."""

    OFF = "off"
    ONLINE = "online"
    OFFLINE = "offline"


class TelemetryLevel(StrEnum):
    """What the run writes to events.jsonl: `debug` adds every reward component of every epoch."""

    NORMAL = "normal"
    DEBUG = "debug"


# Fields of earlier versions that changed nothing a run did. A config file that names one is refused with
# this reason; a saved config (a checkpoint's manifest, a run's config.json) drops them (`upgrade_saved`).
RETIRED_FIELDS: Mapping[str, str] = {
    "plateau_threshold": "nothing read it",
    "improvement_threshold": "nothing read it",
    "chunk_length": "it always equalled max_epochs",
}
# Telemetry levels of earlier versions: "minimal" did what "normal" does; "off" also set use_telemetry to
# false, which changes the observation size. A config file naming one is refused with this line.
RETIRED_TELEMETRY_LEVELS: Mapping[str, str] = {
    "minimal": "telemetry_level 'minimal' was removed: it did what 'normal' does (use 'normal')",
    "off": "telemetry_level 'off' was removed: set use_telemetry to false to drop the gradient features "
           "from the observation (this changes the observation size: a checkpoint records it)",
}


# A host-initialised seed's optimiser state at germination (`seed_optimizer_state`).
SEED_OPTIMIZER_STATES: tuple[str, ...] = ("reset", "carry")

# env_workers' default: the number of Ray env workers is decided when the run starts (distributed.auto)
AUTO = "auto"

# Seeds seed torch (which takes 64-bit integers) and jax (signed 64-bit) with seed + small offsets.
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1
# Upper bounds on the run's sizes: far beyond any useful run, far below what exhausts a machine's memory.
SIZE_LIMITS = {"n_episodes": 2**40, "n_envs": 1024, "max_epochs": 10_000, "checkpoint_every": 2**40}
DATA_SIZE_LIMITS = {"synthetic_train_samples": 1_000_000, "synthetic_test_samples": 1_000_000,
                    "batch_size_per_env": 65_536, "val_batch_size": 65_536, "num_workers": 256}
POLICY_DEVICE = re.compile(r"auto|cpu|cuda:\d+")
ENV_DEVICE = re.compile(r"cpu|cuda:\d+")

# The nested groups whose fields are keys of the run (its JSON, `TrainingConfig(...)`, `replace`): group field ->
# its dataclass, and each key of a group -> the field it sets: every PPO field and the reward's settings by their
# own names (flat keys), the reward's constants as `reward.NAME` (saved only when changed from their defaults, so
# a default config's JSON is the one of before they were keys). The fields the run gives the reward
# (`rl.config.REWARD_FROM_RUN`) have no key: each is decided by a setting of the run.
FLAT_GROUPS: Mapping[str, type] = {"ppo": PPOConfig, "reward": RewardConfig}
GROUP_KEYS: Mapping[str, Mapping[str, str]] = {
    "ppo": {name: name for name in field_names(PPOConfig)},
    "reward": {**{name: name for name in REWARD_SETTINGS}, **{f"reward.{name}": name for name in REWARD_CONSTANTS}},
}
GROUP_OF_KEY: Mapping[str, str] = {key: group for group, keys in GROUP_KEYS.items() for key in keys}
# The nested sections: a field of the run holding its own settings, saved as one JSON object under its name and
# set key by key on the command line (`--set section.key=VALUE`, `--section.key VALUE`).
SECTIONS: Mapping[str, type] = {"heuristic": HeuristicConfig, "oracle": OracleConfig, "reinforce": ReinforceConfig}


def _codes(names: Any) -> str:
    return ", ".join(f"`{name}`" for name in names)


@dataclass(frozen=True, init=False)
class TrainingConfig:
    # run
    task: Task = option(Task.CIFAR10, f"the task: {_codes(Task)}", metavar="NAME")
    task_mix: tuple[str, ...] = option((), "tasks each episode draws one of (from its env's seed; the controller is "
                                       "not told which): host variants that read `task`'s data, e.g. `shapes16 "
                                       "shapes16_spatial shapes16_narrow`; empty: `task` alone", metavar="NAME")
    controller: str = option("ppo_lstm", f"the seed controller: {_codes(NAMES.names())} (`oracle` is a fixed "
                             "growth schedule, `config.oracle`; `ppo` stands for `ppo_lstm`)", metavar="NAME")
    n_episodes: int = option(100, "total episodes (batches of `n_envs`)", flag="--episodes", resume=True)
    n_envs: int = option(4, "environments per batch")
    max_epochs: int = option(25, "episode length T in epochs")
    seed: int = option(42, "run seed")
    slots: tuple[str, ...] = option(("r0c1",), "enabled slots, e.g. `r0c0 r0c1`", metavar="SLOT")
    max_seeds: int | None = option(None, "at most this many seeds germinated per episode (default: no limit)")
    lifecycle: str = option("reference", "the seed lifecycle's clock: `reference` (the reference's stage durations, "
                            "in epochs), `proportional` (its proportions in 150-epoch episodes, scaled to "
                            "`max_epochs`; the blend ramps per training step at the chosen tempo) or `immediate` "
                            "(no isolated phase: a seed trains with the host from its first step and ramps in over "
                            "at most 5% of the episode; for the host-initialised blueprints; BEHAVIOUR §2.14)",
                            metavar="NAME")
    fossil_release: bool | None = option(None, "an ablation of the clock's third change: does a fossil release "
                                         "the host upstream of it (its input no longer detached)? Default: the "
                                         "clock's own choice (`reference` never, `proportional` at "
                                         "fossilization; BEHAVIOUR §2.14)")
    min_cull_age: int | None = option(None, "[fix] CULL waits until a seed could have finished blending; default: "
                                      "the lifecycle's earliest fossilize age (9 under the reference's clock; the "
                                      "reference itself: 1, later 5); read it as `cull_age`")
    one_seed_at_a_time: bool = option(True, "[fix] no GERMINATE while a seed is developing (the reference: off)")
    germination_deadline: bool = option(True, "[fix] no GERMINATE once its seed could not be fossilized before T")
    static_seeds: tuple[str, ...] = option((), "`slot=blueprint`: seeds planted fossilized before epoch 1 "
                                           "(static_final)", metavar="SLOT=NAME")
    lr_schedule: str = option("constant", "the network's SGD rate within an episode, host and seeds: `constant`, "
                              "`cosine` (to zero) or `wsd` (warmup, stable, then a linear decay to zero over the "
                              "last `lr_decay_fraction` of the steps)", metavar="NAME")
    lr_schedule_steps: int | None = option(None, "training steps a cosine or wsd schedule spans (default: the "
                                           "episode's)")
    lr_warmup_fraction: float = option(0.0, "wsd: the first fraction of the steps warms the rate up from lr₀/W")
    lr_decay_fraction: float = option(0.2, "wsd: the last fraction of the steps decays the rate linearly to zero")
    seed_lr_rewarm_steps: int = option(0, "a seed's rate warms up over its first N training steps (0: at once)")
    seed_lr_scale: float = option(1.0, "a seed's own SGD rate: the task's seed rate times this (the host keeps "
                                  "its own; both follow `lr_schedule`)")
    seed_optimizer_state: str = option("reset", "a host-initialised seed's optimiser state at germination: `reset` "
                                       "(fresh momentum) or `carry` (the momentum of the host weights it was copied "
                                       "from)", metavar="NAME")
    host_width: float = option(1.0, "the CNN host's channel widths times this (at least 1 channel each): a host "
                               "that starts small; 1 is the task's own host", metavar="X")
    train_steps_budget: int | None = option(None, "at most this many training steps per episode, spread evenly "
                                            "over its epochs (static_matched's compute budget; default: every "
                                            "epoch's steps)")
    # devices and data
    device: str = option("auto", "policy device: `auto`, `cpu` or `cuda:N` (`cuda` is `cuda:0`)", metavar="DEV",
                         resume=True)
    env_devices: tuple[str, ...] | None = option(None, "env devices: env i runs on `DEV[i % len]`", flag="--devices",
                                                 metavar="DEV", resume=True)
    data_path: DataPath = option(DataPath.DEVICE, "device-resident data (default) or DataLoader workers",
                                 resume=True)
    num_workers: int | None = option(None, "DataLoader workers (loader path; default 4)", resume=True)
    env_workers: int | str = option(AUTO, "run the envs in N Ray actors; `auto` (default): as many as the usable "
                                    "cores and the envs allow, in this process on one core, one env, CUDA envs "
                                    "or a run too small to pay Ray's start-up, decided at the run's start "
                                    "(`esper_fx.distributed.auto`) and kept as `auto` in config.json; `0`: in this "
                                    "process; each actor runs a contiguous slice of the envs",
                                    metavar="N|auto", resume=True)
    ray_address: str | None = option(None, "join the Ray cluster at ADDR (default: start, and stop, a local Ray "
                                     "for the run)",
                                     metavar="ADDR", resume=True)
    data_root: str = option(DEFAULT_DATA_ROOT, "where CIFAR-10 / TinyStories / Fashion-MNIST live (fashion_mnist: the "
                            "default means the dataset-fashion-mnist package's folder, `hosts.data.fashion_mnist`)",
                            flag="--data-dir", metavar="DIR", resume=True)
    data_split: DataSplit = option(DataSplit.SHARED, "how training data is divided across envs")
    batch_size_per_env: int | None = option(None, "training batch size per env (default: the task's)")
    max_train_batches: int | None = option(None, "training batches per epoch (default: the task's; 0: unlimited)")
    val_samples: int | None = option(None, "first N validation samples (default: the whole test split)")
    val_batch_size: int | None = option(None, "validation batch size (default: `batch_size_per_env`)")
    data_seed: int = option(0, "seed of the data (synthetic data, the split across envs)")
    synthetic_train_samples: int = option(50000, "training samples of a synthetic task")
    synthetic_test_samples: int = option(10000, "test samples of a synthetic task")
    # precision
    amp: bool = option(False, "mixed precision on CUDA envs", resume=True)
    amp_dtype: AmpDtype = option(AmpDtype.FLOAT16, "autocast dtype", resume=True)
    # policy
    blueprint_menu: tuple[str, ...] | None = option(None, "the blueprint head's menu, `noop` first (default: the "
                                                    "topology's)", metavar="NAME")
    # the controller side
    ppo: PPOConfig = option(factory=PPOConfig, help="the PPO/LSTM controller's hyperparameters (BEHAVIOUR §11.1)")
    reward: RewardConfig = option(factory=RewardConfig, help="the reward (BEHAVIOUR §12): its settings and "
                                  "constants are set here; gamma, min_cull_age, the fossilize legitimacy and the "
                                  "task's scale come from the run")
    discard_rolled_back_envs: bool = option(False, "drop the envs a governor rolled back from the PPO batch")
    # telemetry
    use_telemetry: bool = option(True, "the gradient features of each slot in the observation: off drops them and "
                                 "shrinks the observation by 10 per slot (so a checkpoint trained with one value "
                                 "cannot resume with the other; resume checks it)")
    observe_log_params: bool = option(False, "the observation's parameter count (feature 21) as ln(1 + count) "
                                      "instead of the count: hosts of a task mix differ in size by 10x, and on "
                                      "the raw scale the two small ones lie a sixth of a standard deviation apart "
                                      "(docs/LEARNING.md §8); off by default, so every earlier run observes what "
                                      "it did")
    observe_withheld: tuple[str, ...] = option((), "what the observation withholds, for the control of "
                                               "docs/LEARNING.md §10: `host_params` (feature 21 counts the live "
                                               "seeds' parameters, not the host's) and/or `curves` (features "
                                               "2–20, the host's losses and accuracies, read 0)")
    observe_fit_gap: bool = option(False, "one more observation feature, the epoch's training accuracy minus its "
                                   "validation accuracy (pp): how well the host fits its data, the signal FRAGrow "
                                   "found growth to need (BEHAVIOUR §8.7); off by default, so every earlier run "
                                   "observes what it did")
    telemetry_level: TelemetryLevel = option(TelemetryLevel.NORMAL, "what goes into `events.jsonl`: `debug` adds "
                                             "every reward component of every epoch")
    # outputs
    run_dir: str | None = option(None, "run directory, new or empty (default "
                                 "`runs/<preset>-<UTC timestamp>-<random suffix>`)", metavar="DIR", resume=True)
    resume_path: str | None = option(None, "continue a run from its checkpoint (a run directory or a checkpoint)",
                                     flag="--resume", metavar="PATH")
    checkpoint_every: int = option(10, "checkpoint every N batches", resume=True)
    tensorboard: bool = option(True, "no TensorBoard scalars in `<run dir>/tb/`", resume=True)
    report: bool = option(True, "no `plots/` and `report.html` at the end of the run", resume=True)
    wandb: WandbMode = option(WandbMode.OFF, "also log to Weights & Biases, `online` or `offline` (no network; "
                              "`wandb sync` uploads later): TensorBoard's scalars, the config, the report's plots "
                              "and the summary, W&B's files in `<run dir>/wandb/`; needs `pip install -e "
                              "'.[wandb]'`", resume=True)
    wandb_project: str = option("esper_fx", "the W&B project of `--wandb`", metavar="NAME", resume=True)
    # scripted controllers
    heuristic: HeuristicConfig = option(factory=HeuristicConfig, help="the rule-based controller's thresholds "
                                        "(BEHAVIOUR §13.1)")
    oracle: OracleConfig = option(factory=OracleConfig, help="the `oracle` control's fixed growth schedule: "
                                  "fossilize at the first epoch it is allowed, never cull")
    # other learning controllers
    reinforce: ReinforceConfig = option(factory=ReinforceConfig, help="the `reinforce` controller's "
                                        "hyperparameters (REINFORCE with a learned baseline, `rl.reinforce`)")

    # ---------------------------------------------------------------- construction
    def __init__(self, **values: Any) -> None:
        """Keyword arguments only: any field, or a key of a nested group (`lr=...`, `reward_mode=...`,
        `**{"reward.probation_base": 4}`)."""
        for name, value in _nest(values).items():
            object.__setattr__(self, name, value)
        self.__post_init__()

    def __post_init__(self) -> None:
        self._coerce()
        self._validate_counts()
        self._validate_slots()
        self._validate_data()
        self._validate_mix()
        self._validate_workers()
        self._validate_menu_and_rotation()
        self._set("reward", self.reward.for_run(self.task, self.ppo.gamma, self.cull_age,
                                                self.lifecycle_timings.legitimacy))

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def _coerce(self) -> None:
        enums = {"task": Task, "data_split": DataSplit, "data_path": DataPath, "amp_dtype": AmpDtype,
                 "telemetry_level": TelemetryLevel, "wandb": WandbMode}
        if isinstance(self.telemetry_level, str) and self.telemetry_level in RETIRED_TELEMETRY_LEVELS:
            raise ValueError(RETIRED_TELEMETRY_LEVELS[self.telemetry_level])
        for name, cls in enums.items():
            self._set(name, check.enum(name, cls, getattr(self, name)))
        NAMES.canonical(check.text("controller", self.controller))
        for name in ("slots", "env_devices", "blueprint_menu", "static_seeds", "task_mix", "observe_withheld"):
            value = getattr(self, name)
            if value is not None:
                self._set(name, check.string_list(name, value))
        for name in ("run_dir", "resume_path"):
            self._set(name, check.text(name, getattr(self, name), optional=True))
        check.text("data_root", self.data_root)
        check.text("wandb_project", self.wandb_project)
        for name, section in SECTIONS.items():
            value = getattr(self, name)
            if isinstance(value, Mapping):
                self._set(name, section.from_dict(value))
            elif not isinstance(value, section):
                raise ValueError(f"{name} must be a {section.__name__} or a mapping (got {value!r})")
        for name in ("amp", "discard_rolled_back_envs", "use_telemetry", "observe_log_params", "observe_fit_gap", "one_seed_at_a_time",
                     "germination_deadline", "tensorboard", "report"):
            check.boolean(name, getattr(self, name))

    def _validate_counts(self) -> None:
        for name in ("n_episodes", "n_envs", "max_epochs", "checkpoint_every"):
            self._set(name, check.at_least_one(name, getattr(self, name)))
        for name in ("seed", "data_seed"):
            self._set(name, check.int_between(name, getattr(self, name), SEED_MIN, SEED_MAX))
        self._set("max_seeds", check.optional_at_least("max_seeds", self.max_seeds, 1))
        for name, limit in SIZE_LIMITS.items():
            check.at_most(name, getattr(self, name), limit)
        if self.ppo.num_minibatches > self.n_envs:
            raise ValueError(
                f"num_minibatches must be <= n_envs (got num_minibatches={self.ppo.num_minibatches}, "
                f"n_envs={self.n_envs})"
            )
        self._set("min_cull_age", check.optional_at_least("min_cull_age", self.min_cull_age, 1))
        if self.lifecycle not in LIFECYCLES:
            raise ValueError(f"lifecycle must be one of {list(LIFECYCLES)} (got {self.lifecycle!r})")
        if self.fossil_release is not None:
            check.boolean("fossil_release", self.fossil_release)

    def _validate_slots(self) -> None:
        if not self.slots:
            raise ValueError("slots cannot be empty")
        for slot in self.slots:
            try:
                parse_slot_id(slot)
            except ValueError as exc:
                raise ValueError(f"Invalid slot configuration: slots: {exc}") from None
        duplicates = sorted({s for s in self.slots if self.slots.count(s) > 1})
        if duplicates:
            raise ValueError(f"Invalid slot configuration: slots contains duplicates {duplicates}")
        available = task_slot_ids(self.task)
        missing = [s for s in self.slots if s not in available]
        if missing:
            raise ValueError(
                f"Invalid slot configuration: slots {missing} are not injection points of task "
                f"{self.task.value!r} (available: {list(available)})"
            )

    def _validate_mix(self) -> None:
        mix = tuple(name.lower() for name in self.task_mix)
        for name in mix:
            if name not in TASK_NAMES:
                raise ValueError(f"task_mix: unknown task {name!r}; available tasks: {list(TASK_NAMES)}")
            why = mix_mismatch(self.task.value, name)
            if why:
                raise ValueError(f"task_mix: {name!r} cannot share a run with task {self.task.value!r}: {why}")
        if len(set(mix)) != len(mix):
            raise ValueError(f"task_mix lists a task twice (got {list(mix)})")
        self._set("task_mix", mix)
        for name in self.observe_withheld:
            if name not in WITHHOLDABLE:
                raise ValueError(f"observe_withheld: unknown feature group {name!r}; choose from {list(WITHHOLDABLE)}")
        if len(set(self.observe_withheld)) != len(self.observe_withheld):
            raise ValueError(f"observe_withheld lists a group twice (got {list(self.observe_withheld)})")

    def _validate_data(self) -> None:
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {list(LR_SCHEDULES)} (got {self.lr_schedule!r})")
        self._set("lr_schedule_steps", check.optional_at_least("lr_schedule_steps", self.lr_schedule_steps, 1))
        for name in ("lr_warmup_fraction", "lr_decay_fraction"):
            value = check.number(name, getattr(self, name))
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1] (got {value})")
        if self.lr_warmup_fraction + self.lr_decay_fraction > 1.0:
            raise ValueError(f"lr_warmup_fraction + lr_decay_fraction must be at most 1 (got "
                             f"{self.lr_warmup_fraction} + {self.lr_decay_fraction})")
        self._set("seed_lr_rewarm_steps", check.int_between("seed_lr_rewarm_steps", self.seed_lr_rewarm_steps, 0,
                                                            2**31 - 1))
        self._set("train_steps_budget", check.optional_at_least("train_steps_budget", self.train_steps_budget, 1))
        for name in ("seed_lr_scale", "host_width"):
            value = check.number(name, getattr(self, name))
            if not 0.0 < value <= 64.0:
                raise ValueError(f"{name} must be in (0, 64] (got {value})")
            self._set(name, value)
        if self.seed_optimizer_state not in SEED_OPTIMIZER_STATES:
            raise ValueError(f"seed_optimizer_state must be one of {list(SEED_OPTIMIZER_STATES)} "
                             f"(got {self.seed_optimizer_state!r})")
        if self.host_width != 1.0 and self.topology != "cnn":
            raise ValueError(f"host_width scales a CNN host's channels; task {self.task.value!r} has a "
                             f"{self.topology} host (leave host_width at 1)")
        for name in ("batch_size_per_env", "val_samples", "val_batch_size", "num_workers"):
            self._set(name, check.optional_at_least(name, getattr(self, name), 1 if name != "num_workers" else 0))
        self._set("max_train_batches", check.optional_at_least("max_train_batches", self.max_train_batches, 0))
        for name in ("synthetic_train_samples", "synthetic_test_samples"):
            self._set(name, check.integer(name, getattr(self, name)))
            if not getattr(self, name) >= 10:
                raise ValueError(f"{name} must be >= 10 (got {getattr(self, name)})")
        for name, limit in DATA_SIZE_LIMITS.items():
            check.at_most(name, getattr(self, name), limit)
        if self.device == "cuda":  # torch's name for the current GPU: the first
            self._set("device", "cuda:0")
        if isinstance(self.env_devices, (list, tuple)):
            self._set("env_devices", tuple("cuda:0" if d == "cuda" else d for d in self.env_devices))
        if not isinstance(self.device, str) or not POLICY_DEVICE.fullmatch(self.device):
            raise ValueError(f"device must be 'auto', 'cpu' or 'cuda:N' (got {self.device!r})")
        if self.env_devices is not None:
            bad = [d for d in self.env_devices if not ENV_DEVICE.fullmatch(d)]
            if not self.env_devices or bad:
                raise ValueError(f"env_devices must list one or more of 'cpu' and 'cuda:N' "
                                 f"(got {list(self.env_devices)!r})")
            if len(self.env_devices) > self.n_envs:
                raise ValueError(f"env_devices lists {len(self.env_devices)} devices but n_envs is {self.n_envs}")

    def _validate_workers(self) -> None:
        workers = self.env_workers
        if isinstance(workers, str) and workers.strip().isdigit():
            workers = int(workers)
        if workers != AUTO:
            if isinstance(workers, str):
                raise ValueError(f"env_workers must be 'auto' or an integer in [0, n_envs={self.n_envs}] "
                                 f"(got {workers!r})")
            workers = check.int_between("env_workers", workers, 0, self.n_envs)
        self._set("env_workers", workers)
        if self.ray_address is not None:
            if not isinstance(self.ray_address, str) or not self.ray_address.strip():
                raise ValueError(f"ray_address must be None or a Ray address such as 'auto' or "
                                 f"'10.0.0.1:6379' (got {self.ray_address!r})")
            if self.env_workers == 0:
                raise ValueError(f"ray_address {self.ray_address!r} needs env_workers >= 1 (got 0)")

    def _validate_menu_and_rotation(self) -> None:
        topology = self.topology
        if self.blueprint_menu is not None:
            menu = self.blueprint_menu
            registered = BLUEPRINT_NAMES[topology]
            if len(menu) < 2 or menu[0] != "noop" or len(set(menu)) != len(menu):
                raise ValueError(
                    f"blueprint_menu must hold >= 2 unique names with 'noop' first (got {list(menu)})"
                )
            unknown = [m for m in menu if m not in registered]
            if unknown:
                raise ValueError(
                    f"blueprint_menu entries {unknown} are not registered {topology} blueprints "
                    f"(available: {list(registered)})"
                )
        if self.heuristic.blueprint_rotation is not None:
            check_rotation(self.heuristic.blueprint_rotation, self.menu)
        if self.controller_name == "oracle":
            self.oracle.check_against(self.enabled_slots, self.menu, self.max_epochs)
        self.static_seed_map  # validates every entry

    @property
    def static_seed_map(self) -> dict[str, str]:
        """`static_seeds` as slot -> blueprint (enabled slots, menu blueprints, one seed per slot)."""
        out: dict[str, str] = {}
        for entry in self.static_seeds:
            slot, sep, blueprint = str(entry).partition("=")
            if not sep or slot not in self.enabled_slots or blueprint not in self.menu[1:] or slot in out:
                raise ValueError(f"static_seeds entries are 'slot=blueprint' with an enabled slot {list(self.enabled_slots)}, "
                                 f"a menu blueprint {list(self.menu[1:])} and one seed per slot (got {entry!r})")
            out[slot] = blueprint
        return out

    # ---------------------------------------------------------------- derived values
    @property
    def topology(self) -> str:
        return task_facts(self.task).topology

    @property
    def menu(self) -> tuple[str, ...]:
        """The effective blueprint menu (blueprint-head index -> name)."""
        return self.blueprint_menu or BLUEPRINT_MENUS[self.topology]

    @property
    def num_blueprints(self) -> int:
        return len(self.menu)

    @property
    def slot_ids(self) -> tuple[str, ...]:
        """Every host injection point in canonical order (the slot head)."""
        return task_slot_ids(self.task)

    @property
    def num_slots(self) -> int:
        return len(self.slot_ids)

    @property
    def enabled_slots(self) -> tuple[str, ...]:
        return tuple(sort_slot_ids(self.slots))

    @property
    def state_dim(self) -> int:
        return obs_dim(self.num_slots, self.use_telemetry, self.num_blueprints, self.observe_fit_gap)

    @property
    def lifecycle_timings(self) -> LifecycleTimings:
        """The run's stage durations (BEHAVIOUR §2.14): its lifecycle at T = max_epochs for its task's horizon,
        with `fossil_release` when set."""
        timings = lifecycle_timings(self.lifecycle, self.max_epochs, task_facts(self.task).lifecycle_horizon)
        if self.fossil_release is None:
            return timings
        return timings._replace(release_on_fossilize=bool(self.fossil_release))

    @property
    def cull_age(self) -> int:
        """The minimum age of a seed a controller may CULL: `min_cull_age`, or the lifecycle's earliest
        fossilize age at the standard tempo."""
        return self.min_cull_age if self.min_cull_age is not None else self.lifecycle_timings.earliest_fossilize_age()

    @property
    def controller_name(self) -> str:
        """Canonical controller name (an alias such as `ppo` resolves to `ppo_lstm`)."""
        return NAMES.canonical(self.controller)

    def entropy_coefficient(self, train_steps: int) -> float:
        """β after `train_steps` completed updates (BEHAVIOUR §11.8; `rl.config.entropy_coefficient`)."""
        return entropy_coefficient(self.ppo, self.n_envs, train_steps)

    def replace(self, **changes: Any) -> "TrainingConfig":
        """A validated copy with some fields (or group keys) changed."""
        return TrainingConfig(**{**{f.name: getattr(self, f.name) for f in fields(self)}, **changes})

    # ---------------------------------------------------------------- (de)serialisation
    def to_dict(self, every_constant: bool = False) -> dict[str, Any]:
        """Plain JSON values: the nested PPO and reward groups spliced in as their keys (`GROUP_KEYS`), a reward
        constant only when changed from its default (`every_constant`: each one, as a resume compares them)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in FLAT_GROUPS:
                default = type(value)()
                out.update({key: _plain(getattr(value, name)) for key, name in GROUP_KEYS[f.name].items()
                            if key == name or every_constant or getattr(value, name) != getattr(default, name)})
            elif f.name in SECTIONS:
                out[f.name] = value.to_dict()
            else:
                out[f.name] = _plain(value)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TrainingConfig":
        if not isinstance(d, Mapping):
            raise ValueError(f"a config must be a JSON object (got {type(d).__name__})")
        refuse_unsettable(d)
        known = set(field_names(cls)) - set(FLAT_GROUPS) | set(GROUP_OF_KEY)
        unknown = sorted(k for k in d if k not in known)
        for name, section in SECTIONS.items():
            if isinstance(d.get(name), Mapping):
                unknown += sorted(f"{name}.{k}" for k in d[name] if k not in field_names(section))
        if unknown:
            raise ValueError(f"Unknown config keys: {unknown}")
        return cls(**dict(d))

    @classmethod
    def from_saved(cls, d: Mapping[str, Any]) -> "TrainingConfig":
        """A config this project wrote (a checkpoint's manifest, a run's config.json), from any version."""
        return cls.from_dict(upgrade_saved(d))

    @classmethod
    def from_json(cls, path: str | Path, saved: bool = False) -> "TrainingConfig":
        """A config file; `saved`: one this project wrote (retired fields are dropped, not refused)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ValueError(f"config file not found: {path}") from None
        except OSError as exc:
            raise ValueError(f"cannot read config file {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise ValueError(f"config file {path} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"config file {path} is not valid JSON: {exc.msg} at line {exc.lineno} "
                             f"column {exc.colno}") from None
        if not isinstance(data, dict):
            raise ValueError(f"config file {path} must hold a JSON object at the top level")
        return cls.from_saved(data) if saved else cls.from_dict(data)

    # ---------------------------------------------------------------- presets (BEHAVIOUR §14.3)
    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "TrainingConfig":
        key = str(name).lower()
        if key not in PRESETS:
            raise ValueError(f"unknown preset {name!r}{did_you_mean(key, PRESET_NAMES)}; available: "
                             f"{list(PRESET_NAMES)}")
        return cls(**{**PRESETS[key], **overrides})


# On resume the checkpoint's config is authoritative; only these fields may differ (declared with `resume=True`;
# BEHAVIOUR §7.8).
RESUME_OVERRIDABLE: tuple[str, ...] = tuple(f.name for f in fields(TrainingConfig) if f.metadata.get("resume"))


def absolute_paths(config: TrainingConfig) -> TrainingConfig:
    """The run directory and the resume path resolved once, against the directory the run started from
    (orbax needs absolute paths, and a later chdir must not move the run)."""
    changes = {name: os.path.abspath(getattr(config, name)) for name in ("run_dir", "resume_path")
               if getattr(config, name)}
    return config.replace(**changes) if changes else config


def upgrade_saved(d: Mapping[str, Any]) -> dict[str, Any]:
    """A saved config of an earlier version in today's keys: retired fields dropped, a retired telemetry
    level read as "normal" ("off" had already set use_telemetry to false in the saved config)."""
    if not isinstance(d, Mapping):
        return d
    out = {k: v for k, v in d.items() if k not in RETIRED_FIELDS}
    if out.get("telemetry_level") in RETIRED_TELEMETRY_LEVELS:
        out["telemetry_level"] = TelemetryLevel.NORMAL.value
    return out


def _nest(values: dict[str, Any]) -> dict[str, Any]:
    """Every field's value: given, or its default; group keys (`lr`, `reward.probation_base`) applied on top of
    their group."""
    known = set(field_names(TrainingConfig))
    unknown = sorted(k for k in values if k not in known and k not in GROUP_OF_KEY)
    refuse_unsettable(unknown)
    if unknown:
        raise TypeError(f"TrainingConfig got unexpected keyword argument(s) {unknown}")
    out: dict[str, Any] = {}
    for f in fields(TrainingConfig):
        if f.name in values:
            out[f.name] = values[f.name]
        else:
            out[f.name] = f.default_factory() if f.default is dataclasses.MISSING else f.default
    for group, cls in FLAT_GROUPS.items():
        given = {name: values[key] for key, name in GROUP_KEYS[group].items() if key in values}
        base = out[group]
        if not isinstance(base, cls):
            raise ValueError(f"{group} must be a {cls.__name__} (got {base!r})")
        if given:
            out[group] = dataclasses.replace(base, **given)
    return out


def refuse_unsettable(keys: Iterable[str]) -> None:
    """Refuse, in one line saying what to do instead, the first of `keys` (sorted) that is a retired field or
    `reward.NAME` of a field the run gives the reward (`rl.config.REWARD_FROM_RUN`); any other key passes."""
    for key in sorted(keys):
        if key in RETIRED_FIELDS:
            raise ValueError(f"config key {key!r} was removed ({RETIRED_FIELDS[key]}): delete it")
        group, _, name = key.partition(".")
        if group == "reward" and name in REWARD_FROM_RUN:
            raise ValueError(f"{key} is taken from the run: set {REWARD_FROM_RUN[name]} instead")


def _plain(value: Any) -> Any:
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value
