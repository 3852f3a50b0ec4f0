"""The Ray pool's parts (issue 15): contiguous env slices, GPU shares, and on one local Ray started by the test a
worker's exception or data problem reaching the driver as the in-process error, and a begin sent ahead that
changes no number. Whole runs on Ray: test_ray_pool.py."""

import signal
import warnings

import numpy as np
import pytest
import torch

from esper_fx.training import pools
from esper_fx.distributed.pool import worker_slices
from tests.esper_fx.distributed.ray_runs import small

ray = pytest.importorskip("ray")


def test_worker_slices_are_contiguous_and_balanced():
    assert worker_slices(5, 2) == [range(0, 3), range(3, 5)]
    assert worker_slices(4, 4) == [range(i, i + 1) for i in range(4)]
    with pytest.raises(ValueError, match="env_workers"):
        worker_slices(2, 3)


def test_workers_share_the_gpus_so_that_every_one_is_placed():
    from esper_fx.errors import DeviceUnavailableError
    from esper_fx.distributed.pool import gpu_share

    assert [gpu_share(g, w) for g, w in ((4, 2), (2, 2), (1, 2), (2, 4), (3, 4), (2, 3))] == [1, 1, 0.5, 0.5, 0.5, 0.5]
    with pytest.raises(DeviceUnavailableError, match="no GPU"):
        gpu_share(0, 2)


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the pool tests below, started here (the pool leaves a Ray its caller started running)."""
    sigterm = signal.getsignal(signal.SIGTERM)  # ray.init installs its own handler: put ours back after
    with warnings.catch_warnings():  # Ray's fork+exec of its daemons
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False)
    yield
    ray.shutdown()
    signal.signal(signal.SIGTERM, sigterm)


def test_a_worker_exception_reaches_the_driver_with_its_traceback(local_ray):
    from esper_fx.distributed.pool import EnvWorkerError, RayEnvPool

    with RayEnvPool(pools.pool_settings(small(n_envs=2, max_epochs=2)), 2) as pool:
        signals = pool.begin(0, 2)
        assert signals["obs"].shape[0] == 2
        with pytest.raises(EnvWorkerError) as info:
            pool.step(np.array([[0, 0, 0, 0, 1], [0, 0, 0, 99, 1]], dtype=np.int32))
    message = str(info.value)
    assert message.startswith("env worker 1 (envs 1–1) raised ValueError: env 1: op index 99 is outside [0, 4)")
    assert "the worker's traceback:" in message and 'hosts/env/actions.py", line' in message
    assert "in checked_actions" in message and "\x1b[" not in message
    assert isinstance(info.value.__cause__, ValueError)
    assert ray.is_initialized()  # a Ray the caller started is left running


def test_a_data_problem_in_a_worker_or_task_is_the_in_process_line(local_ray):
    """Issue 39, item 2: a worker whose data did not fit died in its creation task ("env worker 0 died: The
    actor died because of an error raised in its creation task ...", exit 1, colour codes, cut before the
    problem) and an evaluation task raised a 72-line traceback. Both now raise the in-process DataError."""
    from esper_fx.distributed.pool import RayEnvPool
    from esper_fx.errors import DataError
    from esper_fx.evaluation.episodes import Arm
    from esper_fx.evaluation.ray_tasks import remote_run_arm

    config = small(n_envs=2, batch_size_per_env=1000)  # more than the 256 training samples hold
    with pytest.raises(DataError) as in_process:
        pools.build_pool(config.replace(env_workers=0))
    assert "fewer than one step" in str(in_process.value)
    with pytest.raises(DataError) as worker:
        RayEnvPool(pools.pool_settings(config), 2).wait_ready()
    assert str(worker.value) == str(in_process.value)
    arm = Arm.build("wait", config)
    with pytest.raises(DataError) as serial:
        arm.run(900_000)
    with pytest.raises(DataError) as task:
        remote_run_arm(arm, [900_000], workers=1)
    assert str(task.value) == str(serial.value)


def _wait_episode(pool, n: int) -> None:
    """Every epoch of the running batch with WAIT actions."""
    signals = True
    while signals is not None:
        _, signals = pool.step(np.zeros((n, 5), dtype=np.int32))


def test_a_begin_sent_ahead_is_the_begin_asked_for_and_keeps_the_running_results(local_ray):
    """`prefetch` (the next batch built during the update) changes no number: the running batch's results
    are still its own, a matching begin is the fresh one, and one for other envs is built afresh."""
    from esper_fx.distributed.pool import RayEnvPool
    from hosts.env import EnvPool

    config = small(env_workers=2, max_epochs=2)
    plain = EnvPool(pools.pool_settings(config))  # (bit for bit the Ray pool without a begin sent ahead)
    with RayEnvPool(pools.pool_settings(config), config.env_workers) as ahead:
        for pool in (ahead, plain):
            pool.begin(0, 3)
            _wait_episode(pool, 3)
        ahead.prefetch(1, 3)
        assert ahead.episode_results() == plain.episode_results()  # batch 0's, not the prefetched batch's
        got, want = ahead.begin(1, 3), plain.begin(1, 3)
        assert all(torch.equal(got[k], want[k]) for k in want)
        _wait_episode(ahead, 3)
        _wait_episode(plain, 3)
        ahead.prefetch(2, 3)  # a begin for other envs than the one asked for next, its results left unread
        got, want = ahead.begin(2, 2), plain.begin(2, 2)
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
        assert got["obs"].shape[0] == 2
        assert ahead.episode_results() == plain.episode_results()  # batch 2's, not batch 1's unread ones


def test_the_workers_import_path_is_the_directory_holding_the_driver_s_packages():
    from pathlib import Path

    from esper_fx.distributed.runtime import project_root

    root = Path(project_root())
    assert (root / "esper_fx" / "__init__.py").is_file() and (root / "hosts").is_dir()
    assert root == Path(__file__).resolve().parents[3]
