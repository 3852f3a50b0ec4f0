"""The env pool: E environments in lock-step, one RL step per host epoch (BEHAVIOUR §7.2–§7.5).

    pool.py           EnvPool: begin(b) / step(actions), and the epoch's phases underneath
    state.py          per-env state (model, optimizers, governor, tracker, RNG, counters) and results
    epoch_compute.py  the device work of one env epoch: training steps, fused validation, readback
    actions.py        decoding and executing actions, stepping every slot at the end of an epoch
    pool_data.py      the pool's view of the data feed, one epoch at a time
"""

from hosts.env.pool import EnvPool
from hosts.env.state import ApplyResult, EpisodeResult, LifecycleEvent

__all__ = ["EnvPool", "ApplyResult", "EpisodeResult", "LifecycleEvent"]
