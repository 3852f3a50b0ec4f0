"""The run's settings that the hosts read, declared once: `HostSettings`.

`esper_fx.config.TrainingConfig` (the run's whole configuration, its checks and its command line) and
`hosts.settings.PoolSettings` (what the env pool is handed, picklable for Ray) both inherit these fields,
so a setting the hosts read is declared here, once, with its default and its help; `hosts` may import
nothing of `esper_fx` but these contracts. `option` is how every setting of the project is declared (the
run's, here and in `esper_fx.config`; the controller side's, in `rl.config`).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field
from enum import StrEnum
from typing import Any

from esper_fx.contracts.tasks import DEFAULT_DATA_ROOT, TASK_NAMES


def option(default: Any = MISSING, help: str = "", *, factory: Any = MISSING, flag: str | None = None,
           metavar: str | None = None, resume: bool = False) -> Any:
    """A setting declared with its command-line facts, in one place (`esper_fx.cli.parser` builds the flags,
    `--help` and docs/CLI.md's table from them): `default` (or `factory` for a nested config), `help` (markdown),
    `flag` (its spelling when not the one derived from its name), `metavar`, and `resume` (the value may
    change when a run is resumed; every other field must equal the checkpoint's)."""
    meta = {"help": help, "flag": flag, "metavar": metavar, "resume": resume}
    return field(default=default, default_factory=factory, metadata={k: v for k, v in meta.items() if v})


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


# A host-initialised seed's optimiser state at germination (`seed_optimizer_state`).
SEED_OPTIMIZER_STATES: tuple[str, ...] = ("reset", "carry")


def _codes(names: Any) -> str:
    return ", ".join(f"`{name}`" for name in names)


@dataclass(frozen=True)
class HostSettings:
    """Every setting of a run that the env pool (`hosts.env.pool.EnvPool`) and its data (`hosts.data.feed`)
    read as it is. What the hosts read resolved (devices, slots, the menu, the lifecycle's clock) is added by
    `hosts.settings.PoolSettings` and computed by `esper_fx.training.pools.pool_settings`."""

    # the run
    task: Task = option(Task.CIFAR10, f"the task: {_codes(Task)}", metavar="NAME")
    task_mix: tuple[str, ...] = option((), "tasks each episode draws one of (from its env's seed; the controller is "
                                       "not told which): host variants that read `task`'s data, e.g. `shapes16 "
                                       "shapes16_spatial shapes16_narrow`; empty: `task` alone", metavar="NAME")
    max_epochs: int = option(25, "episode length T in epochs")
    seed: int = option(42, "run seed")
    max_seeds: int | None = option(None, "at most this many seeds germinated per episode (default: no limit)")
    one_seed_at_a_time: bool = option(True, "[fix] no GERMINATE while a seed is developing (the reference: off)")
    germination_deadline: bool = option(True, "[fix] no GERMINATE once its seed could not be fossilized before T")
    static_seeds: tuple[str, ...] = option((), "`slot=blueprint`: seeds planted fossilized before epoch 1 "
                                           "(static_final)", metavar="SLOT=NAME")
    # the network's learning rate and training steps
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
    # data
    data_path: DataPath = option(DataPath.DEVICE, "device-resident data (default) or DataLoader workers",
                                 resume=True)
    num_workers: int | None = option(None, "DataLoader workers (loader path; default 4)", resume=True)
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
    # the observation
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
