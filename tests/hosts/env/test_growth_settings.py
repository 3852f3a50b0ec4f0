"""The settings of growth that works from its first step, in a pool (BEHAVIOUR §2.14, §4.5, §7.10): the host's
width, the immediate clock, a seed's own rate and its optimiser state carried from the host or reset."""

import numpy as np
import pytest
import torch

from esper_fx.config import TrainingConfig
from esper_fx.contracts.actions import BLEND_NAMES, LifecycleOp
from esper_fx.contracts.stages import SeedStage
from esper_fx.training.pools import pool_settings
from hosts.env.pool import EnvPool
from hosts.models.cnn import CNNHost

MENU = ("noop", "copy_block", "widen", "conv_light")


def _config(**kw) -> TrainingConfig:
    """A host of three equal 3×3 blocks on generated images, as fashion_growth's (no files needed)."""
    base = dict(task="shapes16_spatial", n_envs=1, max_epochs=4, slots=("r0c0", "r0c1", "r0c2"), device="cpu",
                batch_size_per_env=16, max_train_batches=3, synthetic_train_samples=128, synthetic_test_samples=32,
                lifecycle="immediate", blueprint_menu=MENU, env_workers=0)
    return TrainingConfig(**{**base, **kw})


def _germinate_row(pool, slot="r0c0", blueprint="copy_block"):
    return np.array([[pool.slot_ids.index(slot), pool.menu.index(blueprint), BLEND_NAMES.index("linear"),
                      int(LifecycleOp.GERMINATE), 1]], dtype=np.int32)


WAIT = np.array([[0, 0, 0, int(LifecycleOp.WAIT), 1]], dtype=np.int32)


def _grown_pool(**kw) -> EnvPool:
    """Epoch 1, a copy_block germinated in r0c0 at its end, then epoch 2 (the seed's first steps)."""
    pool = EnvPool(pool_settings(_config(**kw)))
    pool.begin(0)
    pool.step(_germinate_row(pool))
    return pool


def test_host_width_scales_every_block_and_the_config_refuses_a_bad_one():
    assert CNNHost.cifar10(width=0.5).channels == (4, 8, 16)
    assert CNNHost.growth(width=0.25).channels == (4, 4, 4)
    pool = EnvPool(pool_settings(_config(host_width=0.5)))
    pool.build_envs(0)
    assert pool.envs[0].model.host.channels == (8, 8, 8)  # shapes16_spatial's host is 16, 16, 16
    for bad in (0, -1.0, float("nan"), "wide", 100.0):
        with pytest.raises((ValueError, TypeError), match="host_width"):
            _config(host_width=bad)
    with pytest.raises(ValueError, match="host_width scales a CNN host"):
        TrainingConfig(task="pytext", host_width=0.5)


def test_under_the_immediate_clock_the_germinated_seed_blends_from_its_first_step():
    """Germinated at epoch 1's decision, the seed blends from epoch 2's first step; the 3-step epochs of a
    4-epoch episode give ramps of one step, so it is PROBATIONARY at epoch 2's end and may be fossilized at
    epoch 3's decision."""
    pool = EnvPool(pool_settings(_config()))
    pool.begin(0)
    result, _ = pool.step(_germinate_row(pool))
    moves = [(e.data["from_stage"], e.data["to_stage"]) for e in result.events if "to_stage" in e.data]
    assert moves == [("GERMINATED", "BLENDING")]
    slot = pool.envs[0].slot("r0c0")
    assert slot.stage == SeedStage.BLENDING and not slot.isolate_gradients and slot.alpha == 1.0
    result, _ = pool.step(WAIT)
    assert slot.stage == SeedStage.PROBATIONARY


def test_seed_lr_scale_sets_the_seed_rate_and_leaves_the_host_rate():
    plain, scaled = _grown_pool(), _grown_pool(seed_lr_scale=0.25)
    rate = lambda pool: pool.envs[0].seed_optimizers["r0c0"].optimizer.param_groups[0]["lr"]  # noqa: E731
    assert rate(scaled) == pytest.approx(0.25 * rate(plain))
    host = lambda pool: pool.envs[0].host_optimizer.param_groups[0]["lr"]  # noqa: E731
    assert host(scaled) == host(plain)


def test_carry_starts_the_copied_weights_with_the_host_momentum_and_reset_with_none():
    """One training step after the germination: under `reset` the seed's momentum is its first gradient;
    under `carry` it is the host block's momentum (times SGD's momentum) plus that gradient."""
    for mode in ("reset", "carry"):
        pool = EnvPool(pool_settings(_config(seed_optimizer_state=mode, max_train_batches=1)))
        pool.begin(0)
        env = pool.envs[0]
        source = env.model.neighbour_block("r0c0")
        host_momentum = env.host_optimizer.state[source[0].weight]["momentum_buffer"].clone()
        pool.step(_germinate_row(pool))  # epoch 2: the seed's first (and only) step
        seed = env.slot("r0c0").seed
        buffer = env.seed_optimizers["r0c0"].optimizer.state[seed.a[0].weight]["momentum_buffer"]
        gradient = seed.a[0].weight.grad
        expected = gradient if mode == "reset" else 0.9 * host_momentum + gradient
        assert torch.allclose(buffer, expected, atol=1e-6), mode


def test_the_config_refuses_an_unknown_optimizer_state_and_a_bad_seed_rate():
    with pytest.raises(ValueError, match="seed_optimizer_state must be one of"):
        _config(seed_optimizer_state="keep")
    with pytest.raises(ValueError, match="seed_lr_scale"):
        _config(seed_lr_scale=0.0)
