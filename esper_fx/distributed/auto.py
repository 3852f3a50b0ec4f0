"""`--env-workers auto` (the default, issue 28): how many Ray env workers a run uses, decided at its start.

    choice = choose_workers(config)       # WorkerChoice(n=2, why="2 usable cores, 4 envs")
    choice = choose_eval_workers(config, n_episodes=48)   # evaluation episodes at a time (prove)

A pure rule over the run's facts (`auto_workers`), so it is tested without Ray and without the machine:

- an explicit number is kept (0: the in-process pool; N: N Ray actors, and a failure to start Ray is an error);
- `auto` joins a cluster given by `ray_address` with one actor per env (the cluster places them);
- otherwise `auto` stays in this process when the machine has one usable core, when the run has one env,
  when the envs run on CUDA (one GPU already runs every env of the in-process pool, each on its own
  stream; Ray actors would only queue on it), or when the run is too small to pay Ray's start-up
  (`RAY_MIN_ENV_EPOCHS`);
- else `min(n_envs, usable cores)` actors: the driver's share of an epoch is small (its serial part, see
  docs/PERFORMANCE.md), so it shares a core with a worker rather than leaving one idle.

When `auto` chose Ray and Ray cannot start (not installed, or its start fails, e.g. a container without a
usable /dev/shm), the run falls back to the in-process pool with one line (`fallback_line`), never a crash.
Imports neither torch, jax nor ray when loaded: whether the envs run on CUDA is asked of `esper_fx.devices`
(torch) when `auto` decides.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from esper_fx.config import AUTO, TrainingConfig

# Below this many env-epochs (episodes × epochs) `auto` keeps a run in process. Starting a local Ray with two
# quickstart actors ready took 5.0 s on the project's 2-core machine at load average 1.0, and 22 s while its
# cores were busy with other jobs (load 3.8). Two workers save at most about 43% of an env-epoch (1.74×,
# bench `ray`, idle): some 0.14 s of a quickstart env-epoch's 0.33 s in process. A run so pays Ray's
# start-up back after about 40 env-epochs (5 s) to 160 (22 s); 256 keeps a margin above both (a quickstart
# run has 96 × 12 = 1152; the test suite's runs have a few dozen at most).
RAY_MIN_ENV_EPOCHS = 256
SPEED_HINT = "pip install -e . installs Ray; --env-workers 0 keeps the envs in process without this line"


class WorkerChoice(NamedTuple):
    """How many Ray workers (0: the in-process pool) and why, for the start-up banner."""

    n: int
    why: str
    auto: bool  # chosen by `auto` (a Ray failure then falls back to the in-process pool)

    def describe(self) -> str:
        where = "in this process" if self.n == 0 else f"{self.n} Ray worker{'s' * (self.n != 1)}"
        return f"{where} ({'auto: ' if self.auto else ''}{self.why})"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. a container's or taskset's share), else
    the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def auto_workers(n_units: int, env_epochs: int, cores: int, on_cuda: bool, cluster: bool) -> WorkerChoice:
    """The rule of `auto` over the run's facts: `n_units` envs (or evaluation episodes), the run's
    env-epochs, the usable cores, whether the envs run on CUDA, and whether a cluster was named."""
    if cluster:
        return WorkerChoice(max(1, n_units), "one per env on the cluster", True)
    if cores <= 1:
        return WorkerChoice(0, "1 usable core", True)
    if n_units <= 1:
        return WorkerChoice(0, "1 env", True)
    if on_cuda:
        return WorkerChoice(0, "the envs run on CUDA and share the GPU through streams", True)
    if env_epochs < RAY_MIN_ENV_EPOCHS:
        return WorkerChoice(0, f"{env_epochs} env-epochs, fewer than the {RAY_MIN_ENV_EPOCHS} that pay Ray's "
                               f"start-up", True)
    n = min(n_units, cores)
    return WorkerChoice(n, f"{cores} usable cores, {n_units} envs", True)


def choose_workers(config: TrainingConfig, cores: int | None = None) -> WorkerChoice:
    """The training run's env workers: its explicit `env_workers`, or `auto`'s choice."""
    if config.env_workers != AUTO:
        return WorkerChoice(int(config.env_workers), f"--env-workers {config.env_workers}", False)
    from esper_fx.devices import envs_on_cuda  # (torch loads when `auto` decides, not when this is imported)

    return auto_workers(config.n_envs, config.n_episodes * config.max_epochs, cores or usable_cores(),
                        envs_on_cuda(config), config.ray_address is not None)


def choose_eval_workers(config: TrainingConfig, n_episodes: int, cores: int | None = None) -> WorkerChoice:
    """How many evaluation episodes (one env each) run at a time as Ray tasks (0: in this process, one
    after another): an explicit `env_workers`, or under `auto` every usable core."""
    if config.env_workers != AUTO:
        return WorkerChoice(int(config.env_workers), f"--env-workers {config.env_workers}", False)
    from esper_fx.devices import envs_on_cuda  # (as in choose_workers)

    cores = cores or usable_cores()
    choice = auto_workers(n_episodes, n_episodes * config.max_epochs, cores, envs_on_cuda(config),
                          config.ray_address is not None)
    if choice.n and config.ray_address is None:
        return choice._replace(n=cores, why=f"{cores} usable cores, {n_episodes} episodes")
    return choice


def fallback_line(reason: BaseException | str) -> str:
    """The one line a run prints when `auto` chose Ray and Ray could not start."""
    text = " ".join(str(reason).split())[:300] or type(reason).__name__
    return f"env workers: Ray could not start ({text}); the envs run in this process instead ({SPEED_HINT})"
