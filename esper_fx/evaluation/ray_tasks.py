"""Evaluation episodes as Ray tasks (issue 15): `prove` and `compare` fan their (arm, seed) episodes out.

    episodes = remote_run_arm(arm, seeds, workers=4, on_episode=print)   # = evaluate.run_arm(arm, seeds)

Each episode is one Ray task running `episodes.Arm.run(seed)` in a worker process: the arm (its config,
its frozen controller, the trained policy) travels pickled, its jitted step is rebuilt in the worker, and
the worker uses the driver's torch thread count, so every per-seed number equals the serial run's (only
`wall_s` differs). At most `workers` episodes run at once; `on_episode` sees them in seed order.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import torch

from esper_fx.devices import envs_on_cuda
from esper_fx.evaluation.episodes import Arm, Episode
from esper_fx.distributed.pool import get_or_explain
from esper_fx.distributed.runtime import require_ray
from esper_fx.distributed.worker import one_gpu_config
from esper_fx.stopping import raise_pending, stops_kept


def run_episode(arm: Arm, seed: int, torch_threads: int, gpu: bool = False) -> Episode:
    """The task body: one evaluation episode, with the driver's torch thread count. A task given a GPU
    sees it as cuda:0 whatever the config names (cuda:1 on the driver), so its devices are renamed."""
    torch.set_num_threads(torch_threads)
    return task_arm(arm, gpu).run(seed)


def task_arm(arm: Arm, gpu: bool) -> Arm:
    """The arm with its devices as a task with one GPU (`gpu`) or none sees them."""
    return dataclasses.replace(arm, config=one_gpu_config(arm.config, gpu))


def remote_run_arm(arm: Arm, seeds: Sequence[int], on_episode: Callable[[Episode], None] | None = None, *,
                   workers: int) -> list[Episode]:
    """Every seed of `arm` as a Ray task, at most `workers` at a time; the episodes in seed order. Ray must
    be initialised (`distributed.runtime.RaySession`)."""
    return remote_run_arms([arm], seeds, on_episode, workers=workers)[0]


def remote_run_arms(arms: Sequence[Arm], seeds: Sequence[int], on_episode: Callable[[Episode], None] | None = None,
                    *, workers: int) -> list[list[Episode]]:
    """Every (arm, seed) pair as a Ray task, at most `workers` at a time (the best_fixed search's schedules
    share the cores this way); per arm its episodes in seed order, `on_episode` seeing them in that order."""
    ray = require_ray()
    seeds = [int(s) for s in seeds]
    jobs = [(a, s) for a in range(len(arms)) for s in seeds]
    refs = [ray.put(arm) for arm in arms]
    gpus = [envs_on_cuda(arm.config) for arm in arms]
    tasks = {gpu: ray.remote(run_episode).options(num_cpus=1, num_gpus=1 if gpu else 0, max_retries=0)
             for gpu in set(gpus)}
    threads = torch.get_num_threads()
    todo, pending, done, reported = list(jobs), {}, {}, 0
    while todo or pending:
        while todo and len(pending) < max(1, workers):
            a, seed = todo.pop(0)
            pending[tasks[gpus[a]].remote(refs[a], seed, threads, gpus[a])] = (a, seed)
        raise_pending()  # a safe point (`stopping.raise_pending`)
        with stops_kept():  # (Ray turns a SIGTERM's Stop into a plain KeyboardInterrupt)
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)  # (a held stop waits at most 1 s)
        for ref in ready:
            a, seed = pending.pop(ref)
            done[a, seed] = get_or_explain(ray, ref, f"evaluation episode {arms[a].name!r} seed {seed}")
        while reported < len(jobs) and jobs[reported] in done:
            if on_episode is not None:
                on_episode(done[jobs[reported]])
            reported += 1
    return [[done[a, s] for s in seeds] for a in range(len(arms))]
