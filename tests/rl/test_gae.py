"""GAE (BEHAVIOUR §11.3): worked examples, known-answer fixtures, a NumPy loop reference, masking, and rows that
hold several episodes (a truncation anywhere, issue 69) against a second reference by episode segments."""

import chex
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rl.gae import gae, valid_mask


def reference_gae(r, v, done, trunc, boot, gamma, lam, step_count=None):
    """A literal NumPy transcription of BEHAVIOUR §11.3, one env row at a time, over its L valid steps: a
    step ends its episode's trace when it is terminal, truncated (anywhere) or the row's last valid step."""
    r, v, done, trunc, boot = (np.asarray(x, np.float64) for x in (r, v, done, trunc, boot))
    done, trunc = done.astype(bool), trunc.astype(bool)
    rows = r.reshape(-1, r.shape[-1])
    adv = np.zeros_like(rows)
    counts = np.full(rows.shape[0], r.shape[-1]) if step_count is None else np.asarray(step_count).reshape(-1)
    flat = [x.reshape(rows.shape) for x in (v, done, trunc, boot)]
    for e in range(rows.shape[0]):
        V, D, TR, BOOT = (x[e] for x in flat)
        L, g = int(counts[e]), 0.0
        for t in range(L - 1, -1, -1):
            terminal = D[t] and not TR[t]
            if TR[t]:
                v_next, keep = BOOT[t], 1.0
            elif terminal or t == L - 1:
                v_next, keep = 0.0, 1.0 - float(terminal)
            else:
                v_next, keep = V[t + 1], 1.0
            if TR[t] or terminal or t == L - 1:
                g = 0.0
            delta = rows[e, t] + gamma * keep * v_next - V[t]
            g = delta + gamma * lam * g
            adv[e, t] = g
    adv = adv.reshape(r.shape)
    valid = np.arange(r.shape[-1]) < counts.reshape(r.shape[:-1] + (1,))
    return adv, np.where(valid, adv + v, 0.0)


def _gae_09_08(r, v, d, tr, b):
    return gae(r, v, d, tr, b, 0.9, 0.8)


def _gae_0995(r, v, d, tr, b):
    return gae(r, v, d, tr, b, 0.995, 0.97)


def _gae_fixture(r, v, d, tr, b, lam):
    return gae(r, v, d, tr, b, 0.9, lam)


def _gae_masked(r, v, d, tr, b, gamma, lam, valid):
    return gae(r, v, d, tr, b, gamma, lam, valid)


# Known-answer fixtures, γ = 0.9, worked by hand as A_t = Σ_k (γλ)^k δ_{t+k} inside each episode segment
# (an independent formula from the recursion): r = [1, 0, −0.5, 2, 1], V = [0.2, 0.4, −0.1, 0.5, 0.3].
FIX_R = [1.0, 0.0, -0.5, 2.0, 1.0]
FIX_V = [0.2, 0.4, -0.1, 0.5, 0.3]
FIX_CASES = {  # name: (done, truncated, bootstrap)
    "terminal": ([0, 0, 0, 0, 1], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0.0]),
    "truncated": ([0, 0, 0, 0, 1], [0, 0, 0, 0, 1], [0, 0, 0, 0, 1.5]),
    "mid_terminal": ([0, 0, 1, 0, 1], [0, 0, 0, 0, 1], [0, 0, 0, 0, 0.7]),
}
FIX_EXPECTED = {
    1.0: {"terminal": [2.5091, 1.499, 2.21, 2.4, 0.7], "truncated": [3.3948, 2.4832, 3.3035, 3.615, 2.05],
          "mid_terminal": [0.395, -0.85, -0.4, 2.967, 1.33]},
    0.7: {"terminal": [1.424, 0.419, 1.4429, 2.211, 0.7], "truncated": [1.6367, 0.7566, 1.9787, 3.0615, 2.05],
          "mid_terminal": [0.6925, -0.742, -0.4, 2.6079, 1.33]},
    0.4: {"terminal": [1.0844, -0.2099, 0.7779, 2.022, 0.7], "truncated": [1.1071, -0.147, 0.9529, 2.508, 2.05],
          "mid_terminal": [0.9318, -0.634, -0.4, 2.2488, 1.33]},
}


@st.composite
def gae_inputs(draw):
    """Rows [..., T] (leading shape (), (3,) or (2, 3)) with random flags, values and step counts."""
    t = draw(st.sampled_from([1, 4, 9]))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    shape = draw(st.sampled_from([(), (3,), (2, 3)])) + (t,)
    r = rng.normal(size=shape).astype(np.float32)
    v = rng.normal(size=shape).astype(np.float32)
    done = rng.random(shape) < draw(st.sampled_from([0.0, 0.3, 0.8]))
    trunc = done & (rng.random(shape) < 0.5)
    boot = rng.normal(size=shape).astype(np.float32)
    counts = rng.integers(0, t + 1, size=shape[:-1])
    gamma = draw(st.floats(0.01, 1.0))
    lam = draw(st.floats(0.0, 1.0))
    return r, v, done, trunc, boot, counts, gamma, lam


class GAETest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_worked_example_truncated_last_step_with_bootstrap_two(self):
        ones, half = jnp.ones(3), jnp.full(3, 0.5)
        flags = jnp.array([False, False, True])
        adv, ret = self.variant(_gae_09_08)(ones, half, flags, flags, jnp.array([0.0, 0.0, 2.0]))
        np.testing.assert_allclose(adv, [2.82632, 2.606, 2.3], atol=1e-4)
        np.testing.assert_allclose(ret, [3.32632, 3.106, 2.8], atol=1e-4)

    @chex.variants(with_jit=True, without_jit=True)
    def test_worked_example_terminal_last_step(self):
        ones, half = jnp.ones(3), jnp.full(3, 0.5)
        adv, ret = self.variant(_gae_09_08)(ones, half, jnp.array([False, False, True]), jnp.zeros(3, bool),
                                            jnp.zeros(3))
        np.testing.assert_allclose(adv, [1.8932, 1.31, 0.5], atol=1e-4)
        np.testing.assert_allclose(ret, [2.3932, 1.81, 1.0], atol=1e-4)

    @chex.variants(with_jit=True, without_jit=True)
    def test_worked_example_single_truncated_step(self):
        adv, ret = self.variant(_gae_0995)(jnp.ones(1), jnp.zeros(1), jnp.ones(1, bool), jnp.ones(1, bool),
                                           jnp.full(1, 3.0))
        np.testing.assert_allclose(adv, [3.985], atol=1e-4)
        np.testing.assert_allclose(ret, [3.985], atol=1e-4)

    @chex.variants(with_jit=True, without_jit=True)
    def test_known_answer_fixtures_at_lambda_1_07_04(self):
        f = self.variant(_gae_fixture, static_argnames=())
        for lam, cases in FIX_EXPECTED.items():
            for name, expected in cases.items():
                done, trunc, boot = FIX_CASES[name]
                adv, ret = f(jnp.array(FIX_R), jnp.array(FIX_V), jnp.array(done, bool), jnp.array(trunc, bool),
                             jnp.array(boot), lam)
                np.testing.assert_allclose(adv, expected, atol=1e-3, err_msg=f"lambda={lam} {name}")
                np.testing.assert_allclose(ret, np.add(expected, FIX_V), atol=1e-3)
                ref, _ = reference_gae(FIX_R, FIX_V, done, trunc, boot, 0.9, lam)
                np.testing.assert_allclose(ref, expected, atol=1e-3)

    @chex.variants(with_jit=True, without_jit=True)
    @given(inputs=gae_inputs())
    @settings(max_examples=10)
    def test_matches_the_numpy_loop_reference_for_random_flags_and_step_counts(self, inputs):
        r, v, done, trunc, boot, counts, gamma, lam = inputs
        valid = np.arange(r.shape[-1]) < counts[..., None]
        adv, ret = self.variant(_gae_masked)(r, v, done, trunc, boot, gamma, lam, valid)
        ref_adv, ref_ret = reference_gae(r, v, done, trunc, boot, gamma, lam, counts)
        np.testing.assert_allclose(adv, ref_adv, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(ret, ref_ret, rtol=1e-4, atol=1e-4)


def test_lambda_one_gives_discounted_return_minus_value_on_a_terminal_episode():
    rng = np.random.default_rng(0)
    r, v = rng.normal(size=7), rng.normal(size=7)
    done = np.arange(7) == 6
    adv, _ = gae(r, v, done, np.zeros(7, bool), np.zeros(7), 0.95, 1.0)
    mc = [sum(0.95**k * r[t + k] for k in range(7 - t)) for t in range(7)]
    np.testing.assert_allclose(adv, np.array(mc) - v, atol=1e-5)


def test_envs_never_mix_small_and_large_rewards():
    r = np.array([[1.0, 1, 1], [100.0, 100, 100]])
    v = np.array([[1.0, 1, 1], [50.0, 50, 50]])
    done = np.array([[False, False, True]] * 2)
    adv, _ = gae(r, v, done, np.zeros_like(done), np.zeros_like(r), 0.99, 0.95)
    assert np.abs(np.asarray(adv[0])).max() < 10 and np.abs(np.asarray(adv[1])).max() > 10


@given(inputs=gae_inputs())
@settings(max_examples=10)
def test_invalid_steps_are_zero_and_never_leak_into_valid_ones(inputs):
    r, v, done, trunc, boot, counts, gamma, lam = inputs
    valid = np.asarray(valid_mask(counts, r.shape[-1]))
    garbage = lambda x: np.where(valid, x, 1e6).astype(np.float32)  # noqa: E731
    f = lambda *a: np.asarray(_gae_masked(*a, gamma, lam, valid)[0])  # noqa: E731
    clean = f(r, v, done, trunc, boot)
    dirty = f(garbage(r), garbage(v), done | ~valid, trunc, garbage(boot))
    np.testing.assert_allclose(clean, dirty, rtol=1e-5, atol=1e-5)
    assert np.all(clean[~valid] == 0.0)


def test_valid_mask_is_t_less_than_step_count():
    np.testing.assert_array_equal(valid_mask(jnp.array([0, 2, 3]), 3),
                                  [[False] * 3, [True, True, False], [True] * 3])


# ----------------------------------------------------------------------------------------------
# issue 69: truncation anywhere in a row (rows that hold several episodes)
# ----------------------------------------------------------------------------------------------


def segment_gae(r, v, done, trunc, boot, gamma, lam, step_count=None):
    """A slow reference by another route: cut each row into its episodes (a segment ends at a terminal, a
    truncated or the row's last valid step), then A_t = Σ_k (γλ)^k δ_{t+k} over the rest of t's segment, with
    δ_t = r_t + γ·v_next − V[t] and v_next the bootstrap at a truncation, 0 at a terminal or a row's end, and
    V[t+1] inside the segment."""
    r, v, boot = (np.asarray(x, np.float64) for x in (r, v, boot))
    done, trunc = np.asarray(done, bool), np.asarray(trunc, bool)
    shape = r.shape
    counts = np.full(shape[:-1], shape[-1]) if step_count is None else np.asarray(step_count)
    r, v, boot, done, trunc = (x.reshape(-1, shape[-1]) for x in (r, v, boot, done, trunc))
    counts = counts.reshape(-1)
    adv = np.zeros_like(r)
    for e in range(r.shape[0]):
        length, start = int(counts[e]), 0
        while start < length:
            end = start
            while not (trunc[e, end] or (done[e, end] and not trunc[e, end]) or end == length - 1):
                end += 1
            v_next = [v[e, t + 1] for t in range(start, end)]
            v_next.append(boot[e, end] if trunc[e, end] else 0.0)
            deltas = [r[e, t] + gamma * v_next[t - start] - v[e, t] for t in range(start, end + 1)]
            for t in range(start, end + 1):
                adv[e, t] = sum((gamma * lam) ** k * deltas[t - start + k] for k in range(end - t + 1))
            start = end + 1
    adv = adv.reshape(shape)
    valid = np.arange(shape[-1]) < counts.reshape(shape[:-1] + (1,))
    return adv, np.where(valid, adv + v.reshape(shape), 0.0)


@st.composite
def rows_of_several_episodes(draw):
    """Rows [..., T] whose episodes end anywhere: terminals and truncations (with or without `done`) at random
    steps, random step counts."""
    t = draw(st.sampled_from([1, 5, 12]))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    shape = draw(st.sampled_from([(), (4,), (2, 3)])) + (t,)
    r, v, boot = (rng.normal(size=shape).astype(np.float32) for _ in range(3))
    ends = rng.random(shape) < draw(st.sampled_from([0.1, 0.3, 0.6]))
    trunc = ends & (rng.random(shape) < 0.5)
    done = (ends & ~trunc) | (trunc & (rng.random(shape) < 0.5))
    counts = rng.integers(0, t + 1, size=shape[:-1])
    return r, v, done, trunc, boot, counts, draw(st.floats(0.01, 1.0)), draw(st.floats(0.0, 1.0))


@given(inputs=rows_of_several_episodes())
@settings(max_examples=40)
def test_a_truncation_anywhere_bootstraps_from_its_own_value_and_cuts_the_trace(inputs):
    r, v, done, trunc, boot, counts, gamma, lam = inputs
    valid = np.arange(r.shape[-1]) < counts[..., None]
    adv, ret = _gae_masked(r, v, done, trunc, boot, gamma, lam, valid)
    ref_adv, ref_ret = segment_gae(r, v, done, trunc, boot, gamma, lam, counts)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-4, atol=1e-4)


def test_worked_example_a_truncation_inside_a_row_followed_by_another_episode():
    """γ = 0.9, λ = 1, r = 1 at every step; the first episode (V = 10, 10) is cut at t = 1 where its state is
    worth 20; the next one (V = −50, −50) runs to the row's end. Its first value must not leak back:
    A1 = 1 + 0.9·20 − 10 = 9, A0 = (1 + 9 − 10) + 0.9·9 = 8.1; A3 = 1 + 50 = 51, A2 = (1 − 45 + 50) + 0.9·51 = 51.9.
    (Bootstrapping from the next episode's first value instead gave A1 = 1 − 45 − 10 + 0.9·51.9 = −7.29.)"""
    r, v = np.ones(4), np.array([10.0, 10.0, -50.0, -50.0])
    trunc = np.array([False, True, False, False])
    boot = np.array([0.0, 20.0, 0.0, 0.0])
    adv, ret = gae(r, v, trunc, trunc, boot, 0.9, 1.0)
    np.testing.assert_allclose(adv, [8.1, 9.0, 51.9, 51.0], atol=1e-4)
    np.testing.assert_allclose(ret, [18.1, 19.0, 1.9, 1.0], atol=1e-4)
    np.testing.assert_allclose(segment_gae(r, v, trunc, trunc, boot, 0.9, 1.0)[0], [8.1, 9.0, 51.9, 51.0], atol=1e-9)
