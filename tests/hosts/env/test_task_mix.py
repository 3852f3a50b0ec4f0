"""A task mix (TrainingConfig.task_mix): each episode's task drawn from its env's seed, one dataset for all."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_fx.config import TrainingConfig
from esper_fx.training.pools import pool_settings
from hosts.env import EnvPool
from hosts.tasks import get_task, mix_task

MIX = ("shapes16", "shapes16_spatial", "shapes16_narrow")


@settings(deadline=None, max_examples=50)
@given(st.integers(0, 2**31 - 1))
def test_an_episodes_task_depends_on_its_env_seed_alone(seed):
    assert mix_task(MIX, seed) is mix_task(MIX, seed)  # the same seed, the same task, every call
    assert mix_task(MIX, seed).name in MIX
    assert mix_task(MIX[:1], seed).name == MIX[0]


def test_the_draw_reaches_every_task_about_equally():
    counts = {name: 0 for name in MIX}
    for seed in range(900_000, 900_600):
        counts[mix_task(MIX, seed).name] += 1
    assert all(150 <= n <= 250 for n in counts.values()), counts


def test_the_variants_read_shapes16s_images_with_their_own_hosts():
    blind, spatial, narrow = (get_task(name).build_host() for name in MIX)
    assert blind.blocks[0][0].kernel_size == (1, 1) and spatial.blocks[0][0].kernel_size == (3, 3)
    assert narrow.channels == (4, 4, 4) and spatial.channels == blind.channels == (16, 16, 16)


def test_a_pool_builds_each_env_on_its_drawn_task_and_reports_it():
    config = TrainingConfig(task="shapes16", task_mix=MIX, n_envs=4, max_epochs=1, device="cpu",
                            slots=("r0c0", "r0c1", "r0c2"), synthetic_train_samples=256, synthetic_test_samples=64,
                            batch_size_per_env=32, max_train_batches=1, data_split="full")
    torch.set_num_threads(1)
    pool = EnvPool(pool_settings(config))
    drawn = set()
    for b in range(3):
        pool.begin(b, 4)
        for env in pool.envs:
            want = mix_task(MIX, config.seed + 10_000 * b + 1_000 * env.index)
            assert env.task == want.name
            assert env.model.host.blocks[0][0].kernel_size == ((1, 1) if want.name == "shapes16" else (3, 3))
            assert env.model.host.channels == want.build_host().channels
            drawn.add(env.task)
        pool.step(np.array([[0, 0, 0, 0, 1]] * 4, dtype=np.int32))
        assert [r.task for r in pool.episode_results()] == [env.task for env in pool.envs]
    assert len(drawn) >= 2  # (12 episodes over 3 tasks)


def test_without_a_mix_every_env_runs_the_task():
    config = TrainingConfig(task="shapes16", n_envs=2, max_epochs=1, device="cpu", slots=("r0c0",),
                            synthetic_train_samples=128, synthetic_test_samples=32, batch_size_per_env=32,
                            max_train_batches=1)
    pool = EnvPool(pool_settings(config))
    pool.begin(0, 2)
    assert [env.task for env in pool.envs] == ["shapes16", "shapes16"]


@pytest.mark.parametrize("mix, needle", [
    (("shapes16", "fashion_mnist"), "'fashion_mnist' cannot share a run with task 'shapes16': it reads "
                                    "'fashion_mnist''s data"),
    (("shapes16", "nope"), "task_mix: unknown task 'nope'"),
    (("shapes16", "shapes16"), "task_mix lists a task twice"),
])
def test_a_mix_that_cannot_share_a_run_is_refused_naming_the_field(mix, needle):
    with pytest.raises(ValueError, match="task_mix") as info:
        TrainingConfig(task="shapes16", task_mix=mix)
    assert needle in str(info.value)


@pytest.mark.parametrize("log_params", [False, True])
def test_the_observation_carries_each_hosts_size_raw_or_on_a_log_scale(log_params):
    """observe_log_params: feature 21 is ln(1 + params), so the mix's hosts lie far apart on it."""
    import math

    from esper_fx.contracts.observation import OBS_TOTAL_PARAMS
    config = TrainingConfig(task="shapes16", task_mix=MIX, n_envs=4, max_epochs=1, device="cpu",
                            slots=("r0c0", "r0c1", "r0c2"), synthetic_train_samples=256, synthetic_test_samples=64,
                            batch_size_per_env=32, max_train_batches=1, data_split="full",
                            observe_log_params=log_params)
    torch.set_num_threads(1)
    pool = EnvPool(pool_settings(config))
    signals = pool.begin(0, 4)
    for env, row in zip(pool.envs, signals["obs"].tolist()):
        params = env.model.host_param_count()
        assert row[OBS_TOTAL_PARAMS] == pytest.approx(math.log1p(params) if log_params else params)


def _first_observations(**extra) -> list[list[float]]:
    config = TrainingConfig(task="shapes16", task_mix=MIX, n_envs=4, max_epochs=1, device="cpu",
                            slots=("r0c0", "r0c1", "r0c2"), synthetic_train_samples=256, synthetic_test_samples=64,
                            batch_size_per_env=32, max_train_batches=1, data_split="full", **extra)
    torch.set_num_threads(1)
    return EnvPool(pool_settings(config)).begin(0, 4)["obs"].tolist()


@pytest.mark.parametrize("withheld", [("host_params",), ("curves",), ("host_params", "curves")])
def test_a_withheld_feature_group_reads_what_the_control_says_and_the_rest_is_unchanged(withheld):
    """observe_withheld (the control of LEARNING §8): `host_params` takes the host out of feature 21 (no seed
    yet: 0 on every host), `curves` zeroes features 2..20; every other feature equals the full observation's."""
    from esper_fx.contracts.observation import OBS_CURVES, OBS_TOTAL_PARAMS

    full, control = _first_observations(), _first_observations(observe_withheld=withheld)
    hidden = set()
    if "host_params" in withheld:
        hidden.add(OBS_TOTAL_PARAMS)
        assert all(row[OBS_TOTAL_PARAMS] == 0.0 for row in control)
        assert len({row[OBS_TOTAL_PARAMS] for row in full}) > 1  # the hosts differ in size
    if "curves" in withheld:
        hidden.update(range(OBS_CURVES.start, OBS_CURVES.stop))
        assert all(v == 0.0 for row in control for v in row[OBS_CURVES])
        assert any(v != 0.0 for row in full for v in row[OBS_CURVES])
    for a, b in zip(full, control):
        assert [v for k, v in enumerate(a) if k not in hidden] == [v for k, v in enumerate(b) if k not in hidden]


@pytest.mark.parametrize("withheld, needle", [(("labels",), "unknown feature group 'labels'"),
                                              (("curves", "curves"), "lists a group twice")])
def test_an_unknown_or_repeated_withheld_group_is_refused_naming_the_field(withheld, needle):
    with pytest.raises(ValueError, match="observe_withheld") as info:
        TrainingConfig(task="shapes16", task_mix=MIX, observe_withheld=withheld)
    assert needle in str(info.value)
