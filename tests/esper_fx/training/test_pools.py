"""The three env pools the loop can drive are one `contracts.pool.EpisodePool`: the same members, the same
verb (`begin`) to start a batch of episodes, the same parameter names."""

import inspect

import pytest

from esper_fx.config import TrainingConfig
from esper_fx.contracts.pool import EpisodePool
from esper_fx.contracts.signals import signal_columns
from esper_fx.training.bridged_pool import BridgedPool
from esper_fx.distributed.pool import RayEnvPool
from esper_fx.training.pools import pool_settings, pool_workers, worker_time
from hosts.env import EnvPool

POOLS = (EnvPool, RayEnvPool, BridgedPool)
METHODS = ("begin", "step", "prefetch", "episode_results", "wait_ready", "close")


@pytest.mark.parametrize("cls", POOLS, ids=lambda c: c.__name__)
def test_every_pool_has_the_protocols_methods_with_its_parameter_names(cls):
    for name in METHODS:
        expected = list(inspect.signature(getattr(EpisodePool, name)).parameters)
        assert list(inspect.signature(getattr(cls, name)).parameters) == expected, (cls.__name__, name)
    assert not hasattr(cls, "reset")  # one verb starts a batch: begin


def test_the_in_process_pool_and_the_bridge_around_it_are_episode_pools():
    config = TrainingConfig(task="shapes10", n_envs=1, max_epochs=2, device="cpu", synthetic_train_samples=64,
                            synthetic_test_samples=16, batch_size_per_env=16, max_train_batches=1)
    pool = EnvPool(pool_settings(config))
    bridged = BridgedPool(pool, signal_columns(config.num_slots, config.num_blueprints, config.state_dim))
    assert isinstance(pool, EpisodePool) and isinstance(bridged, EpisodePool)
    assert bridged.steps_per_epoch == pool.steps_per_epoch == 1
    assert not isinstance(object(), EpisodePool)


def test_a_ray_pool_is_an_episode_pool_once_built():
    ray_pool = object.__new__(RayEnvPool)  # (building one starts Ray actors: tests/esper_fx/distributed/test_ray_pool.py)
    assert not isinstance(ray_pool, EpisodePool)  # steps_per_epoch comes from the workers once they are up
    ray_pool._workers = [{"steps_per_epoch": 1}]
    ray_pool.n_workers, ray_pool.stats, ray_pool.phase_s = 1, {}, {}  # (what __init__ sets)
    assert isinstance(ray_pool, EpisodePool) and ray_pool.steps_per_epoch == 1


def test_the_in_process_pool_has_every_member_the_run_reads_with_nothing_to_say():
    config = TrainingConfig(task="shapes10", n_envs=1, max_epochs=2, device="cpu", synthetic_train_samples=64,
                            synthetic_test_samples=16, batch_size_per_env=16, max_train_batches=1)
    pool = EnvPool(pool_settings(config))
    bridged = BridgedPool(pool, signal_columns(config.num_slots, config.num_blueprints, config.state_dim))
    for each in (pool, bridged):
        assert each.n_workers == 0 and each.stats == {}
        assert set(each.phase_s) == {"build_s", "train_s", "validate_s"}
        assert each.wait_ready() is None and each.prefetch(0) is None and each.close() is None
    assert pool_workers(bridged) == 0 and worker_time(bridged) == {}


def test_the_pool_protocol_names_every_member_the_run_uses():
    members = set(EpisodePool.__annotations__) | {n for n in vars(EpisodePool) if callable(getattr(EpisodePool, n))
                                                   and not n.startswith("_")}
    assert members == {"steps_per_epoch", "n_workers", "phase_s", "stats", *METHODS}


def test_the_next_batch_runs_the_envs_the_episodes_left_allow():
    from esper_fx.training.batch import batch_envs

    config = TrainingConfig(task="shapes10", n_envs=3, n_episodes=5, device="cpu")
    assert [batch_envs(config, done) for done in (0, 3, 5, 6)] == [3, 2, 0, 0]
