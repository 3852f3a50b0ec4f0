"""The fixed-shape rollout buffer (BEHAVIOUR §11.2): shapes, pure appends, the max_steps guard, validity."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from esper_fx.contracts.actions import NUM_HEADS, head_sizes
from rl import rollout
from rl.distributions import Masks

E, T, D, S, B, H = 3, 4, 6, 3, 5, 8


def _step(t, hidden=H):
    f = lambda *shape: jnp.full((E,) + shape, float(t + 1), jnp.float32)  # noqa: E731
    masks = Masks(*(jnp.zeros((E, n), bool).at[:, t % n].set(True) for n in head_sizes(S, B)))
    carry = () if hidden is None else (f(hidden) * 10, f(hidden) * 100)
    return rollout.StepData(
        obs=f(D), raw_obs=f(D) * 2, actions=jnp.full((E, NUM_HEADS), t, jnp.int32), log_probs=-f(NUM_HEADS), values=f(),
        rewards=f() / 2, raw_rewards=f() * 3, dones=jnp.full((E,), t == T - 1), truncated=jnp.full((E,), t == T - 1),
        bootstrap=f() * 7, masks=masks, carry=carry,
    )


def test_init_gives_fixed_shapes_all_true_dummy_masks_and_no_valid_steps():
    ro = rollout.init(E, T, D, S, B, H)
    assert ro.obs.shape == ro.raw_obs.shape == (E, T, D)
    assert ro.actions.shape == (E, T, 5) and ro.actions.dtype == jnp.int32
    assert ro.log_probs.shape == (E, T, 5) and ro.values.shape == ro.rewards.shape == (E, T)
    assert ro.dones.dtype == ro.truncated.dtype == jnp.bool_
    assert [m.shape for m in ro.masks] == [(E, T, S), (E, T, B), (E, T, 3), (E, T, 4), (E, T, 3)]  # ..., tempo
    assert all(bool(jnp.all(m)) for m in ro.masks)
    assert [c.shape for c in ro.carry0] == [(E, H), (E, H)]
    assert ro.n_transitions() == 0 and not bool(jnp.any(ro.valid))


def test_append_stores_every_field_at_step_t_and_counts_steps():
    ro = rollout.init(E, T, D, S, B, H)
    for t in range(2):
        ro = rollout.append(ro, t, _step(t))
    assert ro.step_count.tolist() == [2] * E and ro.n_transitions() == 2 * E
    np.testing.assert_array_equal(ro.valid[0], [True, True, False, False])
    assert float(ro.obs[1, 1, 0]) == 2.0 and float(ro.raw_obs[1, 1, 0]) == 4.0
    assert ro.actions[2, 1].tolist() == [1] * 5 and float(ro.log_probs[0, 0, 3]) == -1.0
    assert float(ro.log_probs[0, 1, 4]) == -2.0  # the tempo head's log-prob
    assert float(ro.rewards[0, 1]) == 1.0 and float(ro.raw_rewards[0, 1]) == 6.0
    assert float(ro.bootstrap[0, 1]) == 14.0 and float(ro.values[0, 0]) == 1.0
    assert ro.masks.blueprint[0, 1].tolist() == [False, True, False, False, False]
    assert ro.masks.tempo[0, 1].tolist() == [False, True, False]
    assert bool(jnp.all(ro.masks.blueprint[:, 2:]))  # untouched steps keep the all-True dummy mask
    assert bool(jnp.all(ro.masks.tempo[:, 2:]))


def test_only_the_step_zero_carry_is_stored():
    ro = rollout.init(E, T, D, S, B, H)
    for t in range(3):
        ro = rollout.append(ro, t, _step(t))
    assert float(ro.carry0[0][0, 0]) == 10.0 and float(ro.carry0[1][0, 0]) == 100.0


def test_append_is_pure():
    ro = rollout.init(E, T, D, S, B, H)
    new = rollout.append(ro, 0, _step(0))
    assert ro.n_transitions() == 0 and float(ro.obs.sum()) == 0.0 and new.n_transitions() == E


def test_storing_more_than_max_steps_raises_runtime_error():
    ro = rollout.init(E, T, D, S, B, H)
    for t in range(T):
        ro = rollout.append(ro, t, _step(t))
    with pytest.raises(RuntimeError, match="exceeded max_steps"):
        rollout.append(ro, T, _step(0))


def test_an_append_past_max_steps_under_jit_is_dropped_flagged_and_raised_by_check_rollout():
    ro = rollout.init(E, T, D, S, B, H)
    appended = jax.jit(rollout.append)(ro, jnp.int32(T), _step(0))
    assert bool(appended.overflow) and appended.n_transitions() == 0
    assert float(appended.obs.sum()) == 0.0
    with pytest.raises(RuntimeError, match="exceeded max_steps"):
        rollout.check_rollout(appended)
    rollout.check_rollout(ro)


def test_inactive_envs_do_not_advance_and_discarded_envs_become_invalid():
    ro = rollout.init(E, T, D, S, B, H)
    ro = rollout.append(ro, 0, _step(0))
    ro = rollout.append(ro, 1, _step(1), active=jnp.array([True, False, True]))
    assert ro.step_count.tolist() == [2, 1, 2] and float(ro.obs[1, 1, 0]) == 0.0
    ro = rollout.discard_envs(ro, jnp.array([True, True, False]))
    assert ro.step_count.tolist() == [2, 1, 0] and ro.n_transitions() == 3
    assert not bool(jnp.any(ro.valid[2]))


def test_the_mlp_rollout_has_an_empty_carry():
    ro = rollout.init(E, T, D, S, B, None)
    ro = rollout.append(ro, 0, _step(0, hidden=None))
    assert ro.carry0 == () and ro.n_transitions() == E


def test_a_step_without_the_tempo_head_is_rejected():
    ro = rollout.init(E, T, D, S, B, H)
    four_heads = _step(0)._replace(actions=jnp.zeros((E, 4), jnp.int32), log_probs=jnp.zeros((E, 4)))
    with pytest.raises(AssertionError):
        rollout.append(ro, 0, four_heads)
    no_tempo_mask = _step(0)._replace(masks=_step(0).masks._replace(tempo=jnp.ones((E, 2), bool)))
    with pytest.raises(AssertionError):
        rollout.append(ro, 0, no_tempo_mask)
