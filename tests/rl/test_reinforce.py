"""REINFORCE with a learned baseline (`rl.reinforce`): the returns against a hand computation, and the loss'
gradients: zero advantage moves no policy, the policy term never moves the baseline, the baseline is pulled
toward the returns, the entropy bonus pushes entropy up."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from esper_fx.contracts.actions import NUM_HEADS
from rl import reinforce

T = 6
E = 3  # one shape throughout: each jitted function below compiles once
floats = st.floats(-5.0, 5.0, allow_nan=False, width=32)


def hand_returns(rewards, step_count, gamma, truncated_last, bootstrap):
    """G_t = Σ_k γ^k r_{t+k} to the episode's end (plus γ^(L−t)·bootstrap when the last step is a
    truncation), written as the sum rather than the recursion."""
    out = np.zeros_like(rewards, dtype=np.float64)
    for e, length in enumerate(step_count):
        tail = gamma ** (length - np.arange(length)) * bootstrap[e] if truncated_last[e] else np.zeros(length)
        for t in range(length):
            out[e, t] = sum(gamma ** (k - t) * rewards[e, k] for k in range(t, length)) + tail[t]
    return out


@st.composite
def episodes(draw):
    n_envs = E
    rewards = draw(hnp.arrays(np.float32, (n_envs, T), elements=floats))
    step_count = np.array(draw(st.lists(st.integers(0, T), min_size=n_envs, max_size=n_envs)))
    truncated_last = np.array(draw(st.lists(st.booleans(), min_size=n_envs, max_size=n_envs)))
    bootstrap = draw(hnp.arrays(np.float32, (n_envs,), elements=floats))
    gamma = draw(st.floats(0.5, 1.0))
    return rewards, step_count, truncated_last, bootstrap, gamma


returns_fn = jax.jit(reinforce.discounted_returns)


@settings(deadline=None, max_examples=30)
@given(episodes())
def test_the_returns_equal_the_discounted_sum_to_the_episodes_end(case):
    rewards, step_count, truncated_last, bootstrap, gamma = case
    valid = np.arange(T) < step_count[:, None]
    last = np.arange(T) == (step_count[:, None] - 1)
    dones = last  # each episode ends at its last valid step: terminal, or a truncation valued by the bootstrap
    truncated = last & truncated_last[:, None]
    boot = np.where(truncated, bootstrap[:, None], 0.0).astype(np.float32)
    got = returns_fn(rewards, dones, truncated, boot, valid, np.float32(gamma))
    chex.assert_shape(got, rewards.shape)
    want = hand_returns(rewards, step_count, gamma, truncated_last, bootstrap)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    assert np.all(np.asarray(got)[~valid] == 0.0)


def test_a_terminal_step_inside_the_row_cuts_the_sum():
    rewards = jnp.array([[1.0, 2.0, 4.0]])
    dones = jnp.array([[False, True, False]])
    no = jnp.zeros((1, 3), bool)
    got = reinforce.discounted_returns(rewards, dones, no, jnp.zeros((1, 3)), jnp.ones((1, 3), bool), 0.5)
    np.testing.assert_allclose(np.asarray(got), [[1.0 + 0.5 * 2.0, 2.0, 4.0]])


@st.composite
def batches(draw):
    shape = (E, T)
    log_probs = draw(hnp.arrays(np.float32, shape + (NUM_HEADS,), elements=st.floats(-6.0, 0.0, width=32)))
    entropy = draw(hnp.arrays(np.float32, shape + (NUM_HEADS,), elements=st.floats(0.0, 1.0, width=32)))
    values = draw(hnp.arrays(np.float32, shape, elements=floats))
    returns = draw(hnp.arrays(np.float32, shape, elements=floats))
    heads = draw(hnp.arrays(bool, shape + (NUM_HEADS,)))
    valid = draw(hnp.arrays(bool, shape))
    return log_probs, entropy, values, returns, heads & valid[..., None], valid


def _loss(log_probs, entropy, values, returns, heads, valid, value_coef=0.5, entropy_coef=0.01):
    return reinforce.reinforce_loss(log_probs, entropy, values, returns, heads, valid, value_coef, entropy_coef)[0]


grad_log_probs = jax.jit(jax.grad(_loss))
grad_entropy = jax.jit(jax.grad(_loss, argnums=1))
grad_values = jax.jit(jax.grad(_loss, argnums=2))
grad_values_policy_term = jax.jit(jax.grad(
    lambda values, log_probs, heads, returns, valid: reinforce.policy_gradient_loss(log_probs, heads, returns - values,
                                                                                    valid)))


@settings(deadline=None, max_examples=30)
@given(batches())
def test_zero_advantage_gives_zero_policy_gradient(batch):
    log_probs, entropy, values, _, heads, valid = batch
    grad = grad_log_probs(log_probs, entropy, values, values, heads, valid)
    chex.assert_trees_all_close(grad, jnp.zeros_like(grad))


@settings(deadline=None, max_examples=30)
@given(batches())
def test_the_policy_gradient_is_minus_the_advantage_on_the_heads_that_acted(batch):
    log_probs, entropy, values, returns, heads, valid = batch
    grad = grad_log_probs(log_probs, entropy, values, returns, heads, valid)
    n = max(int(valid.sum()), 1)
    want = np.where(heads, -(returns - values)[..., None] / n, 0.0)
    np.testing.assert_allclose(np.asarray(grad), want, rtol=1e-5, atol=1e-6)


@settings(deadline=None, max_examples=30)
@given(batches())
def test_the_baseline_is_pulled_toward_the_returns_and_never_by_the_policy_term(batch):
    log_probs, entropy, values, returns, heads, valid = batch
    # the policy term alone: stop_grad(A) keeps it from moving the baseline
    grad_pol = grad_values_policy_term(values, log_probs, heads, returns, valid)
    chex.assert_trees_all_close(grad_pol, jnp.zeros_like(grad_pol))
    # the whole loss: d/db = −2·c_v·(G − b)/N, so a gradient step raises b below G and lowers it above
    grad = np.asarray(grad_values(log_probs, entropy, values, returns, heads, valid))
    gap = np.asarray(returns - values)
    moved = valid & (np.abs(gap) > 1e-3)
    assert np.all(np.sign(grad[moved]) == -np.sign(gap[moved]))
    assert np.all(grad[~valid] == 0.0)
    np.testing.assert_allclose(grad, np.where(valid, -2 * 0.5 * gap / max(int(valid.sum()), 1), 0.0),
                               rtol=1e-5, atol=1e-6)


@settings(deadline=None, max_examples=20)
@given(batches())
def test_the_entropy_bonus_rewards_entropy_of_the_heads_that_acted(batch):
    log_probs, entropy, values, returns, heads, valid = batch
    grad = np.asarray(grad_entropy(log_probs, entropy, values, returns, heads, valid))
    assert np.all(grad[heads] < 0) and np.all(grad[~heads] == 0.0)


def test_a_loss_over_no_valid_step_is_zero():
    shape = (2, T)
    zeros = jnp.zeros(shape)
    loss = _loss(jnp.zeros(shape + (NUM_HEADS,)), jnp.ones(shape + (NUM_HEADS,)), zeros, jnp.ones(shape),
                 jnp.zeros(shape + (NUM_HEADS,), bool), jnp.zeros(shape, bool))
    assert float(loss) == 0.0
