"""Masked categorical, normalised entropy, causal masks and validation (BEHAVIOUR §9.2–§9.4)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_fx.contracts.actions import HEAD_OP, HEAD_TEMPO, LifecycleOp, head_sizes
from rl import distributions as dist
from tests.rl.action_checks import assert_actions_allowed


def _entropy(logits, mask):
    return dist.normalized_entropy(logits, mask)


def _probs(logits, mask):
    return dist.probs(logits, mask)


def _log_prob(logits, mask, action):
    return dist.masked_log_prob(logits, mask, action)


ROWS, WIDTH = 8, 7  # fixed shapes: hypothesis varies the masks and values, not the compiled shapes


@st.composite
def logits_and_masks(draw):
    """[8, 7] logits and masks; each row uses its first n columns, with at least one valid action."""
    seed = draw(st.integers(0, 2**31 - 1))
    n = draw(st.integers(1, WIDTH))
    rng = np.random.default_rng(seed)
    scale = draw(st.sampled_from([0.01, 1.0, 30.0]))
    logits = (rng.normal(size=(ROWS, WIDTH)) * scale).astype(np.float32)
    mask = (rng.random((ROWS, WIDTH)) < 0.6) & (np.arange(WIDTH) < n)
    mask[np.arange(ROWS), rng.integers(0, n, ROWS)] = True
    return logits, mask


class MaskedCategoricalTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_uniform_logits_over_three_valid_actions_have_entropy_one(self):
        logits = jnp.zeros((2, 5))
        mask = jnp.array([[True, False, True, True, False], [False, True, True, True, False]])
        h = self.variant(_entropy)(logits, mask)
        np.testing.assert_allclose(np.asarray(h), 1.0, atol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_single_valid_action_has_entropy_exactly_zero(self):
        logits = jnp.array([[3.0, -1.0, 0.5], [0.0, 0.0, 0.0]])
        mask = jnp.array([[False, True, False], [True, False, False]])
        h = self.variant(_entropy)(logits, mask)
        assert np.asarray(h).tolist() == [0.0, 0.0]

    @chex.variants(with_jit=True, without_jit=True)
    @given(data=logits_and_masks())
    @settings(max_examples=15)
    def test_normalised_entropy_lies_in_unit_interval(self, data):
        logits, mask = data
        h = np.asarray(self.variant(_entropy)(jnp.asarray(logits), jnp.asarray(mask)))
        assert np.all(np.isfinite(h)) and np.all(h >= 0.0) and np.all(h <= 1.0)

    @chex.variants(with_jit=True, without_jit=True)
    def test_masked_actions_get_logit_minus_1e4_and_tiny_probability(self):
        logits = jnp.array([[5.0, 1.0, -2.0, 0.0]])
        mask = jnp.array([[False, True, True, False]])
        masked = dist.masked_logits(logits, mask)
        assert float(masked[0, 0]) == -1e4 and float(masked[0, 3]) == -1e4
        p = np.asarray(self.variant(_probs)(logits, mask))
        assert p[0, 0] < 1e-30 and p[0, 3] < 1e-30
        np.testing.assert_allclose(p.sum(), 1.0, rtol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_masked_log_prob_is_log_softmax_of_masked_logits_at_the_action(self):
        logits = jnp.array([[0.3, 1.2, -0.7], [2.0, 0.0, 1.0]])
        mask = jnp.array([[True, True, False], [True, True, True]])
        action = jnp.array([1, 2])
        lp = np.asarray(self.variant(_log_prob)(logits, mask, action))
        ref0 = 1.2 - np.log(np.exp(0.3) + np.exp(1.2))
        ref1 = 1.0 - np.log(np.exp(2.0) + 1.0 + np.exp(1.0))
        np.testing.assert_allclose(lp, [ref0, ref1], rtol=1e-5)


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16, jnp.float32])
def test_masked_probabilities_stay_finite_and_below_1e_30_in_low_precision(dtype):
    logits = jnp.array([[3.0, 1.0, 0.0, -1.0]], dtype)
    mask = jnp.array([[True, False, True, False]])
    masked = dist.masked_logits(logits, mask)
    p = dist.probs(logits, mask)
    assert masked.dtype == dtype and bool(jnp.all(jnp.isfinite(masked)))
    assert bool(jnp.all(jnp.isfinite(p)))
    assert float(p[0, 1]) < 1e-30 and float(p[0, 3]) < 1e-30
    assert float(masked[0, 1]) == float(jnp.asarray(-1e4, dtype))  # bf16 rounds −1e4 to −9984


def test_masked_actions_are_never_sampled_in_10000_draws():
    logits = jnp.broadcast_to(jnp.array([4.0, -3.0, 0.0, 2.0, -1.0]), (10_000, 5))
    mask = jnp.array([False, True, True, False, True])
    actions = np.asarray(dist.sample(jax.random.PRNGKey(0), logits, mask))
    assert np.isin(actions, [1, 2, 4]).all()
    freq = np.bincount(actions, minlength=5) / actions.size
    ref = np.exp([-3.0, 0.0, -1.0]) / np.exp([-3.0, 0.0, -1.0]).sum()
    np.testing.assert_allclose(freq[[1, 2, 4]], ref, atol=0.02)


def test_sampling_never_picks_a_masked_action_even_when_valid_logits_are_far_below_minus_1e4():
    logits = jnp.broadcast_to(jnp.array([0.0, -1e6, 5.0, -2e6]), (2_000, 4))
    mask = jnp.array([False, True, False, True])
    actions = np.asarray(jax.jit(dist.sample)(jax.random.PRNGKey(3), logits, mask))
    assert np.isin(actions, [1, 3]).all()


@given(data=logits_and_masks(), seed=st.integers(0, 2**31 - 1))
@settings(max_examples=25)
def test_sampled_actions_are_always_valid_under_random_masks(data, seed):
    logits, mask = data
    sample = jax.jit(dist.sample, static_argnames="deterministic")
    actions = np.asarray(sample(jax.random.PRNGKey(seed), jnp.asarray(logits), jnp.asarray(mask)))
    assert mask[np.arange(len(actions)), actions].all()
    greedy = np.asarray(sample(jax.random.PRNGKey(seed), jnp.asarray(logits), jnp.asarray(mask), deterministic=True))
    np.testing.assert_array_equal(greedy, np.argmax(np.where(mask, logits, -np.inf), axis=-1))


def test_sample_heads_returns_int32_actions_and_matching_per_head_log_probs():
    rng = np.random.default_rng(1)
    sizes = head_sizes(3)  # slot 3, blueprint 5, blend 3, op 4, tempo 3
    logits = [jnp.asarray(rng.normal(size=(6, n)), jnp.float32) for n in sizes]
    masks = dist.Masks(*(jnp.asarray(np.arange(n) != 0) | (h == HEAD_OP) for h, n in enumerate(sizes)))
    masks = dist.Masks(*(jnp.broadcast_to(m, (6, m.shape[0])) for m in masks))
    actions, lps = jax.jit(dist.sample_heads)(jax.random.PRNGKey(2), logits, masks)
    assert actions.shape == (6, 5) and actions.dtype == jnp.int32 and lps.shape == (6, 5)
    assert_actions_allowed(actions, masks)
    np.testing.assert_allclose(np.asarray(jax.jit(dist.heads_log_prob)(logits, masks, actions)), np.asarray(lps), rtol=1e-6)


def test_a_row_with_no_valid_action_is_flagged():
    mask = np.array([[True, False, False], [False, False, False]])
    ok = dist.row_is_valid(jnp.zeros((2, 3)), jnp.asarray(mask))
    assert np.asarray(ok).tolist() == [True, False]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_row_with_nan_or_infinite_logits_is_flagged(bad):
    logits = np.array([[0.5, bad, -1.5], [2.0, 0.0, 1.0]], np.float32)
    assert np.asarray(jax.jit(dist.row_is_valid)(jnp.asarray(logits), jnp.ones((2, 3), bool))).tolist() == [False, True]


def test_the_action_check_rejects_a_masked_or_out_of_range_choice():
    masks = dist.Masks(*(jnp.array([[True] * n]) for n in (3, 5, 3, 4, 3)))
    masks = masks._replace(blueprint=jnp.array([[False, True, True, True, True]]),
                           tempo=jnp.array([[False, True, True]]))
    assert_actions_allowed(np.array([[0, 1, 2, 3, 1]]), masks)
    with pytest.raises(AssertionError, match="masked"):
        assert_actions_allowed(np.array([[0, 0, 2, 3, 1]]), masks)
    with pytest.raises(AssertionError, match="range"):
        assert_actions_allowed(np.array([[0, 1, 3, 3, 1]]), masks)
    with pytest.raises(AssertionError, match="tempo action selects a masked"):
        assert_actions_allowed(np.array([[0, 1, 2, 3, 0]]), masks)
    with pytest.raises(AssertionError, match="tempo action out of range"):
        assert_actions_allowed(np.array([[0, 1, 2, 3, 3]]), masks)
    with pytest.raises(AssertionError, match="columns"):  # a four-head action row
        assert_actions_allowed(np.array([[0, 1, 2, 3]]), masks)


def test_causal_masks_are_op_always_slot_unless_wait_blueprint_blend_and_tempo_only_on_germinate():
    m = np.asarray(dist.causal_masks(jnp.arange(4)))  # WAIT, GERMINATE, CULL, FOSSILIZE; heads in contract order
    np.testing.assert_array_equal(
        m, [[False, False, False, True, False], [True, True, True, True, True], [True, False, False, True, False],
            [True, False, False, True, False]]
    )
    np.testing.assert_array_equal(m[:, HEAD_TEMPO], np.arange(4) == LifecycleOp.GERMINATE)
    batched = np.asarray(jax.jit(dist.causal_masks)(jnp.stack([jnp.arange(4), jnp.arange(4)[::-1]])))  # [E, T]
    np.testing.assert_array_equal(batched, np.stack([m, m[::-1]]))


def test_op_first_sampling_draws_the_slot_under_the_op_mask_and_scores_it_there():
    """π(slot | op): the slot is drawn under the op's own mask and its log-prob is taken under that mask."""
    E, S = 256, 3
    logits = [jnp.zeros((E, S)), jnp.zeros((E, 5)), jnp.zeros((E, 3)), jnp.zeros((E, 4)), jnp.zeros((E, 3))]
    masks = dist.Masks(jnp.ones((E, S), bool), jnp.ones((E, 5), bool).at[:, 0].set(False), jnp.ones((E, 3), bool),
                       jnp.ones((E, 4), bool), jnp.ones((E, 3), bool).at[:, 2].set(False))
    slot_by_op = jnp.asarray([[True, True, True], [False, False, True], [True, False, False], [False, True, False]])
    slot_by_op = jnp.broadcast_to(slot_by_op, (E, 4, S))
    actions, log_probs, used = dist.sample_heads_op_first(jax.random.PRNGKey(3), logits, masks, slot_by_op)
    op, slot = np.asarray(actions[:, 3]), np.asarray(actions[:, 0])
    assert set(op.tolist()) == {0, 1, 2, 3}
    allowed = np.asarray(slot_by_op[0])
    assert all(allowed[o, s] for o, s in zip(op, slot))
    np.testing.assert_array_equal(np.asarray(used.slot), allowed[op])
    expected = np.log(1.0 / allowed[op].sum(axis=1))  # uniform over the op's slots
    np.testing.assert_allclose(np.asarray(log_probs[:, 0]), expected, atol=1e-5)
    tempo = np.asarray(actions[:, HEAD_TEMPO])  # the tempo head is drawn under its own mask, not the op's
    assert set(tempo.tolist()) == {0, 1}
    np.testing.assert_array_equal(np.asarray(used.tempo), np.asarray(masks.tempo))
    np.testing.assert_allclose(np.asarray(log_probs[:, HEAD_TEMPO]), np.log(0.5), atol=1e-5)
    np.testing.assert_allclose(np.asarray(dist.heads_log_prob(logits, used, actions)), np.asarray(log_probs),
                               atol=1e-6)
