"""`TrainingConfig`: every field, default and validation rule of SPEC §14.

Imports neither torch nor jax, so the CLI can reject a bad configuration instantly.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any, Mapping

from esper_fx import contracts as C


class Task(StrEnum):
    CIFAR10 = "cifar10"
    CIFAR10_DEEP = "cifar10_deep"
    TINYSTORIES = "tinystories"
    SHAPES10 = "shapes10"
    PYTEXT = "pytext"


class ControllerName(StrEnum):
    PPO_LSTM = "ppo_lstm"
    PPO = "ppo"  # alias of ppo_lstm
    PPO_MLP = "ppo_mlp"
    HEURISTIC = "heuristic"
    RANDOM = "random"
    WAIT = "wait"


class DataSplit(StrEnum):
    SHARED = "shared"
    FULL = "full"


class DataPath(StrEnum):
    DEVICE = "device"
    LOADER = "loader"


class AmpDtype(StrEnum):
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"


class RewardFamily(StrEnum):
    CONTRIBUTION = "contribution"
    LOSS = "loss"


class RewardMode(StrEnum):
    SHAPED = "shaped"
    SPARSE = "sparse"
    MINIMAL = "minimal"


class TelemetryLevel(StrEnum):
    OFF = "off"
    MINIMAL = "minimal"
    NORMAL = "normal"
    DEBUG = "debug"


PRESET_NAMES: tuple[str, ...] = (
    "cifar10", "cifar10_deep", "tinystories", "shapes10", "pytext", "quickstart", "heuristic",
)


# ------------------------------------------------------------------------------------------
# small validation helpers: every message names the field; NaN fails every range check
# ------------------------------------------------------------------------------------------


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number (got {value!r})")
    return float(value)


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ValueError(f"{name} must be an integer (got {value!r})")
    return value


def _at_least_one(name: str, value: Any) -> None:
    if not _integer(name, value) >= 1:
        raise ValueError(f"{name} must be >= 1 (got {value})")


def _optional_at_least(name: str, value: Any, low: int) -> None:
    if value is not None and not _integer(name, value) >= low:
        raise ValueError(f"{name} must be None or >= {low} (got {value})")


def _positive(name: str, value: Any) -> None:
    if not _number(name, value) > 0:
        raise ValueError(f"{name} must be > 0 (got {value})")


def _non_negative(name: str, value: Any) -> None:
    if not _number(name, value) >= 0:
        raise ValueError(f"{name} must be >= 0 (got {value})")


def _in_range(name: str, value: Any, low: float, high: float, low_open: bool) -> None:
    v = _number(name, value)
    ok = (low < v if low_open else low <= v) and v <= high
    if not ok:
        bracket = "(" if low_open else "["
        raise ValueError(f"{name} must be in {bracket}{low}, {high}] (got {value})")


def _enum(name: str, enum_cls: type[StrEnum], value: Any) -> StrEnum:
    try:
        return enum_cls(value)
    except ValueError:
        allowed = ", ".join(m.value for m in enum_cls)
        raise ValueError(f"{name} must be one of [{allowed}] (got {value!r})") from None


# ------------------------------------------------------------------------------------------
# HeuristicConfig (§13.1)
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeuristicConfig:
    plateau_epochs_to_germinate: int = 3
    min_epochs_before_germinate: int = 5
    cull_after_epochs_without_improvement: int = 5
    cull_if_accuracy_drops_by: float = 2.0  # pp
    min_improvement_to_fossilize: float = 0.0  # pp
    embargo_epochs_after_cull: int = 5
    blueprint_penalty_on_cull: float = 2.0
    blueprint_penalty_decay: float = 0.5  # multiplier per epoch; entries < 0.1 are deleted
    blueprint_penalty_threshold: float = 3.0
    blend: str = "sigmoid"
    ransomware_contribution_threshold: float = 0.1  # pp
    ransomware_improvement_threshold: float = 0.0  # pp
    blueprint_rotation: tuple[str, ...] | None = None  # None -> topology default

    def __post_init__(self) -> None:
        if self.blueprint_rotation is not None:
            if isinstance(self.blueprint_rotation, str):
                raise ValueError("heuristic.blueprint_rotation must be a list of blueprint names")
            object.__setattr__(self, "blueprint_rotation", tuple(self.blueprint_rotation))
        if self.blend not in C.BLEND_NAMES:
            raise ValueError(f"heuristic.blend must be one of {list(C.BLEND_NAMES)} (got {self.blend!r})")
        for name in ("plateau_epochs_to_germinate", "min_epochs_before_germinate",
                     "cull_after_epochs_without_improvement", "embargo_epochs_after_cull"):
            if not _integer(f"heuristic.{name}", getattr(self, name)) >= 0:
                raise ValueError(f"heuristic.{name} must be >= 0 (got {getattr(self, name)})")
        for name in ("blueprint_penalty_on_cull", "blueprint_penalty_threshold", "blueprint_penalty_decay"):
            _non_negative(f"heuristic.{name}", getattr(self, name))

    def rotation(self, topology: str) -> tuple[str, ...]:
        return self.blueprint_rotation or C.HEURISTIC_ROTATIONS[topology]

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if d["blueprint_rotation"] is not None:
            d["blueprint_rotation"] = list(d["blueprint_rotation"])
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HeuristicConfig":
        if not isinstance(d, Mapping):
            raise ValueError(f"heuristic must be a JSON object (got {type(d).__name__})")
        known = {f.name for f in fields(cls)}
        unknown = sorted(f"heuristic.{k}" for k in d if k not in known)
        if unknown:
            raise ValueError(f"Unknown config keys: {unknown}")
        return cls(**d)


# ------------------------------------------------------------------------------------------
# TrainingConfig (§14.1, §14.2)
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingConfig:
    # run
    task: Task = Task.CIFAR10
    controller: ControllerName = ControllerName.PPO_LSTM
    n_episodes: int = 100  # total target
    n_envs: int = 4
    max_epochs: int = 25  # episode length T
    seed: int = 42
    slots: tuple[str, ...] = ("r0c1",)
    max_seeds: int | None = None
    # devices and data
    device: str = "auto"
    env_devices: tuple[str, ...] | None = None
    data_path: DataPath = DataPath.DEVICE
    num_workers: int | None = None  # -> 4, loader path only
    data_root: str = "./data"
    data_split: DataSplit = DataSplit.SHARED
    batch_size_per_env: int | None = None  # task default
    max_train_batches: int | None = None  # task default; 0 = unlimited
    val_samples: int | None = None  # whole test split
    val_batch_size: int | None = None  # -> per-env batch
    data_seed: int = 0
    synthetic_train_samples: int = 50000
    synthetic_test_samples: int = 10000
    # precision
    amp: bool = False
    amp_dtype: AmpDtype = AmpDtype.FLOAT16
    # policy
    lstm_hidden_dim: int = 128
    chunk_length: int | None = None  # -> max_epochs
    blueprint_menu: tuple[str, ...] | None = None  # topology default
    # PPO
    lr: float = 3e-4
    gamma: float = 0.995
    gae_lambda: float = 0.97
    clip_ratio: float = 0.2
    clip_value: bool = True
    value_clip: float = 10.0
    value_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = 0.015
    update_epochs: int = 1
    num_minibatches: int = 1
    adam_eps: float = 1e-5
    weight_decay: float = 0.0
    entropy_coef: float = 0.05
    entropy_coef_start: float | None = None
    entropy_coef_end: float | None = None
    entropy_coef_min: float = 0.01
    entropy_anneal_episodes: int = 0
    # rewards
    reward_family: RewardFamily = RewardFamily.CONTRIBUTION
    reward_mode: RewardMode = RewardMode.SHAPED
    param_budget: int = 500000
    param_penalty_weight: float = 0.1
    sparse_reward_scale: float = 1.0
    discard_rolled_back_envs: bool = False
    # telemetry
    use_telemetry: bool = True
    telemetry_level: TelemetryLevel = TelemetryLevel.NORMAL
    plateau_threshold: float = 0.5
    improvement_threshold: float = 2.0
    # outputs
    run_dir: str | None = None
    resume_path: str | None = None
    checkpoint_every: int = 10
    # heuristic
    heuristic: HeuristicConfig = field(default_factory=HeuristicConfig)

    # ---------------------------------------------------------------- construction
    def __post_init__(self) -> None:
        self._coerce()
        self._validate_counts()
        self._validate_ppo()
        self._validate_rewards()
        self._validate_slots()
        self._validate_data()
        self._validate_menu_and_rotation()

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def _coerce(self) -> None:
        enums = {
            "task": Task, "controller": ControllerName, "data_split": DataSplit, "data_path": DataPath,
            "amp_dtype": AmpDtype, "reward_family": RewardFamily, "reward_mode": RewardMode,
            "telemetry_level": TelemetryLevel,
        }
        for name, cls in enums.items():
            self._set(name, _enum(name, cls, getattr(self, name)))
        for name in ("slots", "env_devices", "blueprint_menu"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, str) or not hasattr(value, "__iter__"):
                raise ValueError(f"{name} must be a list of strings (got {value!r})")
            self._set(name, tuple(value))
        if isinstance(self.heuristic, Mapping):
            self._set("heuristic", HeuristicConfig.from_dict(self.heuristic))
        elif not isinstance(self.heuristic, HeuristicConfig):
            raise ValueError(f"heuristic must be a HeuristicConfig or a mapping (got {self.heuristic!r})")
        for name in ("amp", "clip_value", "discard_rolled_back_envs", "use_telemetry"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false (got {getattr(self, name)!r})")
        if self.telemetry_level == TelemetryLevel.OFF:
            self._set("use_telemetry", False)
        if self.chunk_length is None:
            self._set("chunk_length", self.max_epochs)

    def _validate_counts(self) -> None:
        for name in ("n_episodes", "n_envs", "max_epochs", "update_epochs", "num_minibatches",
                     "checkpoint_every", "lstm_hidden_dim"):
            _at_least_one(name, getattr(self, name))
        if self.num_minibatches > self.n_envs:
            raise ValueError(
                f"num_minibatches must be <= n_envs (got num_minibatches={self.num_minibatches}, "
                f"n_envs={self.n_envs})"
            )
        if _integer("chunk_length", self.chunk_length) != self.max_epochs:
            raise ValueError(
                f"chunk_length must match max_epochs (got chunk_length={self.chunk_length}, "
                f"max_epochs={self.max_epochs})"
            )
        _integer("seed", self.seed)
        _integer("data_seed", self.data_seed)
        _optional_at_least("max_seeds", self.max_seeds, 1)

    def _validate_ppo(self) -> None:
        _in_range("gamma", self.gamma, 0.0, 1.0, low_open=True)
        _in_range("clip_ratio", self.clip_ratio, 0.0, 1.0, low_open=True)
        _in_range("gae_lambda", self.gae_lambda, 0.0, 1.0, low_open=False)
        for name in ("lr", "adam_eps", "value_clip", "max_grad_norm"):
            _positive(name, getattr(self, name))
        for name in ("entropy_coef", "entropy_coef_min", "value_coef", "weight_decay",
                     "entropy_anneal_episodes"):
            _non_negative(name, getattr(self, name))
        for name in ("entropy_coef_start", "entropy_coef_end"):
            if getattr(self, name) is not None:
                _non_negative(name, getattr(self, name))
        if self.target_kl is not None:
            _positive("target_kl", self.target_kl)

    def _validate_rewards(self) -> None:
        _positive("param_budget", self.param_budget)
        _positive("sparse_reward_scale", self.sparse_reward_scale)
        _non_negative("param_penalty_weight", self.param_penalty_weight)
        _number("plateau_threshold", self.plateau_threshold)
        _number("improvement_threshold", self.improvement_threshold)
        if self.reward_family == RewardFamily.LOSS and self.reward_mode != RewardMode.SHAPED:
            raise ValueError(
                f"reward_mode applies only to contribution rewards (reward_family='loss' with "
                f"reward_mode={self.reward_mode.value!r})"
            )

    def _validate_slots(self) -> None:
        if not self.slots:
            raise ValueError("slots cannot be empty")
        for slot in self.slots:
            try:
                C.parse_slot_id(slot)
            except ValueError as exc:
                raise ValueError(f"Invalid slot configuration: slots: {exc}") from None
        duplicates = sorted({s for s in self.slots if self.slots.count(s) > 1})
        if duplicates:
            raise ValueError(f"Invalid slot configuration: slots contains duplicates {duplicates}")
        available = C.task_slot_ids(self.task)
        missing = [s for s in self.slots if s not in available]
        if missing:
            raise ValueError(
                f"Invalid slot configuration: slots {missing} are not injection points of task "
                f"{self.task.value!r} (available: {list(available)})"
            )

    def _validate_data(self) -> None:
        for name in ("batch_size_per_env", "val_samples", "val_batch_size", "num_workers"):
            _optional_at_least(name, getattr(self, name), 1 if name != "num_workers" else 0)
        _optional_at_least("max_train_batches", self.max_train_batches, 0)
        for name in ("synthetic_train_samples", "synthetic_test_samples"):
            if not _integer(name, getattr(self, name)) >= 10:
                raise ValueError(f"{name} must be >= 10 (got {getattr(self, name)})")
        if not isinstance(self.device, str) or not self.device:
            raise ValueError(f"device must be a device string such as 'cpu', 'cuda:0' or 'auto' "
                             f"(got {self.device!r})")
        if self.env_devices is not None and len(self.env_devices) > self.n_envs:
            raise ValueError(f"env_devices lists {len(self.env_devices)} devices but n_envs is {self.n_envs}")
        if not isinstance(self.data_root, str):
            raise ValueError(f"data_root must be a path string (got {self.data_root!r})")

    def _validate_menu_and_rotation(self) -> None:
        topology = self.topology
        if self.blueprint_menu is not None:
            menu = self.blueprint_menu
            registered = C.BLUEPRINT_NAMES[topology]
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
        rotation = self.heuristic.blueprint_rotation
        if rotation is not None:
            menu = self.menu
            bad = [r for r in rotation if r == "noop" or r not in menu]
            if not rotation or bad:
                raise ValueError(
                    f"heuristic.blueprint_rotation must be non-empty, drawn from the blueprint menu "
                    f"{list(menu[1:])} and never 'noop' (bad entries: {bad or 'empty'})"
                )

    # ---------------------------------------------------------------- derived values
    @property
    def topology(self) -> str:
        return C.TASK_TOPOLOGY[self.task]

    @property
    def menu(self) -> tuple[str, ...]:
        """The effective blueprint menu (blueprint-head index -> name)."""
        return self.blueprint_menu or C.BLUEPRINT_MENUS[self.topology]

    @property
    def num_blueprints(self) -> int:
        return len(self.menu)

    @property
    def slot_ids(self) -> tuple[str, ...]:
        """Every host injection point in canonical order (the slot head)."""
        return C.task_slot_ids(self.task)

    @property
    def num_slots(self) -> int:
        return len(self.slot_ids)

    @property
    def enabled_slots(self) -> tuple[str, ...]:
        return tuple(C.sort_slot_ids(self.slots))

    @property
    def state_dim(self) -> int:
        return C.obs_dim(self.num_slots, self.use_telemetry, self.num_blueprints)

    @property
    def controller_name(self) -> str:
        """Canonical controller name (the `ppo` alias resolves to `ppo_lstm`)."""
        return "ppo_lstm" if self.controller == ControllerName.PPO else self.controller.value

    @property
    def is_learning(self) -> bool:
        return self.controller_name in ("ppo_lstm", "ppo_mlp")

    def entropy_coefficient(self, train_steps: int) -> float:
        """β for the given number of completed updates (§11.8)."""
        anneal_steps = math.ceil(self.entropy_anneal_episodes / self.n_envs)
        if anneal_steps == 0:
            return max(self.entropy_coef, self.entropy_coef_min)
        start = self.entropy_coef if self.entropy_coef_start is None else self.entropy_coef_start
        end = self.entropy_coef if self.entropy_coef_end is None else self.entropy_coef_end
        p = min(1.0, train_steps / anneal_steps)
        return max(start + p * (end - start), self.entropy_coef_min)

    def replace(self, **changes: Any) -> "TrainingConfig":
        """A validated copy with some fields changed (chunk_length follows max_epochs)."""
        if "max_epochs" in changes and "chunk_length" not in changes:
            changes["chunk_length"] = None
        return dataclasses.replace(self, **changes)

    # ---------------------------------------------------------------- (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, StrEnum):
                value = value.value
            elif isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, HeuristicConfig):
                value = value.to_dict()
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TrainingConfig":
        if not isinstance(d, Mapping):
            raise ValueError(f"a config must be a JSON object (got {type(d).__name__})")
        known = {f.name for f in fields(cls)}
        unknown = sorted(k for k in d if k not in known)
        if isinstance(d.get("heuristic"), Mapping):
            h_known = {f.name for f in fields(HeuristicConfig)}
            unknown += sorted(f"heuristic.{k}" for k in d["heuristic"] if k not in h_known)
        if unknown:
            raise ValueError(f"Unknown config keys: {unknown}")
        return cls(**dict(d))

    @classmethod
    def from_json(cls, path: str | Path) -> "TrainingConfig":
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ValueError(f"config file not found: {path}") from None
        except OSError as exc:
            raise ValueError(f"cannot read config file {path}: {exc.strerror or exc}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"config file {path} is not valid JSON: {exc.msg} at line {exc.lineno} "
                             f"column {exc.colno}") from None
        if not isinstance(data, dict):
            raise ValueError(f"config file {path} must hold a JSON object at the top level")
        try:
            return cls.from_dict(data)
        except TypeError as exc:  # pragma: no cover - from_dict rejects unknown keys first
            raise ValueError(f"config file {path}: {exc}") from None

    from_json_path = from_json

    # ---------------------------------------------------------------- presets (§14.3)
    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "TrainingConfig":
        key = str(name).lower()
        if key not in _PRESETS:
            raise ValueError(f"unknown preset {name!r}; available: {list(PRESET_NAMES)}")
        values = dict(_PRESETS[key])
        values.update(overrides)
        return cls(**values)


_CIFAR = {"task": "cifar10", "entropy_coef": 0.1, "plateau_threshold": 0.4}
_TINY = {
    "task": "tinystories", "entropy_coef": 0.05, "entropy_coef_start": 0.05, "entropy_coef_end": 0.01,
    "entropy_anneal_episodes": 10, "plateau_threshold": 0.3, "improvement_threshold": 1.5,
    "sparse_reward_scale": 0.5,
}

# quickstart: shapes10 at a CPU-friendly size. 12-epoch episodes let a seed germinated by epoch 3
# blend (g+3..g+8) and fossilize (g+9) inside the episode; see README for the numbers.
QUICKSTART = {
    **_CIFAR, "task": "shapes10", "controller": "ppo_lstm", "n_envs": 2, "n_episodes": 8,
    "max_epochs": 12, "batch_size_per_env": 128, "max_train_batches": 16,
    "synthetic_train_samples": 8192, "synthetic_test_samples": 1024, "checkpoint_every": 2,
}

_PRESETS: dict[str, dict[str, Any]] = {
    "cifar10": dict(_CIFAR),
    "cifar10_deep": {"task": "cifar10_deep", "entropy_coef": 0.08, "plateau_threshold": 0.35},
    "tinystories": dict(_TINY),
    "shapes10": {**_CIFAR, "task": "shapes10"},
    "pytext": {**_TINY, "task": "pytext"},
    "quickstart": QUICKSTART,
    "heuristic": {
        "controller": "heuristic", "task": "cifar10", "n_episodes": 1, "n_envs": 1, "max_epochs": 75,
        "batch_size_per_env": 128, "max_train_batches": 50, "val_samples": 6400,
        "slots": ("r0c0", "r0c1", "r0c2"),
    },
}
