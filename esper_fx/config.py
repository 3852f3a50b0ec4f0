"""`TrainingConfig`: the declaration of a run's settings, each with its default and its help (BEHAVIOUR §14).

The settings the hosts read are declared in `esper_fx.contracts.run_settings.HostSettings` (inherited here and
by `hosts.settings.PoolSettings`); the run's others below. The controller side's settings live with the
controller code and are nested, each one JSON object under its name (`ppo.lr` on the command line): the groups
`config.learner` (`rl.config.LearnerConfig`: what every learning controller reads), `config.ppo`
(`rl.config.PPOConfig`) and `config.reward` (`rl.config.RewardConfig`), and the sections (`SECTIONS`)
`config.heuristic`, `config.oracle` and `config.reinforce` (`rl.config.HeuristicConfig`, `OracleConfig`,
`ReinforceConfig`), each default written once, there, with its help
(`option`: the command line is built from it). `config.reward` also carries the values a run gives the reward
(its gamma, its min_cull_age, its lifecycle's legitimacy, its task's loss scale), filled in here so each keeps
one home: a key `reward.gamma` is refused, naming the run's setting.

The other jobs live in `esper_fx/configuration/`, one a file: `choices.py` (the named choices, what earlier
versions accepted), `checks.py` (coercion and validation), `facts.py` (what follows from the settings:
`config.menu`, `config.cull_age`, ...), `keys.py` (the keys on disk and on the command line, JSON both ways,
presets, saved configs of earlier versions). Their public names are importable from here.

Imports neither torch nor jax, so the CLI can reject a bad configuration instantly.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from esper_fx.configuration.checks import (
    DATA_SIZE_LIMITS, ENV_DEVICE, POLICY_DEVICE, SEED_MAX, SEED_MIN, SIZE_LIMITS, check_config,
)
from esper_fx.configuration.choices import AUTO, RETIRED_FIELDS, RETIRED_TELEMETRY_LEVELS, TelemetryLevel, WandbMode
from esper_fx.configuration.facts import DerivedFacts, absolute_paths
from esper_fx.configuration.keys import (
    GROUP_FIELDS, GROUP_KEYS, GROUP_OF_KEY, GROUPS, MOVED_KEYS, OLD_KEYS, ConfigFile, flat_view, nest, old_keys,
    old_spellings_note, read_config_json, refuse_unsettable, sections_of, upgrade_saved,
)
from esper_fx.contracts.run_settings import (
    SEED_OPTIMIZER_STATES, AmpDtype, DataPath, DataSplit, HostSettings, Task, option,
)
from esper_fx.controller_names import NAMES
from esper_fx.presets import PRESET_NAMES
from rl.config import (
    HeuristicConfig, LearnerConfig, OracleConfig, PPOConfig, ReinforceConfig, RewardConfig, RewardFamily, RewardMode,
)

__all__ = [
    "TrainingConfig", "HeuristicConfig", "LearnerConfig", "OracleConfig", "PPOConfig", "ReinforceConfig", "RewardConfig", "Task",
    "DataSplit", "DataPath", "AmpDtype", "RewardFamily", "RewardMode", "TelemetryLevel", "WandbMode", "PRESET_NAMES",
    "HostSettings", "AUTO", "SECTIONS", "GROUPS", "GROUP_FIELDS", "GROUP_KEYS", "GROUP_OF_KEY", "OLD_KEYS",
    "MOVED_KEYS", "RETIRED_FIELDS",
    "RETIRED_TELEMETRY_LEVELS", "SEED_OPTIMIZER_STATES", "SEED_MIN", "SEED_MAX", "POLICY_DEVICE", "ENV_DEVICE",
    "SIZE_LIMITS", "DATA_SIZE_LIMITS", "RESUME_OVERRIDABLE",
    "absolute_paths", "refuse_unsettable", "upgrade_saved", "flat_view", "old_keys", "old_spellings_note",
    "read_config_json",
]


def _codes(names: Any) -> str:
    return ", ".join(f"`{name}`" for name in names)


@dataclass(frozen=True, init=False)
class TrainingConfig(HostSettings, DerivedFacts, ConfigFile):
    """A run's settings: the hosts' (`HostSettings`), then the run's own below; validated when built
    (`esper_fx.configuration.checks`), frozen, and a JSON object on disk (`esper_fx.configuration.keys`)."""

    # run
    controller: str = option("ppo_lstm", f"the seed controller: {_codes(NAMES.names())} (`oracle` is a fixed "
                             "growth schedule, `config.oracle`; `ppo` stands for `ppo_lstm`)", metavar="NAME")
    n_episodes: int = option(100, "total episodes (batches of `n_envs`)", flag="--episodes", resume=True)
    n_envs: int = option(4, "environments per batch")
    slots: tuple[str, ...] = option(("r0c1",), "enabled slots, e.g. `r0c0 r0c1`", metavar="SLOT")
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
    # devices and data
    device: str = option("auto", "policy device: `auto`, `cpu` or `cuda:N` (`cuda` is `cuda:0`)", metavar="DEV",
                         resume=True)
    env_devices: tuple[str, ...] | None = option(None, "env devices: env i runs on `DEV[i % len]`", flag="--devices",
                                                 metavar="DEV", resume=True)
    env_workers: int | str = option(AUTO, "run the envs in N Ray actors; `auto` (default): as many as the usable "
                                    "cores and the envs allow, in this process on one core, one env, CUDA envs "
                                    "or a run too small to pay Ray's start-up, decided at the run's start "
                                    "(`esper_fx.distributed.auto`) and kept as `auto` in config.json; `0`: in this "
                                    "process; each actor runs a contiguous slice of the envs",
                                    metavar="N|auto", resume=True)
    ray_address: str | None = option(None, "join the Ray cluster at ADDR (default: start, and stop, a local Ray "
                                     "for the run)",
                                     metavar="ADDR", resume=True)
    # policy
    blueprint_menu: tuple[str, ...] | None = option(None, "the blueprint head's menu, `noop` first (default: the "
                                                    "topology's)", metavar="NAME")
    # the controller side
    learner: LearnerConfig = option(factory=LearnerConfig, help="what every learning controller reads: the "
                                    "discount (also the reward's shaping), GAE's λ, the last epoch's bootstrap")
    ppo: PPOConfig = option(factory=PPOConfig, help="the PPO/LSTM controller's hyperparameters (BEHAVIOUR §11.1)")
    reward: RewardConfig = option(factory=RewardConfig, help="the reward (BEHAVIOUR §12): its settings and "
                                  "constants are set here; its gamma (`learner.gamma`), min_cull_age, the fossilize "
                                  "legitimacy and the task's scale come from the run")
    discard_rolled_back_envs: bool = option(False, "drop the envs a governor rolled back from the PPO batch")
    # telemetry
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


    def __init__(self, **values: Any) -> None:
        """Keyword arguments only: any field (a group, `ppo` or `reward`, as its dataclass or a mapping of its
        keys), or a keyword of a group's field (`lr=...`, `reward_mode=...`, `**{"reward.probation_base": 4}`;
        `GROUP_KEYS`)."""
        for name, value in nest(type(self), values).items():
            object.__setattr__(self, name, value)
        self.__post_init__()

    def __post_init__(self) -> None:
        check_config(self)
        object.__setattr__(self, "reward", self.reward.for_run(self.task, self.learner.gamma, self.cull_age,
                                                               self.lifecycle_timings.legitimacy))

    def replace(self, **changes: Any) -> "TrainingConfig":
        """A validated copy with some fields (or group keywords, `GROUP_KEYS`) changed."""
        return TrainingConfig(**{**{f.name: getattr(self, f.name) for f in fields(self)}, **changes})


# The nested sections, read from the fields above (`config.heuristic`, `config.oracle`, `config.reinforce`):
# section name -> its config class.
SECTIONS: Mapping[str, type] = sections_of(TrainingConfig)
# On resume the checkpoint's config is authoritative; only these fields may differ (declared with `resume=True`;
# BEHAVIOUR §7.8).
RESUME_OVERRIDABLE: tuple[str, ...] = tuple(f.name for f in fields(TrainingConfig) if f.metadata.get("resume"))
