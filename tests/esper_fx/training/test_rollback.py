"""A governor rollback reaches the loop in one field, the `panic` signal: the jitted step keeps which envs
rolled back (`EpisodeState.rolled_back`), and the end of the batch discards their rows when asked
(`discard_rolled_back_envs`). The reward reads the same signal (tests/rl/test_rewards.py)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from esper_fx.config import TrainingConfig
from esper_fx.contracts.signals import PACKED_DTYPES, SignalColumn, signal_columns
from esper_fx.controllers import protocol as ctl
from esper_fx.controllers import registry
from esper_fx.training import step
from esper_fx.training.batch import end_of_batch
from esper_fx.training.epoch import Runner
from esper_fx.training.run_state import fresh_learner
from rl import rewards
from tests.esper_fx.tiny import TINY

E = 2


def packed_signals(columns: dict[str, SignalColumn], t: int, max_epochs: int, panic: list[bool]) -> dict:
    """Packed signals of E envs at epoch t: every mask open, a host of 1000 parameters, `panic` as given."""
    widths = {dtype: max(c.stop for c in columns.values() if c.dtype == dtype) for dtype in PACKED_DTYPES}
    buffers = {dtype: np.zeros((E, width), dtype) for dtype, width in widths.items()}

    def put(name: str, value) -> None:
        column = columns[name]
        buffers[column.dtype][:, column.start:column.stop] = np.reshape(value, (-1, 1)) if np.ndim(value) else value

    for name in columns:
        if name.startswith("mask_") or name == "slot_enabled":
            put(name, True)
    put("epoch", t)
    put("max_epochs", max_epochs)
    put("host_params", 1000.0)
    put("panic", panic)
    return {dtype: jnp.asarray(buffer) for dtype, buffer in buffers.items()}


@pytest.mark.parametrize("discard", [False, True])
def test_a_rollback_reaches_the_end_of_batch_through_the_panic_signal(discard):
    config = TrainingConfig(**dict(TINY, n_envs=E, discard_rolled_back_envs=discard))
    spec = ctl.ControllerSpec.from_config(config)
    captured = {}

    def update(state, rollout, key):
        captured["rollout"] = rollout
        return state, {}

    controller = dataclasses.replace(registry.build("ppo_lstm", spec), update=update)
    columns = signal_columns(spec.num_slots, spec.num_blueprints, spec.obs_dim)
    step_fn = step.make_step(controller, rewards.dispatch(config), config.reward, columns, spec.max_epochs)
    learner = fresh_learner(controller, spec, config.seed)
    episode = step.new_episode(controller, spec, learner.reward_norm, E)
    for t in range(1, config.max_epochs + 1):
        signals = packed_signals(columns, t, config.max_epochs, [False, t == 2])  # env 1 rolls back at epoch 2
        episode, _ = step_fn(episode, learner.controller, learner.obs_rms, signals, learner.root_key,
                             np.array([0, t], np.int32))
    assert np.asarray(episode.rolled_back).tolist() == [False, True]

    runner = Runner(config, spec, controller, None, None, jax.devices("cpu")[0], step_fn, None, None, columns)
    end_of_batch(runner, learner, episode.rollout, 0, episode.rolled_back)
    kept = [config.max_epochs, 0 if discard else config.max_epochs]
    assert np.asarray(captured["rollout"].step_count).tolist() == kept
