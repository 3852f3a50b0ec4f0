"""The controller side's settings, each default written once: PPO, the reward, the heuristic.

Frozen dataclasses with no jax in sight, so a configuration is checked before jax loads:

- `PPOConfig` (BEHAVIOUR §11.1): the PPO/LSTM controller's hyperparameters, and `entropy_coefficient`, the one
  entropy schedule (BEHAVIOUR §11.8) that both the jitted update and the run's history use; with them the
  network's fixed sizes (BEHAVIOUR §10.1);
- `RewardConfig` (BEHAVIOUR §12): which reward family and mode, and every constant of the rewards (the one
  reward settings class; `REWARD_SETTINGS` names the fields a run sets); `reward_fn_name` is the one place
  that maps a family and a mode to a reward function;
- `HeuristicConfig` (BEHAVIOUR §13.1): the rule-based controller's thresholds, and the blueprint rotation check.
- `OracleConfig`: the fixed growth schedule of the `oracle` control.

`esper_fx.config.TrainingConfig` nests them as `config.ppo`, `config.reward` and `config.heuristic`; the
PPO fields and the reward's settings are the run's flat JSON keys and command-line fields.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, Callable, Mapping, Sequence

from esper_fx.contracts.actions import BLEND_NAMES, TEMPO_NAMES
from esper_fx.contracts.blueprints import BLUEPRINT_MENUS
from esper_fx.contracts.lifecycle import GOVERNOR_DEATH_PENALTY, MIN_FOSSILIZE_CONTRIBUTION, MIN_PROBATION_EPOCHS
from esper_fx.contracts.stages import SeedStage
from esper_fx.contracts.tasks import TASKS, task_facts
from rl import validate as check

# ------------------------------------------------------------------------------------------
# PPO (BEHAVIOUR §11.1, §11.8)
# ------------------------------------------------------------------------------------------

KL_STOP_FACTOR = 1.5  # an update stops above 1.5·target_kl
ADAM_B1 = 0.9
ADAM_B2 = 0.999

# The network's fixed architecture (BEHAVIOUR §10.1), the masked logit (§9.2) and the numerical floors of the PPO
# maths; here, without jax, because the PyTorch reference controller of the benchmarks (esper_fx.bench)
# computes the same functions with the same numbers.
FEATURE_DIM = 128
HEAD_HIDDEN = 64
LAYER_NORM_EPS = 1e-5
LSTM_FORGET_BIAS = 2.0
POLICY_OUT_GAIN = 0.01  # orthogonal init gain of the policy heads' output layers
VALUE_OUT_GAIN = 1.0
MASKED_LOGIT = -1e4  # finite in fp16 and bf16; exp() underflows to exactly 0
ENTROPY_LOG_FLOOR = 1e-8  # the normalised entropy divides by max(ln n_valid, 1e-8)
ADV_EPS = 1e-8  # advantage normalisation: (A − mean)/(std + 1e-8)
EV_MIN_VAR = 1e-8  # explained variance is 0 when Var(R) <= 1e-8


# Upper bounds on the PPO sizes: far beyond any useful run, and far below what exhausts a machine's memory
# (an LSTM of width 100000 asked for 298 GiB).
PPO_SIZE_LIMITS = {"lstm_hidden_dim": 4096, "update_epochs": 1000, "num_minibatches": 1024}
COUNT_MAX = 2**62  # the bound of every other count (episodes to anneal over, the heuristic's epoch counts)


def _store(settings: Any, name: str, value: Any) -> None:
    """Set a field of a frozen settings dataclass to its checked value (a whole-number float -> int)."""
    object.__setattr__(settings, name, value)


@dataclass(frozen=True)
class PPOConfig:
    """Every settable PPO hyperparameter (frozen and hashable: a static jit argument).

    [fix] The defaults marked LEARNING are ours, chosen by measurement (docs/LEARNING.md); the reference's
    (BEHAVIOUR §11.1) are `REFERENCE_PPO`, which made one Adam step per batch and never moved the policy.
    """

    lstm_hidden_dim: int = 128  # width of the policy's LSTM (or of the MLP core)
    lr: float = 3e-4  # as the reference; 1e-3 collapsed the slot head onto the second-best slot (LEARNING)
    gamma: float = 0.99  # LEARNING (reference 0.995)
    gae_lambda: float = 0.95  # LEARNING (reference 0.97)
    clip_ratio: float = 0.2
    clip_value: bool = True
    value_clip: float = 10.0
    value_coef: float = 0.5
    max_grad_norm: float = 1.0  # LEARNING (reference 0.5)
    target_kl: float | None = 0.05  # LEARNING (reference 0.015): the early stop is a trust region
    update_epochs: int = 8  # LEARNING (reference 1)
    kl_per_head: bool = True  # LEARNING (reference: the whole-batch KL): the early stop reads each head's own KL
    num_minibatches: int = 1
    adam_eps: float = 1e-5
    weight_decay: float = 0.0  # decoupled, value head only
    entropy_coef: float = 0.02  # LEARNING (reference 0.05)
    entropy_coef_start: float | None = None  # None: entropy_coef
    entropy_coef_end: float | None = None  # None: entropy_coef
    entropy_coef_min: float = 0.0  # LEARNING (reference 0.01)
    entropy_anneal_episodes: int = 0  # 0: no anneal
    horizon_bootstrap: bool = False  # [fix] the last epoch ends the episode (the reference: a truncation valued
    #                                  by V of the post-action signals, BEHAVIOUR §7.5); LEARNING.md says why

    def __post_init__(self) -> None:
        check.boolean("clip_value", self.clip_value)
        check.boolean("horizon_bootstrap", self.horizon_bootstrap)
        for name in ("update_epochs", "num_minibatches", "lstm_hidden_dim"):
            _store(self, name, check.at_least_one(name, getattr(self, name)))
            check.at_most(name, getattr(self, name), PPO_SIZE_LIMITS[name])
        _store(self, "entropy_anneal_episodes",
               check.int_between("entropy_anneal_episodes", self.entropy_anneal_episodes, 0, COUNT_MAX))
        check.in_range("gamma", self.gamma, 0.0, 1.0, low_open=True)
        check.in_range("clip_ratio", self.clip_ratio, 0.0, 1.0, low_open=True)
        check.in_range("gae_lambda", self.gae_lambda, 0.0, 1.0, low_open=False)
        for name in ("lr", "adam_eps", "value_clip", "max_grad_norm"):
            check.positive(name, getattr(self, name))
        for name in ("entropy_coef", "entropy_coef_min", "value_coef", "weight_decay"):
            check.non_negative(name, getattr(self, name))
        for name in ("entropy_coef_start", "entropy_coef_end"):
            if getattr(self, name) is not None:
                check.non_negative(name, getattr(self, name))
        if self.target_kl is not None:
            check.positive("target_kl", self.target_kl)

    @property
    def kl_stop(self) -> float | None:
        return None if self.target_kl is None else KL_STOP_FACTOR * self.target_kl

    @property
    def entropy_endpoints(self) -> tuple[float, float]:
        """(start, end) of the entropy anneal; each defaults to entropy_coef."""
        start = self.entropy_coef if self.entropy_coef_start is None else self.entropy_coef_start
        end = self.entropy_coef if self.entropy_coef_end is None else self.entropy_coef_end
        return start, end

    def anneal_updates(self, n_envs: int) -> int:
        """ceil(entropy_anneal_episodes / n_envs): the anneal length in updates (BEHAVIOUR §11.8)."""
        return math.ceil(self.entropy_anneal_episodes / n_envs)


# The reference's PPO settings (BEHAVIOUR §11.1), for ablations: `PPOConfig(**REFERENCE_PPO)`, or `--set` each
# on the command line. With them the policy hardly moved (LEARNING.md §1).
REFERENCE_PPO: Mapping[str, Any] = {
    "lr": 3e-4, "gamma": 0.995, "gae_lambda": 0.97, "max_grad_norm": 0.5, "target_kl": 0.015, "update_epochs": 1,
    "num_minibatches": 1, "entropy_coef": 0.05, "entropy_coef_min": 0.01, "horizon_bootstrap": True,
    "kl_per_head": False,
}


def entropy_coefficient(cfg: PPOConfig, n_envs: int, train_steps: Any, minimum: Callable = min,
                        maximum: Callable = max) -> Any:
    """β after `train_steps` completed updates (BEHAVIOUR §11.8): linear from start to end over the anneal, floored
    at entropy_coef_min. Python numbers by default; pass jnp.minimum / jnp.maximum for traced steps."""
    steps = cfg.anneal_updates(n_envs)
    if steps == 0:
        return max(cfg.entropy_coef, cfg.entropy_coef_min)
    start, end = cfg.entropy_endpoints
    p = minimum(1.0, train_steps / steps)
    return maximum(start + p * (end - start), cfg.entropy_coef_min)


# ------------------------------------------------------------------------------------------
# Rewards (BEHAVIOUR §12.1, §12.6)
# ------------------------------------------------------------------------------------------


class RewardFamily(StrEnum):
    CONTRIBUTION = "contribution"
    LOSS = "loss"
    ACCURACY = "accuracy"  # the growth reward (LEARNING.md)


class RewardMode(StrEnum):
    SHAPED = "shaped"
    SPARSE = "sparse"
    MINIMAL = "minimal"


def reward_fn_name(family: Any, mode: Any = RewardMode.SHAPED) -> str:
    """BEHAVIOUR §12.1: contribution + shaped / sparse / minimal -> that mode; loss (shaped only) -> "loss";
    accuracy (shaped only) -> "growth"."""
    family = check.enum("reward_family", RewardFamily, str(getattr(family, "value", family)).lower())
    mode = check.enum("reward_mode", RewardMode, str(getattr(mode, "value", mode)).lower())
    if family in (RewardFamily.LOSS, RewardFamily.ACCURACY):
        if mode != RewardMode.SHAPED:
            raise ValueError(f"reward_mode applies only to contribution rewards (reward_family="
                             f"{family.value!r} with reward_mode={mode.value!r})")
        return "loss" if family == RewardFamily.LOSS else "growth"
    return mode.value


# Φ_stage of the shaped reward's potential, indexed by the SeedStage integer value (every other stage: 0).
_STAGE_POTENTIAL_BY_STAGE = {SeedStage.GERMINATED: 1.0, SeedStage.TRAINING: 2.0, SeedStage.BLENDING: 3.5,
                             SeedStage.PROBATIONARY: 5.5, SeedStage.FOSSILIZED: 6.0}
STAGE_POTENTIALS: tuple[float, ...] = tuple(_STAGE_POTENTIAL_BY_STAGE.get(v, 0.0)
                                            for v in range(max(int(s) for s in SeedStage) + 1))
_DEFAULT_TASK = TASKS["cifar10"]

# The reward fields a run sets (its flat keys: JSON, command line); every other field is a constant, or is
# taken from the run (`RewardConfig.for_run`).
REWARD_SETTINGS: tuple[str, ...] = ("reward_family", "reward_mode", "param_budget", "param_penalty_weight",
                                    "sparse_reward_scale", "flop_rent_weight")


@dataclass(frozen=True)
class RewardConfig:
    """The reward a run pays and every constant of it, each default written once (defaults: cifar10, the
    reference's cull age of 1 epoch).

    Three kinds of field: the settings of `REWARD_SETTINGS` (which family and mode, the sparse reward's
    constants), set by a run; `gamma`, `min_cull_age`, `legitimacy_epochs` and the task's loss scale, taken
    from the run (`for_run`: the run's `TrainingConfig` fills them in, so they have one home each: its
    `gamma`, its `cull_age`, its lifecycle, the task table); and the reward's fixed constants. Frozen and hashable; importing
    `rl.rewards` makes it a jax pytree (family and mode static, every number a leaf).
    """

    reward_family: RewardFamily = RewardFamily.CONTRIBUTION
    reward_mode: RewardMode = RewardMode.SHAPED
    param_budget: int = 500000
    param_penalty_weight: float = 0.1
    sparse_reward_scale: float = 1.0
    # the growth reward's rent per training FLOP (LEARNING.md §8): reward charged per epoch for each host's
    # worth of seed FLOPs in a training step, so one epoch of seeds as costly as the host costs this much
    # (0: no FLOP rent, the growth reward as it was)
    flop_rent_weight: float = 0.0
    # taken from the run (for_run)
    gamma: float = PPOConfig.gamma
    min_cull_age: float = 1.0  # epochs: a CULL of a younger seed pays the young-cull penalty (a run: its own)
    typical_loss_delta_std: float = _DEFAULT_TASK.typical_loss_delta_std
    compute_rent_weight: float = _DEFAULT_TASK.compute_rent_weight
    baseline_loss: float = _DEFAULT_TASK.baseline_loss
    target_loss: float = _DEFAULT_TASK.target_loss
    # the shaped contribution reward
    contribution_weight: float = 1.0
    proxy_weight: float = 0.3
    pbrs_weight: float = 0.3
    rent_weight: float = 0.5
    max_rent: float = 8.0
    invalid_fossilize_penalty: float = -1.0
    cull_fossilized_penalty: float = -1.0
    germinate_with_seed_penalty: float = -0.3
    germinate_cost: float = -0.02
    fossilize_cost: float = -0.01
    cull_cost: float = -0.005
    fossilize_base_bonus: float = 0.5
    fossilize_contribution_scale: float = 0.1
    fossilize_noncontributing_penalty: float = -0.2
    cull_hurting_bonus: float = 0.3
    cull_acceptable_bonus: float = 0.1
    cull_good_seed_penalty: float = -0.3
    cull_hurting_threshold: float = -0.5
    improvement_safe_threshold: float = 0.1
    hacking_ratio_threshold: float = 5.0
    attribution_sigmoid_steepness: float = 10.0
    terminal_acc_weight: float = 0.05
    fossilize_terminal_scale: float = 3.0
    # (1) attribution details: ρ applies when c > 1.0; ρ ≤ 0.3 in size; P unknown -> a = 0.5·c
    ratio_penalty_min_contribution: float = 1.0
    ratio_penalty_max: float = 0.3
    ratio_penalty_slope: float = 0.1
    ratio_penalty_contribution_scale: float = 10.0
    unknown_progress_factor: float = 0.5
    # (2) blending warning: −0.1 − min(0.05·eis, 0.3)
    blending_warning_base: float = -0.1
    blending_warning_per_epoch: float = 0.05
    blending_warning_max: float = 0.3
    # (3) probation indecision: max(−3^(eis−2), −10) from eis 2
    probation_base: float = 3.0
    probation_grace_epochs: float = 2.0
    probation_max_penalty: float = 10.0
    # potentials: φ = Φ_stage + min(0.3·eis, 2.0)
    stage_potentials: tuple[float, ...] = STAGE_POTENTIALS
    eis_potential_scale: float = 0.3
    eis_potential_max: float = 2.0
    # fossilize shaping (I < 0 branch) and legitimacy
    fossilize_regression_base: float = -0.5
    fossilize_regression_scale: float = 0.2
    fossilize_regression_max: float = 1.0
    fossilize_ransomware_contribution: float = 0.1
    fossilize_ransomware_improvement: float = -0.2
    fossilize_ransomware_penalty: float = -0.3
    min_fossilize_contribution: float = MIN_FOSSILIZE_CONTRIBUTION
    legitimacy_epochs: float = float(MIN_PROBATION_EPOCHS)  # a run: its lifecycle's (BEHAVIOUR §2.14)
    # cull shaping
    cull_empty_penalty: float = -0.2
    cull_young_penalty: float = -0.3
    cull_good_seed_scale: float = 0.05
    cull_max_penalty: float = -0.9
    # sparse and minimal
    early_cull_penalty: float = -0.1
    early_cull_age: float = 5.0
    # the loss family
    loss_delta_weight: float = 5.0
    max_loss_delta: float = 5.0
    regression_penalty_scale: float = 0.5
    max_rent_penalty: float = 5.0
    grace_epochs: float = 3.0
    stage_potential_weight: float = 0.1
    terminal_loss_weight: float = 1.0
    # loop-level terms
    governor_punishment: float = -GOVERNOR_DEATH_PENALTY
    auto_cull_penalty: float = -0.2  # per seed the lifecycle auto-culled, charged to the env's next step
    # the growth reward (LEARNING.md): reward per pp of committed accuracy, the share of an unfossilized
    # seed's contribution held back until it is fossilized, the parameter rent, the rollback penalty
    growth_accuracy_weight: float = 0.1
    growth_commit_weight: float = 0.5
    growth_rent_weight: float = 0.01
    growth_rollback_penalty: float = -1.0

    def __post_init__(self) -> None:
        _store(self, "reward_family", check.enum("reward_family", RewardFamily, self.reward_family))
        _store(self, "reward_mode", check.enum("reward_mode", RewardMode, self.reward_mode))
        _store(self, "param_budget", check.at_least_one("param_budget", self.param_budget))
        check.positive("sparse_reward_scale", self.sparse_reward_scale)
        check.non_negative("param_penalty_weight", self.param_penalty_weight)
        check.non_negative("flop_rent_weight", self.flop_rent_weight)
        reward_fn_name(self.reward_family, self.reward_mode)

    @property
    def reward_fn_name(self) -> str:
        return reward_fn_name(self.reward_family, self.reward_mode)

    def for_run(self, task: str, gamma: float, min_cull_age: int,
                legitimacy_epochs: int = MIN_PROBATION_EPOCHS) -> "RewardConfig":
        """These settings with the values a run gives the reward: its γ, its cull age, its lifecycle's
        legitimacy epochs and its task's loss scale (`esper_fx.contracts.tasks.TASKS`)."""
        facts = task_facts(task)
        return dataclasses.replace(
            self, gamma=float(gamma), min_cull_age=float(min_cull_age), legitimacy_epochs=float(legitimacy_epochs),
            typical_loss_delta_std=facts.typical_loss_delta_std, compute_rent_weight=facts.compute_rent_weight,
            baseline_loss=facts.baseline_loss, target_loss=facts.target_loss)


# ------------------------------------------------------------------------------------------
# The heuristic (BEHAVIOUR §13.1)
# ------------------------------------------------------------------------------------------


def default_rotation(topology: str) -> tuple[str, ...]:
    """The heuristic's default blueprint rotation: the topology's default menu without noop."""
    return tuple(BLUEPRINT_MENUS[topology][1:])


def check_rotation(rotation: Sequence[str], menu: Sequence[str]) -> None:
    """A rotation must be non-empty, drawn from the blueprint menu, and never name noop."""
    bad = [name for name in rotation if name == "noop" or name not in menu]
    if not rotation or bad:
        raise ValueError(
            f"heuristic.blueprint_rotation must be non-empty, drawn from the blueprint menu {list(menu[1:])} "
            f"and never 'noop' (rotation {list(rotation)}; bad entries: {bad or 'empty'})"
        )


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
    tempo: str = "standard"  # the blend's tempo (BEHAVIOUR §2.14): the reference's own, a fixed choice
    ransomware_contribution_threshold: float = 0.1  # pp
    ransomware_improvement_threshold: float = 0.0  # pp
    blueprint_rotation: tuple[str, ...] | None = None  # None -> the topology's default rotation

    def __post_init__(self) -> None:
        if self.blueprint_rotation is not None:
            _store(self, "blueprint_rotation", check.string_list("heuristic.blueprint_rotation",
                                                                 self.blueprint_rotation))
        if not isinstance(self.blend, str) or self.blend not in BLEND_NAMES:
            raise ValueError(f"heuristic.blend must be one of {list(BLEND_NAMES)} (got {self.blend!r})")
        if not isinstance(self.tempo, str) or self.tempo not in TEMPO_NAMES:
            raise ValueError(f"heuristic.tempo must be one of {list(TEMPO_NAMES)} (got {self.tempo!r})")
        for name in ("plateau_epochs_to_germinate", "min_epochs_before_germinate",
                     "cull_after_epochs_without_improvement", "embargo_epochs_after_cull"):
            _store(self, name, check.int_between(f"heuristic.{name}", getattr(self, name), 0, COUNT_MAX))
        for name in ("blueprint_penalty_on_cull", "blueprint_penalty_threshold", "blueprint_penalty_decay"):
            check.non_negative(f"heuristic.{name}", getattr(self, name))
        for name in ("cull_if_accuracy_drops_by", "min_improvement_to_fossilize",
                     "ransomware_contribution_threshold", "ransomware_improvement_threshold"):
            check.number(f"heuristic.{name}", getattr(self, name))

    def rotation(self, topology: str) -> tuple[str, ...]:
        return self.blueprint_rotation or default_rotation(topology)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if d["blueprint_rotation"] is not None:
            d["blueprint_rotation"] = list(d["blueprint_rotation"])
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HeuristicConfig":
        return section_from_dict(cls, "heuristic", d)


def field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def section_from_dict(cls: type, section: str, d: Any) -> Any:
    """`cls(**d)` for a nested config section read from JSON: a mapping whose keys are all fields of `cls`
    (an unknown one is reported as `section.key`)."""
    if not isinstance(d, Mapping):
        raise ValueError(f"{section} must be a JSON object (got {type(d).__name__})")
    unknown = sorted(f"{section}.{k}" for k in d if k not in field_names(cls))
    if unknown:
        raise ValueError(f"Unknown config keys: {unknown}")
    return cls(**d)


# ------------------------------------------------------------------------------------------
# The oracle: a fixed growth schedule (LEARNING.md §3)
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OracleConfig:
    """Germinate `blueprint` with blend `blend` at `tempo` in `slot` at epoch `germinate_epoch`, fossilize at
    the first epoch it is allowed, never cull. The defaults are the quickstart's (shapes16) best fixed schedule."""

    slot: str = "r0c0"
    blueprint: str = "conv_light"
    blend: str = "sigmoid"
    germinate_epoch: int = 1
    tempo: str = "standard"

    def __post_init__(self) -> None:
        if self.blend not in BLEND_NAMES:
            raise ValueError(f"oracle.blend must be one of {list(BLEND_NAMES)} (got {self.blend!r})")
        if self.tempo not in TEMPO_NAMES:
            raise ValueError(f"oracle.tempo must be one of {list(TEMPO_NAMES)} (got {self.tempo!r})")
        for name in ("slot", "blueprint"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"oracle.{name} must be a string (got {getattr(self, name)!r})")
        check.at_least_one("oracle.germinate_epoch", self.germinate_epoch)
        object.__setattr__(self, "germinate_epoch", check.integer("oracle.germinate_epoch", self.germinate_epoch))

    def check_against(self, enabled_slots: Sequence[str], menu: Sequence[str], max_epochs: int) -> None:
        """The schedule must name an enabled slot and a menu blueprint, inside the episode."""
        if self.slot not in enabled_slots:
            raise ValueError(f"oracle.slot {self.slot!r} is not an enabled slot {list(enabled_slots)}")
        if self.blueprint == "noop" or self.blueprint not in menu:
            raise ValueError(f"oracle.blueprint {self.blueprint!r} is not in the blueprint menu {list(menu[1:])}")
        if self.germinate_epoch > max_epochs:
            raise ValueError(f"oracle.germinate_epoch {self.germinate_epoch} is after the episode's last epoch "
                             f"({max_epochs})")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "OracleConfig":
        return section_from_dict(cls, "oracle", d)
