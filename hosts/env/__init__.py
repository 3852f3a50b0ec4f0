"""The env pool: E environments in lock-step, one RL step per host epoch (BEHAVIOUR §7.2–§7.5).

    pool.py              EnvPool: begin(b) / step(actions), and the epoch's phases underneath (the orchestration)
    build.py             one env built for an episode: host and slots, optimizer, governor, tracker, RNG, static seeds
    state.py             per-env state (model, optimizers, governor, tracker, RNG, counters) and results
    epoch_compute.py     the device work of one env epoch: training steps, fused validation, the epoch's one
                         readback; the CUDA streams it runs on and the orderings between them
    after_validation.py  what an env records from its readback: governor and rollback, contributions, gradient
                         ratios, tracker
    compute.py           FLOPs of one env's training, host and seeds per stage
    lr_schedule.py       the host network's learning rate within an episode
    actions.py           the actions checked ([E, 5] numpy integers) and executed, every slot stepped at the
                         end of an epoch
"""

from hosts.env.pool import EnvPool
from hosts.env.state import ApplyResult, EpisodeResult, LifecycleEvent

__all__ = ["EnvPool", "ApplyResult", "EpisodeResult", "LifecycleEvent"]
