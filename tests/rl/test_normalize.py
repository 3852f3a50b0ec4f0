"""Observation (RunningMeanStd, BEHAVIOUR §8.6) and reward (§12.9) normalisers, with worked examples."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rl.normalize import RewardNormalizer, RunningMeanStd


def _update(state, batch):
    return state.update(batch)


def _update_masked(state, batch, mask):
    return state.update(batch, mask)


def _normalize(state, x):
    return state.normalize(x)


def _reward_step(state, rewards):
    return state.update_and_normalize(rewards)


def _masked_out(state, rewards):
    """Rewards scaled with the current statistics, without updating them (an update with mask False)."""
    return state.update_and_normalize(rewards, mask=jnp.zeros(rewards.shape, bool))


def _reference_rewards(rewards, count=0, mean=0.0, m2=0.0):
    """A plain-Python transcription of BEHAVIOUR §12.9."""
    out = []
    for r in rewards:
        count += 1
        delta = r - mean
        mean += delta / count
        m2 += delta * (r - mean)
        scaled = r if count < 2 else r / max(1e-8, (m2 / (count - 1)) ** 0.5)
        out.append(min(10.0, max(-10.0, scaled)))
    return out, (count, mean, m2)


class ObsNormalizerTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_ema_update_matches_the_worked_example(self):
        state = self.variant(_update)(RunningMeanStd.init(1, momentum=0.99), jnp.array([[2.0], [4.0]]))
        np.testing.assert_allclose(state.mean, [0.03], rtol=1e-5)
        np.testing.assert_allclose(state.var, [1.0891], rtol=1e-5)
        np.testing.assert_allclose(state.count, 2.0001, rtol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_welford_update_matches_the_worked_example(self):
        state = self.variant(_update)(RunningMeanStd.init(1), jnp.array([[2.0], [4.0]]))
        np.testing.assert_allclose(state.mean, [2.99985], rtol=1e-5)
        np.testing.assert_allclose(state.var, [1.00045], rtol=1e-5)
        np.testing.assert_allclose(state.count, 2.0001, rtol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_masked_rows_are_ignored_and_an_empty_batch_changes_nothing(self):
        batch = jnp.array([[2.0, 0.0], [4.0, 1.0], [1e6, -1e6]])
        f = self.variant(_update_masked)
        masked = f(RunningMeanStd.init(2, 0.99), batch, jnp.array([True, True, False]))
        plain = RunningMeanStd.init(2, 0.99).update(batch[:2])
        chex.assert_trees_all_close(masked, plain, rtol=1e-6)
        empty = f(RunningMeanStd.init(2, 0.99), batch, jnp.zeros(3, bool))
        chex.assert_trees_all_equal(empty, RunningMeanStd.init(2, 0.99))

    @chex.variants(with_jit=True, without_jit=True)
    def test_normalize_is_clipped_centred_and_scaled(self):
        state = RunningMeanStd(mean=jnp.array([1.0, -2.0]), var=jnp.array([4.0, 0.25]), count=jnp.asarray(5.0))
        out = self.variant(_normalize)(state, jnp.array([[3.0, 100.0]]))
        np.testing.assert_allclose(out, [[2.0 / np.sqrt(4.0001), 10.0]], rtol=1e-5)


@given(seed=st.integers(0, 2**31 - 1), scale=st.sampled_from([1e-3, 1.0, 1e4, 1e7]),
       momentum=st.sampled_from([None, 0.99]))
@settings(max_examples=20)
def test_normalize_output_always_lies_in_minus_10_10(seed, scale, momentum):
    rng = np.random.default_rng(seed)
    state = RunningMeanStd.init(3, momentum)
    state = jax.jit(_update)(state, jnp.asarray(rng.normal(size=(8, 3)) * scale, jnp.float32))
    out = np.asarray(jax.jit(_normalize)(state, jnp.asarray(rng.normal(size=(16, 3)) * scale * 10, jnp.float32)))
    assert np.all(np.isfinite(out)) and np.all(np.abs(out) <= 10.0)


def test_welford_merges_of_two_batches_equal_one_merge_of_their_union():
    rng = np.random.default_rng(4)
    a, b = rng.normal(2.0, 3.0, size=(20, 4)), rng.normal(-1.0, 0.5, size=(7, 4))
    two = RunningMeanStd.init(4).update(jnp.asarray(a)).update(jnp.asarray(b))
    one = RunningMeanStd.init(4).update(jnp.asarray(np.concatenate([a, b])))
    chex.assert_trees_all_close(two, one, rtol=1e-4, atol=1e-5)


def test_ema_statistics_follow_the_momentum_formula_over_several_updates():
    rng = np.random.default_rng(5)
    state, mean, var = RunningMeanStd.init(2, 0.99), np.zeros(2), np.ones(2)
    for _ in range(3):
        x = rng.normal(3.0, 2.0, size=(100, 2))
        mu, s2 = x.mean(0), x.var(0)
        delta = mu - mean
        mean, var = 0.99 * mean + 0.01 * mu, 0.99 * var + 0.01 * s2 + 0.99 * 0.01 * delta**2
        state = state.update(jnp.asarray(x, jnp.float32))
    np.testing.assert_allclose(state.mean, mean, rtol=1e-4)
    np.testing.assert_allclose(state.var, var, rtol=1e-4)
    np.testing.assert_allclose(state.count, 300.0001, rtol=1e-6)


class RewardNormalizerTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_rewards_2_4_6_8_match_the_worked_example(self):
        state, out = self.variant(_reward_step)(RewardNormalizer.init(), jnp.array([2.0, 4.0, 6.0, 8.0]))
        np.testing.assert_allclose(out, [2.0, 2.8284, 3.0, 3.0984], atol=1e-4)
        np.testing.assert_allclose(state.stats(), (4.0, 5.0, 20.0), rtol=1e-6)
        kept, scaled = self.variant(_masked_out)(state, jnp.array([5.0]))
        np.testing.assert_allclose(scaled, [1.9365], atol=1e-4)
        np.testing.assert_allclose(kept.stats(), state.stats(), rtol=0)

    @chex.variants(with_jit=True, without_jit=True)
    def test_first_samples_are_only_clipped(self):
        f = self.variant(_reward_step)
        assert float(f(RewardNormalizer.init(), jnp.array([5.0]))[1][0]) == 5.0
        assert float(f(RewardNormalizer.init(), jnp.array([100.0]))[1][0]) == 10.0
        assert float(f(RewardNormalizer.init(), jnp.array([-100.0]))[1][0]) == -10.0

    @chex.variants(with_jit=True, without_jit=True)
    def test_two_equal_rewards_hit_the_clip_and_zeros_then_a_reward_stay_finite(self):
        f = self.variant(_reward_step)
        _, out = f(RewardNormalizer.init(), jnp.array([10.0, 10.0]))
        assert np.asarray(out).tolist() == [10.0, 10.0]
        _, out = f(RewardNormalizer.init(), jnp.concatenate([jnp.zeros(24), jnp.array([0.78])]))
        assert np.all(np.isfinite(np.asarray(out)))
        ref, _ = _reference_rewards([0.0] * 24 + [0.78])
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def _padded(values, width=12):
    """Fixed-shape [12] rewards and mask (masked tail entries never touch the statistics)."""
    r = np.zeros(width, np.float32)
    r[: len(values)] = values
    return jnp.asarray(r), jnp.arange(width) < len(values)


_masked_reward_step = jax.jit(lambda state, r, m: state.update_and_normalize(r, m))


@given(rewards=st.lists(st.floats(-50, 50), min_size=1, max_size=12), split=st.integers(0, 12))
@settings(max_examples=25)
def test_reward_stream_matches_reference_and_round_trips_through_count_mean_m2(rewards, split):
    split = min(split, len(rewards))
    state, first = _masked_reward_step(RewardNormalizer.init(), *_padded(rewards[:split]))
    restored = RewardNormalizer.from_stats(*state.stats())
    restored, second = _masked_reward_step(restored, *_padded(rewards[split:]))
    ref, ref_stats = _reference_rewards(rewards)
    out = np.concatenate([np.asarray(first)[:split], np.asarray(second)[: len(rewards) - split]])
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(restored.stats(), ref_stats, rtol=1e-4, atol=1e-3)


def test_masked_rewards_are_scaled_without_updating_the_statistics():
    state, out = RewardNormalizer.init().update_and_normalize(jnp.array([2.0, 4.0, 1000.0, 6.0]),
                                                              jnp.array([True, True, False, True]))
    np.testing.assert_allclose(state.stats(), (3.0, 4.0, 8.0), rtol=1e-6)
    np.testing.assert_allclose(out, [2.0, 2.8284, 10.0, 3.0], atol=1e-4)


def test_non_finite_observation_rows_are_left_out_and_counted():
    """Issue 12, defect 8: one NaN row poisoned the observation normaliser for good."""
    rng = np.random.default_rng(0)
    clean = rng.normal(size=(6, 3)).astype(np.float32)
    dirty = np.concatenate([clean[:2], [[np.nan, 0, 0]], clean[2:4], [[0, np.inf, 0]], clean[4:]]).astype(np.float32)
    for momentum in (None, 0.99):
        state = RunningMeanStd.init(3, momentum)
        got, skipped = jax.jit(lambda s, x: s.update_counted(x))(state, jnp.asarray(dirty))
        want = state.update(jnp.asarray(clean))
        assert int(skipped) == 2
        chex.assert_trees_all_close(got, want, rtol=1e-6)


def test_an_overflowing_observation_batch_is_left_out_whole():
    state = RunningMeanStd.init(2)
    got, skipped = state.update_counted(jnp.asarray([[3e38, 0.0], [-3e38, 0.0]], jnp.float32))
    assert int(skipped) == 2 and bool(jnp.all(jnp.isfinite(got.var)))
    chex.assert_trees_all_equal(got, state)


def test_non_finite_rewards_never_reach_the_reward_statistics():
    """Issue 12, defect 8: one NaN or huge reward made mean/M2 NaN or inf for the rest of the run."""
    rewards = jnp.asarray([1.0, np.nan, 2.0, np.inf, -np.inf, 3.0, 3e38, -3e38, 4.0], jnp.float32)
    state, out = jax.jit(lambda s, r: s.update_and_normalize(r))(RewardNormalizer.init(), rewards)
    want, _ = RewardNormalizer.init().update_and_normalize(jnp.asarray([1.0, 2.0, 3.0, 4.0], jnp.float32))
    assert all(np.isfinite(v) for v in state.stats())
    assert np.allclose(state.stats(), want.stats(), rtol=1e-6)
    later, scaled = state.update_and_normalize(jnp.asarray([5.0], jnp.float32))
    assert np.all(np.isfinite(np.asarray(scaled))) and all(np.isfinite(v) for v in later.stats())


def test_a_nan_feature_normalizes_to_the_mean_and_infinities_to_the_clip():
    """Issue 22: a NaN observation reached the policy as NaN (no valid action, exit 1) where +inf was clipped."""
    state = RunningMeanStd.init(3).update(jnp.asarray(np.random.default_rng(1).normal(size=(8, 3)), jnp.float32))
    x = jnp.asarray([[np.nan, np.inf, -np.inf], [0.5, 0.5, 0.5]], jnp.float32)
    normalize = jax.jit(lambda s, v: s.normalize(v))
    z = np.asarray(normalize(state, x))
    assert z[0].tolist() == [0.0, 10.0, -10.0]
    want = (np.asarray(x[1]) - np.asarray(state.mean)) / np.sqrt(np.asarray(state.var) + state.eps)
    np.testing.assert_allclose(z[1], want, rtol=1e-6)  # finite rows as before
