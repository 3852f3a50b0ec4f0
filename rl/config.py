"""The controller side's settings, each default written once: PPO, the reward, the heuristic.

Frozen dataclasses with no jax in sight, so a configuration is checked before jax loads:

- `LearnerConfig`: what every learning controller reads (γ, GAE's λ, the last epoch's bootstrap), one home for
  each, so the returns and the reward's shaping discount with one γ;
- `PPOConfig` (BEHAVIOUR §11.1): the PPO/LSTM controller's hyperparameters, and `entropy_coefficient`, the one
  entropy schedule (BEHAVIOUR §11.8) that both the jitted update and the run's history use; with them the
  network's fixed sizes (BEHAVIOUR §10.1);
- `RewardConfig` (BEHAVIOUR §12): which reward family and mode, and every constant of the rewards (the one
  reward settings class; `REWARD_SETTINGS` names its settings, `REWARD_FROM_RUN` the fields a run gives it,
  `REWARD_CONSTANTS` the rest); `reward_fn_name` is the one place that maps a family and a mode to a reward
  function;
- `HeuristicConfig` (BEHAVIOUR §13.1): the rule-based controller's thresholds, and the blueprint rotation check.
- `OracleConfig`: the fixed growth schedule of the `oracle` control.
- `ReinforceConfig`: the `reinforce` controller's hyperparameters (REINFORCE with a learned baseline).

`esper_fx.config.TrainingConfig` nests them as `config.learner`, `config.ppo`, `config.reward`,
`config.heuristic`, `config.oracle` and `config.reinforce`, each one JSON object under its name.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, Callable, Mapping, Sequence

from esper_fx.contracts.actions import ACTION_HEADS, BLEND_NAMES, TEMPO_NAMES
from esper_fx.contracts.lifecycle import GOVERNOR_DEATH_PENALTY, MIN_FOSSILIZE_CONTRIBUTION, MIN_PROBATION_EPOCHS
from esper_fx.contracts.run_settings import option  # how every setting is declared (its help, flag, resume)
from esper_fx.contracts.schedules import schedule_factor
from esper_fx.contracts.stages import SeedStage
from esper_fx.contracts.tasks import TASKS, task_facts
from rl import validate as check

# ------------------------------------------------------------------------------------------
# What every learning controller reads
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LearnerConfig:
    """The settings every learning controller reads, whatever its update: the discount γ (also the reward's
    potential shaping, `RewardConfig.for_run`), GAE's λ (the controllers that estimate advantages by GAE) and how
    an episode's last epoch ends. Frozen and hashable: a static jit argument."""

    gamma: float = option(0.99, "discount factor γ of the returns and of the reward's potential shaping; LEARNING "
                          "(reference 0.995)")
    gae_lambda: float = option(0.95, "GAE's λ (PPO); LEARNING (reference 0.97)")
    horizon_bootstrap: bool = option(False, "[fix] false: the last epoch ends the episode (the reference: a "
                                     "truncation valued by V of the post-action signals, BEHAVIOUR §7.5); "
                                     "LEARNING.md says why")

    def __post_init__(self) -> None:
        check.in_range("gamma", self.gamma, 0.0, 1.0, low_open=True)
        check.in_range("gae_lambda", self.gae_lambda, 0.0, 1.0, low_open=False)
        check.boolean("horizon_bootstrap", self.horizon_bootstrap)


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

    lstm_hidden_dim: int = option(128, "width of the policy's LSTM (or of the MLP core)")
    lr: float = option(3e-4, "Adam's learning rate, as the reference; 1e-3 collapsed the slot head onto the "
                       "second-best slot (LEARNING)")
    clip_ratio: float = option(0.2, "PPO's clip ε of the probability ratio")
    clip_value: bool = option(True, "clip the value loss around the old values")
    value_clip: float = option(10.0, "the value loss's clip range")
    value_coef: float = option(0.5, "weight of the value loss")
    max_grad_norm: float = option(1.0, "global gradient norm clip; LEARNING (reference 0.5)")
    target_kl: float | None = option(0.05, "the update stops above 1.5·target_kl (`null`: never); LEARNING "
                                     "(reference 0.015): the early stop is a trust region")
    update_epochs: int = option(8, "passes over each batch per update; LEARNING (reference 1)")
    kl_per_head: bool = option(True, "the early stop reads each head's own KL; LEARNING (reference: the "
                               "whole-batch KL)")
    num_minibatches: int = option(1, "minibatches per pass (at most `n_envs`)")
    adam_eps: float = option(1e-5, "Adam's ε")
    weight_decay: float = option(0.0, "decoupled weight decay, value head only")
    entropy_coef: float = option(0.02, "entropy bonus β; LEARNING (reference 0.05)")
    entropy_coef_start: float | None = option(None, "β at the anneal's start (`null`: `entropy_coef`)")
    entropy_coef_end: float | None = option(None, "β at the anneal's end (`null`: `entropy_coef`)")
    entropy_coef_min: float = option(0.0, "floor of β; LEARNING (reference 0.01)")
    entropy_anneal_episodes: int = option(0, "episodes β anneals over from start to end (0: no anneal)")
    entropy_head_weights: tuple[float, ...] = option(
        (1.0,) * len(ACTION_HEADS), "each head's weight w_h in the entropy bonus β·Σ_h w_h·E_h, in the order "
        "slot, blueprint, blend, op, tempo; `--set` also takes a mapping of head names "
        "(`entropy_head_weights={\"blueprint\": 3}`, a head left out: 1); LEARNING §10")
    lr_anneal: str = option("constant", "Adam's rate over the updates: `constant`, `linear` (to zero at "
                              "`lr_anneal_updates`, CleanRL's anneal) or `wsd` (warmup, stable, then a linear "
                              "decay over the last `lr_anneal_decay`, the hosts' formula)", metavar="NAME")
    lr_anneal_updates: int | None = option(None, "updates a `linear` or `wsd` rate spans (needed by them)")
    lr_anneal_warmup: float = option(0.0, "`wsd`: the first fraction of the updates warms the rate up")
    lr_anneal_decay: float = option(0.2, "`wsd`: the last fraction of the updates decays the rate to zero")
    entropy_mode: str = option("normalised", "the entropy of the bonus: `normalised` (H / ln n_valid per head, "
                               "BEHAVIOUR §9.3) or `raw` (H in nats)", metavar="NAME")
    update_diagnostics: bool = option(True, "after each update, measure the new policy on the batch "
                                      "(approx_kl_after, entropy_after_*): one more forward pass")

    def __post_init__(self) -> None:
        check.boolean("clip_value", self.clip_value)
        check.boolean("update_diagnostics", self.update_diagnostics)
        for name, choices in (("lr_anneal", PPO_LR_SCHEDULES), ("entropy_mode", ENTROPY_MODES)):
            if not isinstance(getattr(self, name), str) or getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {list(choices)} (got {getattr(self, name)!r})")
        if self.lr_anneal_updates is not None:
            _store(self, "lr_anneal_updates",
                   check.int_between("lr_anneal_updates", self.lr_anneal_updates, 1, COUNT_MAX))
        elif self.lr_anneal != "constant":
            raise ValueError(f"lr_anneal {self.lr_anneal!r} needs lr_anneal_updates (the updates it spans)")
        for name in ("lr_anneal_warmup", "lr_anneal_decay"):
            check.in_range(name, getattr(self, name), 0.0, 1.0, low_open=False)
        if self.lr_anneal_warmup + self.lr_anneal_decay > 1.0:
            raise ValueError("lr_anneal_warmup + lr_anneal_decay must be at most 1 (got "
                             f"{self.lr_anneal_warmup} + {self.lr_anneal_decay})")
        for name in ("update_epochs", "num_minibatches", "lstm_hidden_dim"):
            _store(self, name, check.at_least_one(name, getattr(self, name)))
            check.at_most(name, getattr(self, name), PPO_SIZE_LIMITS[name])
        _store(self, "entropy_anneal_episodes",
               check.int_between("entropy_anneal_episodes", self.entropy_anneal_episodes, 0, COUNT_MAX))
        _store(self, "entropy_head_weights", head_weights("entropy_head_weights", self.entropy_head_weights))
        check.in_range("clip_ratio", self.clip_ratio, 0.0, 1.0, low_open=True)
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


PPO_LR_SCHEDULES = ("constant", "linear", "wsd")
ENTROPY_MODES = ("normalised", "raw")


def lr_factor(cfg: PPOConfig, updates: Any, where: Callable, minimum: Callable, maximum: Callable) -> Any:
    """Adam's rate multiplier after `updates` completed updates (`esper_fx.contracts.schedules`), 1 under
    `constant`; pass jnp's where / minimum / maximum for a traced count."""
    if cfg.lr_anneal == "constant":
        return 1.0
    return schedule_factor(cfg.lr_anneal, updates, cfg.lr_anneal_updates, cfg.lr_anneal_warmup,
                           cfg.lr_anneal_decay, where=where, minimum=minimum, maximum=maximum)


def head_weights(name: str, value: Any) -> tuple[float, ...]:
    """One non-negative weight per action head, in `ACTION_HEADS` order, from a list of that many numbers or
    a mapping of head names to weights (a head left out weighs 1)."""
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(ACTION_HEADS))
        if unknown:
            raise ValueError(f"{name}: unknown head {unknown[0]!r}; the heads are {', '.join(ACTION_HEADS)}")
        value = [value.get(head, 1.0) for head in ACTION_HEADS]
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != len(ACTION_HEADS):
        raise ValueError(f"{name} must be {len(ACTION_HEADS)} numbers, one per head ({', '.join(ACTION_HEADS)}), "
                         f"or a mapping of head names to numbers (got {value!r})")
    for head, weight in zip(ACTION_HEADS, value):
        check.non_negative(f"{name}[{head}]", weight)
    return tuple(float(w) for w in value)


# The reference's PPO settings (BEHAVIOUR §11.1), for ablations: `PPOConfig(**REFERENCE_PPO)` and
# `LearnerConfig(**REFERENCE_LEARNER)`, or `--set` each on the command line. With them the policy hardly moved
# (LEARNING.md §1).
REFERENCE_PPO: Mapping[str, Any] = {
    "lr": 3e-4, "max_grad_norm": 0.5, "target_kl": 0.015, "update_epochs": 1, "num_minibatches": 1,
    "entropy_coef": 0.05, "entropy_coef_min": 0.01, "kl_per_head": False,
}
REFERENCE_LEARNER: Mapping[str, Any] = {"gamma": 0.995, "gae_lambda": 0.97, "horizon_bootstrap": True}


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

# The reward fields a run sets as its settings (JSON `{"reward": {"reward_mode": ...}}`, command line
# `reward.reward_mode`).
REWARD_SETTINGS: tuple[str, ...] = ("reward_family", "reward_mode", "param_budget", "param_penalty_weight",
                                    "sparse_reward_scale", "flop_rent_weight")
# The reward fields a run gives it (`RewardConfig.for_run`), each with the run's setting that decides it: never
# set as the reward's own, so each keeps one home. Every other field is a constant (`REWARD_CONSTANTS`).
REWARD_FROM_RUN: Mapping[str, str] = {
    "gamma": "learner.gamma", "min_cull_age": "min_cull_age", "legitimacy_epochs": "lifecycle and max_epochs",
    "typical_loss_delta_std": "task", "compute_rent_weight": "task", "baseline_loss": "task", "target_loss": "task",
}


@dataclass(frozen=True)
class RewardConfig:
    """The reward a run pays and every constant of it, each default written once (defaults: cifar10, the
    reference's cull age of 1 epoch).

    Three kinds of field: the settings of `REWARD_SETTINGS` (which family and mode, the sparse reward's
    constants), a run's keys `reward.NAME`; those of `REWARD_FROM_RUN` (`gamma`, `min_cull_age`, `legitimacy_epochs` and
    the task's loss scale), taken from the run (`for_run`: the run's `TrainingConfig` fills them in, so they have
    one home each: its `gamma`, its `cull_age`, its lifecycle, the task table); and the reward's constants
    (`REWARD_CONSTANTS`), a run's keys `reward.NAME` for ablations. The fields of the last two kinds are stored
    as finite floats. Frozen and hashable; importing `rl.rewards` makes it a jax pytree (family and mode static,
    every number a leaf).
    """

    # the settings a run sets (REWARD_SETTINGS)
    reward_family: RewardFamily = option(RewardFamily.CONTRIBUTION, "the reward family: `contribution`, `loss` or "
                                         "`accuracy` (the growth reward, LEARNING.md)")
    reward_mode: RewardMode = option(RewardMode.SHAPED, "the contribution reward's mode: `shaped`, `sparse` or "
                                     "`minimal` (the other families: `shaped` only)")
    param_budget: int = option(500000, "the sparse and minimal rewards' parameter budget")
    param_penalty_weight: float = option(0.1, "the sparse and minimal rewards' weight of parameters over budget")
    sparse_reward_scale: float = option(1.0, "the sparse reward's scale")
    flop_rent_weight: float = option(0.0, "the growth reward's rent per training FLOP (LEARNING.md §8): reward "
                                     "charged per epoch for each host's worth of seed FLOPs in a training step, "
                                     "so one epoch of seeds as costly as the host costs this much (0: no FLOP "
                                     "rent, the growth reward as it was)")
    # taken from the run (for_run)
    gamma: float = option(LearnerConfig.gamma, "the shaping's discount (a run: its `learner.gamma`)")
    min_cull_age: float = option(1.0, "epochs: a CULL of a younger seed pays the young-cull penalty (a run: its "
                                 "own cull age)")
    typical_loss_delta_std: float = option(_DEFAULT_TASK.typical_loss_delta_std, "the task's loss scale (a run: "
                                           "its task's)")
    compute_rent_weight: float = option(_DEFAULT_TASK.compute_rent_weight, "the task's compute rent weight (a "
                                        "run: its task's)")
    baseline_loss: float = option(_DEFAULT_TASK.baseline_loss, "the task's baseline loss (a run: its task's)")
    target_loss: float = option(_DEFAULT_TASK.target_loss, "the task's target loss (a run: its task's)")
    # the shaped contribution reward
    contribution_weight: float = option(1.0, "shaped: weight of the seed's attributed contribution")
    proxy_weight: float = option(0.3, "shaped: weight of the loss-delta proxy when no contribution is known")
    pbrs_weight: float = option(0.3, "shaped: weight of the potential-based shaping")
    rent_weight: float = option(0.5, "shaped: weight of the parameter rent")
    max_rent: float = option(8.0, "shaped: cap of the parameter rent")
    invalid_fossilize_penalty: float = option(-1.0, "FOSSILIZE of a seed that cannot be fossilized")
    cull_fossilized_penalty: float = option(-1.0, "CULL of a fossilized seed")
    germinate_with_seed_penalty: float = option(-0.3, "GERMINATE into a slot that holds a seed")
    germinate_cost: float = option(-0.02, "cost of a GERMINATE")
    fossilize_cost: float = option(-0.01, "cost of a FOSSILIZE")
    cull_cost: float = option(-0.005, "cost of a CULL")
    fossilize_base_bonus: float = option(0.5, "bonus of a legitimate FOSSILIZE")
    fossilize_contribution_scale: float = option(0.1, "FOSSILIZE bonus per unit of contribution")
    fossilize_noncontributing_penalty: float = option(-0.2, "FOSSILIZE of a seed that does not contribute")
    cull_hurting_bonus: float = option(0.3, "CULL of a seed that hurts")
    cull_acceptable_bonus: float = option(0.1, "CULL of a seed that neither helps nor hurts")
    cull_good_seed_penalty: float = option(-0.3, "CULL of a seed that helps")
    cull_hurting_threshold: float = option(-0.5, "contribution below which a seed hurts")
    improvement_safe_threshold: float = option(0.1, "improvement above which a seed is safe")
    hacking_ratio_threshold: float = option(5.0, "contribution/improvement ratio above which a seed games the "
                                            "attribution")
    attribution_sigmoid_steepness: float = option(10.0, "steepness of the attribution's sigmoid")
    terminal_acc_weight: float = option(0.05, "weight of the terminal accuracy")
    fossilize_terminal_scale: float = option(3.0, "terminal bonus per fossilized seed")
    # (1) attribution details
    ratio_penalty_min_contribution: float = option(1.0, "attribution: the ratio penalty ρ applies when c > this")
    ratio_penalty_max: float = option(0.3, "attribution: ρ is at most this in size")
    ratio_penalty_slope: float = option(0.1, "attribution: ρ's slope")
    ratio_penalty_contribution_scale: float = option(10.0, "attribution: ρ's contribution scale")
    unknown_progress_factor: float = option(0.5, "attribution: progress P unknown -> a = this·c")
    # (2) blending warning: −0.1 − min(0.05·eis, 0.3)
    blending_warning_base: float = option(-0.1, "blending warning −0.1 − min(0.05·eis, 0.3): its base")
    blending_warning_per_epoch: float = option(0.05, "blending warning: per epoch in stage")
    blending_warning_max: float = option(0.3, "blending warning: its cap")
    # (3) probation indecision: max(−3^(eis−2), −10) from eis 2
    probation_base: float = option(3.0, "probation indecision max(−3^(eis−2), −10) from eis 2: its base")
    probation_grace_epochs: float = option(2.0, "probation indecision: epochs in stage before it applies")
    probation_max_penalty: float = option(10.0, "probation indecision: its cap")
    # potentials: φ = Φ_stage + min(0.3·eis, 2.0)
    stage_potentials: tuple[float, ...] = option(STAGE_POTENTIALS, "potential φ = Φ_stage + min(0.3·eis, 2.0): "
                                                 "Φ_stage by SeedStage value")
    eis_potential_scale: float = option(0.3, "potential: per epoch in stage")
    eis_potential_max: float = option(2.0, "potential: cap of the epochs-in-stage term")
    # fossilize shaping (I < 0 branch) and legitimacy
    fossilize_regression_base: float = option(-0.5, "FOSSILIZE of a regressing seed (I < 0): base")
    fossilize_regression_scale: float = option(0.2, "FOSSILIZE of a regressing seed: per unit of regression")
    fossilize_regression_max: float = option(1.0, "FOSSILIZE of a regressing seed: cap")
    fossilize_ransomware_contribution: float = option(0.1, "ransomware: contribution above which, with "
                                                      "improvement below the next, a seed holds the host hostage")
    fossilize_ransomware_improvement: float = option(-0.2, "ransomware: improvement below which")
    fossilize_ransomware_penalty: float = option(-0.3, "FOSSILIZE of a ransomware seed")
    min_fossilize_contribution: float = option(MIN_FOSSILIZE_CONTRIBUTION, "contribution a FOSSILIZE needs")
    legitimacy_epochs: float = option(float(MIN_PROBATION_EPOCHS), "epochs of probation before a FOSSILIZE is "
                                      "legitimate (a run: its lifecycle's, BEHAVIOUR §2.14)")
    # cull shaping
    cull_empty_penalty: float = option(-0.2, "CULL of an empty slot")
    cull_young_penalty: float = option(-0.3, "CULL of a seed younger than `min_cull_age`")
    cull_good_seed_scale: float = option(0.05, "CULL of a helping seed: per unit of contribution")
    cull_max_penalty: float = option(-0.9, "CULL: the largest penalty")
    # sparse and minimal
    early_cull_penalty: float = option(-0.1, "sparse and minimal: CULL of a seed younger than `early_cull_age`")
    early_cull_age: float = option(5.0, "sparse and minimal: the early-cull age in epochs")
    # the loss family
    loss_delta_weight: float = option(5.0, "loss: weight of the normalised loss delta")
    max_loss_delta: float = option(5.0, "loss: cap of the normalised loss delta")
    regression_penalty_scale: float = option(0.5, "loss: scale of a loss regression")
    max_rent_penalty: float = option(5.0, "loss: cap of the compute rent")
    grace_epochs: float = option(3.0, "loss: epochs of a seed before it pays rent")
    stage_potential_weight: float = option(0.1, "loss: weight of the stage potential")
    terminal_loss_weight: float = option(1.0, "loss: weight of the terminal loss")
    # loop-level terms
    governor_punishment: float = option(-GOVERNOR_DEATH_PENALTY, "a governor rollback's penalty")
    auto_cull_penalty: float = option(-0.2, "per seed the lifecycle auto-culled, charged to the env's next step")
    # the growth reward (LEARNING.md)
    growth_accuracy_weight: float = option(0.1, "growth: reward per pp of committed accuracy")
    growth_commit_weight: float = option(0.5, "growth: the share of an unfossilized seed's contribution held "
                                         "back until it is fossilized")
    growth_rent_weight: float = option(0.01, "growth: the parameter rent")
    growth_rollback_penalty: float = option(-1.0, "growth: the rollback penalty")

    def __post_init__(self) -> None:
        _store(self, "reward_family", check.enum("reward_family", RewardFamily, self.reward_family))
        _store(self, "reward_mode", check.enum("reward_mode", RewardMode, self.reward_mode))
        _store(self, "param_budget", check.at_least_one("param_budget", self.param_budget))
        check.positive("sparse_reward_scale", self.sparse_reward_scale)
        check.non_negative("param_penalty_weight", self.param_penalty_weight)
        check.non_negative("flop_rent_weight", self.flop_rent_weight)
        reward_fn_name(self.reward_family, self.reward_mode)
        for f in fields(self):
            if f.name not in REWARD_SETTINGS and f.name != "stage_potentials":
                _store(self, f.name, check.number(f"reward.{f.name}", getattr(self, f.name)))
        _store(self, "stage_potentials", _stage_potentials(self.stage_potentials))

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


# The reward's constants: every field neither a setting nor given by the run.
REWARD_CONSTANTS: tuple[str, ...] = tuple(f.name for f in fields(RewardConfig)
                                          if f.name not in REWARD_SETTINGS and f.name not in REWARD_FROM_RUN)


def _stage_potentials(value: Any) -> tuple[float, ...]:
    """Φ_stage as a tuple of finite floats, one per SeedStage value."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != len(STAGE_POTENTIALS):
        raise ValueError(f"reward.stage_potentials must be a list of {len(STAGE_POTENTIALS)} numbers, one per "
                         f"SeedStage value (got {value!r})")
    return tuple(check.number("reward.stage_potentials", v) for v in value)


# ------------------------------------------------------------------------------------------
# The heuristic (BEHAVIOUR §13.1)
# ------------------------------------------------------------------------------------------


def default_rotation(menu: Sequence[str]) -> tuple[str, ...]:
    """The heuristic's default blueprint rotation: the run's blueprint menu without noop (its first entry)."""
    return tuple(name for name in menu if name != "noop")


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
    """The rule-based controller's thresholds (BEHAVIOUR §13.1)."""

    plateau_epochs_to_germinate: int = option(3, "epochs without improvement before it germinates")
    min_epochs_before_germinate: int = option(5, "epochs of the episode before its first germination")
    cull_after_epochs_without_improvement: int = option(5, "a seed's epochs without improvement before its cull")
    cull_if_accuracy_drops_by: float = option(2.0, "pp of accuracy a seed may cost before its cull")
    min_improvement_to_fossilize: float = option(0.0, "pp of improvement a seed needs to be fossilized")
    embargo_epochs_after_cull: int = option(5, "epochs a slot waits after a cull")
    blueprint_penalty_on_cull: float = option(2.0, "penalty a blueprint takes when its seed is culled")
    blueprint_penalty_decay: float = option(0.5, "multiplier of the blueprint penalties per epoch; entries < 0.1 "
                                            "are deleted")
    blueprint_penalty_threshold: float = option(3.0, "a blueprint penalised above this is skipped")
    blend: str = option("sigmoid", "the blend of its seeds", metavar="NAME")
    tempo: str = option("standard", "the blend's tempo (BEHAVIOUR §2.14): the reference's own, a fixed choice",
                        metavar="NAME")
    ransomware_contribution_threshold: float = option(0.1, "pp of contribution above which, with improvement "
                                                      "below the next, a seed is not fossilized")
    ransomware_improvement_threshold: float = option(0.0, "pp of improvement below which")
    blueprint_rotation: tuple[str, ...] | None = option(None, "the blueprints it germinates in turn (default: the "
                                                        "run's blueprint menu without noop)", metavar="NAME")
    wait_for_stable_host: bool = option(True, "GERMINATE waits for the host's stabilisation latch, as the "
                                        "reference (BEHAVIOUR §8.5); off: the other conditions alone decide")
    min_fit_gap: float | None = option(None, "GERMINATE also waits until the epoch's training accuracy exceeds its "
                                       "validation accuracy by this many pp, once the host fits its data (the fit "
                                       "gap, BEHAVIOUR §8.7; FRAGrow); default: no such wait, as the reference")

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
        check.boolean("heuristic.wait_for_stable_host", self.wait_for_stable_host)
        if self.min_fit_gap is not None:
            _store(self, "min_fit_gap", check.number("heuristic.min_fit_gap", self.min_fit_gap))

    def rotation(self, menu: Sequence[str]) -> tuple[str, ...]:
        return self.blueprint_rotation or default_rotation(menu)

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

SECOND_SEED_FIELDS = ("then_slot", "then_blueprint")  # OracleConfig's second seed: set both or neither


@dataclass(frozen=True)
class OracleConfig:
    """Germinate `blueprint` with blend `blend` at `tempo` in `slot` at epoch `germinate_epoch`, fossilize at
    the first epoch it is allowed, never cull. The defaults are the quickstart's (shapes16) best fixed schedule.
    With `then_slot` and `then_blueprint` (both or neither), a second seed: `then_blueprint` in `then_slot`, with
    the same blend and tempo, germinated once, at the first epoch after `germinate_epoch` at which the masks
    allow a germination in `then_slot`, and fossilized as the first is. Unset, they are left out of `to_dict`,
    so a one-seed schedule's JSON (and every key computed from it) is the one earlier versions wrote."""

    slot: str = option("r0c0", "the slot it germinates in", metavar="SLOT")
    blueprint: str = option("conv_light", "the blueprint it germinates", metavar="NAME")
    blend: str = option("sigmoid", "the seed's blend", metavar="NAME")
    germinate_epoch: int = option(1, "the epoch it germinates at")
    tempo: str = option("standard", "the blend's tempo", metavar="NAME")
    then_slot: str | None = option(None, "a second seed's slot, germinated at the first epoch after "
                                   "`germinate_epoch` the masks allow it there, with the same blend and tempo, "
                                   "fossilized as the first (default: no second seed)", metavar="SLOT")
    then_blueprint: str | None = option(None, "the second seed's blueprint (set with `then_slot`)", metavar="NAME")

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
        self._check_second_seed()

    def _check_second_seed(self) -> None:
        """`then_slot` and `then_blueprint`: both strings or both None, the slot another than `slot`."""
        for name in SECOND_SEED_FIELDS:
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise ValueError(f"oracle.{name} must be a string or null (got {getattr(self, name)!r})")
        if (self.then_slot is None) != (self.then_blueprint is None):
            missing = "then_blueprint" if self.then_blueprint is None else "then_slot"
            raise ValueError(f"oracle.{missing} must be set with oracle.then_slot and oracle.then_blueprint "
                             f"together (got then_slot {self.then_slot!r}, then_blueprint {self.then_blueprint!r})")
        if self.then_slot is not None and self.then_slot == self.slot:
            raise ValueError(f"oracle.then_slot {self.then_slot!r} is the first seed's slot: the second seed "
                             f"needs another slot")

    @property
    def two_seeds(self) -> bool:
        """Whether the schedule grows a second seed."""
        return self.then_slot is not None

    def check_against(self, enabled_slots: Sequence[str], menu: Sequence[str], max_epochs: int) -> None:
        """The schedule must name an enabled slot and a menu blueprint, inside the episode."""
        if self.slot not in enabled_slots:
            raise ValueError(f"oracle.slot {self.slot!r} is not an enabled slot {list(enabled_slots)}")
        if self.blueprint == "noop" or self.blueprint not in menu:
            raise ValueError(f"oracle.blueprint {self.blueprint!r} is not in the blueprint menu {list(menu[1:])}")
        if self.germinate_epoch > max_epochs:
            raise ValueError(f"oracle.germinate_epoch {self.germinate_epoch} is after the episode's last epoch "
                             f"({max_epochs})")
        if self.then_slot is not None and self.then_slot not in enabled_slots:
            raise ValueError(f"oracle.then_slot {self.then_slot!r} is not an enabled slot {list(enabled_slots)}")
        if self.then_blueprint is not None and (self.then_blueprint == "noop" or self.then_blueprint not in menu):
            raise ValueError(f"oracle.then_blueprint {self.then_blueprint!r} is not in the blueprint menu "
                             f"{list(menu[1:])}")

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON; the second seed's only when set (the one-seed JSON of earlier versions)."""
        return {k: v for k, v in dataclasses.asdict(self).items()
                if not (k in SECOND_SEED_FIELDS and v is None)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "OracleConfig":
        return section_from_dict(cls, "oracle", d)


# ------------------------------------------------------------------------------------------
# REINFORCE with a learned baseline (`rl.reinforce`, the `reinforce` controller)
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReinforceConfig:
    """The `reinforce` controller's hyperparameters: an MLP actor-critic trained by one policy-gradient step per
    batch on Monte Carlo returns, the value head as its baseline (`rl.reinforce`)."""

    hidden_dim: int = option(64, "width of the policy's MLP core")
    lr: float = option(1e-3, "Adam's learning rate")
    value_coef: float = option(0.5, "weight c_v of the baseline's loss (G − b)²")
    entropy_coef: float = option(0.01, "weight c_e of the entropy bonus (mean normalised entropy of the heads "
                                 "that acted)")
    max_grad_norm: float = option(1.0, "global gradient norm clip")

    def __post_init__(self) -> None:
        _store(self, "hidden_dim", check.at_least_one("reinforce.hidden_dim", self.hidden_dim))
        check.at_most("reinforce.hidden_dim", self.hidden_dim, PPO_SIZE_LIMITS["lstm_hidden_dim"])
        for name in ("lr", "max_grad_norm"):
            check.positive(f"reinforce.{name}", getattr(self, name))
        for name in ("value_coef", "entropy_coef"):
            check.non_negative(f"reinforce.{name}", getattr(self, name))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ReinforceConfig":
        return section_from_dict(cls, "reinforce", d)
