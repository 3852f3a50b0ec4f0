"""PPO (BEHAVIOUR §11): config and schedule, optimizer, losses, acting, and the jitted update."""

import dataclasses
from functools import partial

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_fx.config import TrainingConfig
from esper_fx.contracts.actions import ACTION_HEADS, HEAD_OP, HEAD_TEMPO, NUM_HEADS, head_sizes
from esper_fx.contracts.observation import obs_dim
from esper_fx.outputs.history import SKIPPED_UPDATE, metrics_to_python
from rl import distributions as dist
from tests.rl.action_checks import assert_actions_allowed
from rl import ppo
from rl.config import REFERENCE_PPO, LearnerConfig
from rl import rollout
from rl.network import ActorCritic

E, T, D, S, B = 4, 25, 89, 3, 5
assert D == obs_dim(S, True, B)
# The BEHAVIOUR §11 maths is checked under the reference settings (our defaults are LEARNING.md's): one Adam step
# per batch, lr 3e-4, clip 0.5, target_kl 0.015, entropy 0.05 (min 0.01).
REFERENCE = ppo.PPOConfig(**REFERENCE_PPO)
CFG = REFERENCE


# ------------------------------------------------------------------------------------------
# helpers: rollouts collected with the real policy on synthetic observations
# ------------------------------------------------------------------------------------------


def random_masks(rng, n_envs=E):
    masks = []
    for h, n in enumerate(head_sizes(S, B)):
        m = rng.random((n_envs, n)) < 0.6
        m[:, 0] = h == HEAD_OP  # noop blueprint, slot 0, linear blend and fast tempo masked; WAIT always allowed
        m[:, 1] = True
        masks.append(jnp.asarray(m))
    return dist.Masks(*masks)


def collect(state, key, obs_fn, reward_fn, n_envs=E, steps=T, terminal_each_step=False, seed=0):
    """Run the policy for `steps` steps; the last step is truncated with a bootstrap value."""
    rng = np.random.default_rng(seed)
    net = state.network
    ro = rollout.init(n_envs, steps, D, S, B, net.hidden_dim if net.recurrent else None)
    carry = net.initial_carry(n_envs)
    for t in range(steps):
        key, k = jax.random.split(key)
        obs, ctx = obs_fn(rng, n_envs)
        masks = random_masks(rng, n_envs)
        out = ppo.act(state, obs, masks, carry, k)
        assert_actions_allowed(out.actions, masks)
        reward = jnp.asarray(reward_fn(ctx, np.asarray(out.actions)), jnp.float32)
        last = t == steps - 1
        done = jnp.full((n_envs,), terminal_each_step or last)
        truncated = jnp.full((n_envs,), last and not terminal_each_step)
        boot = ppo.value(state, obs, out.carry) if last else jnp.zeros(n_envs)
        step = rollout.StepData(obs, obs, out.actions, out.log_probs, out.value, reward, reward, done, truncated,
                          boot, masks, carry)
        ro = rollout.append(ro, t, step)
        carry = out.carry
    return ro


def gaussian_obs(rng, n):
    return jnp.asarray(rng.normal(size=(n, D)), jnp.float32), None


def gaussian_reward(ctx, actions):
    return np.random.default_rng(int(actions.sum())).normal(size=actions.shape[0])


def tree_equal(a, b):
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def adam_count(opt_state):
    adam = [s for s in jax.tree.leaves(opt_state, is_leaf=lambda x: isinstance(x, optax.ScaleByAdamState))
            if isinstance(s, optax.ScaleByAdamState)]
    return int(adam[0].count)


@partial(jax.jit, static_argnames=("cfg",))
def optimizer_updates(grads, params, cfg):
    tx = ppo.make_optimizer(cfg)
    return tx.update(grads, tx.init(params), params)[0]


@pytest.fixture(scope="module")
def fresh():
    net = ActorCritic(S, B)
    state = ppo.init_train_state(jax.random.PRNGKey(0), net, D, CFG)
    return state, collect(state, jax.random.PRNGKey(1), gaussian_obs, gaussian_reward)


# ------------------------------------------------------------------------------------------
# config, entropy schedule, optimizer
# ------------------------------------------------------------------------------------------


def test_config_from_training_config_copies_every_ppo_field_and_is_hashable():
    tc = TrainingConfig(lr=1e-4, update_epochs=3, num_minibatches=2, target_kl=None, clip_value=False)
    cfg = tc.ppo
    assert (cfg.lr, cfg.update_epochs, cfg.num_minibatches, cfg.target_kl, cfg.clip_value) == (1e-4, 3, 2, None, False)
    assert TrainingConfig().ppo == ppo.PPOConfig()
    assert hash(cfg) == hash(TrainingConfig(lr=1e-4, update_epochs=3, num_minibatches=2, target_kl=None,
                                            clip_value=False).ppo)
    assert REFERENCE.kl_stop == pytest.approx(0.0225) and ppo.PPOConfig().kl_stop == pytest.approx(0.075)


@pytest.mark.parametrize(
    "overrides, steps, expected",
    [({}, [0, 1, 2, 3, 10], [0.05, 0.036667, 0.023333, 0.01, 0.01]),
     ({"entropy_coef": 0.005, "entropy_coef_start": None, "entropy_coef_end": None,
       "entropy_anneal_episodes": 0, "entropy_coef_min": 0.01}, [0, 7], [0.01, 0.01]),  # the reference floor
     ({"entropy_coef_start": 0.1, "entropy_coef_end": 0.01, "entropy_anneal_episodes": 40}, [5], [0.055])],
)
def test_entropy_coefficient_schedule_matches_the_spec(overrides, steps, expected):
    tc = TrainingConfig.preset("tinystories", n_envs=4, **overrides)
    got = [float(ppo.entropy_coefficient(tc.ppo, tc.n_envs, jnp.int32(s))) for s in steps]
    np.testing.assert_allclose(got, expected, atol=1e-6)
    np.testing.assert_allclose(got, [tc.entropy_coefficient(s) for s in steps], atol=1e-6)


def test_optimizer_clips_the_global_norm_then_takes_an_adam_step_with_eps_1e_5(fresh):
    state, _ = fresh
    grads = jax.tree.map(jnp.ones_like, state.params)
    updates = optimizer_updates(grads, state.params, CFG)
    n = sum(x.size for x in jax.tree.leaves(grads))
    g = 0.5 / np.sqrt(n)  # every clipped component
    expected = -3e-4 * g / (g + 1e-5)
    for u in jax.tree.leaves(updates):
        np.testing.assert_allclose(u, expected, rtol=1e-4)


def test_weight_decay_applies_only_to_value_head_parameters(fresh):
    state, _ = fresh
    zeros = jax.tree.map(jnp.zeros_like, state.params)
    updates = optimizer_updates(zeros, state.params, ppo.PPOConfig(**{**REFERENCE_PPO, "weight_decay": 0.1}))
    for module, sub in updates.items():
        for u, p in zip(jax.tree.leaves(sub), jax.tree.leaves(state.params[module])):
            expected = -3e-4 * 0.1 * p if module == "value_head" else jnp.zeros_like(p)
            np.testing.assert_allclose(u, expected, rtol=1e-5, atol=1e-12)


@partial(jax.jit, static_argnames=("cfg",))
def flat_optimizer_updates(grads, params, cfg):
    flat_p, unravel = ravel_pytree(params)
    flat_g, _ = ravel_pytree(grads)
    tx = ppo.make_optimizer(cfg, ppo.flat_decay_mask(params))
    return unravel(tx.update(flat_g, tx.init(flat_p), flat_p)[0])


def test_the_raveled_optimizer_takes_the_same_step_as_the_optimizer_on_the_params_tree(fresh):
    state, _ = fresh
    rng = np.random.default_rng(0)
    grads = jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape), jnp.float32), state.params)
    cfg = ppo.PPOConfig(**{**REFERENCE_PPO, "weight_decay": 0.1})
    chex.assert_trees_all_close(flat_optimizer_updates(grads, state.params, cfg),
                                optimizer_updates(grads, state.params, cfg), rtol=1e-5, atol=1e-10)
    flat, _ = ravel_pytree(state.params)
    assert adam_count(state.opt_state) == 0 and jax.tree.leaves(state.opt_state)[1].shape == flat.shape


# ------------------------------------------------------------------------------------------
# losses and statistics (chex variants)
# ------------------------------------------------------------------------------------------


def _value_loss_clip(v, v_old, r, valid):
    return ppo.value_loss(v, v_old, r, valid, True, 10.0)


def _value_loss_plain(v, v_old, r, valid):
    return ppo.value_loss(v, v_old, r, valid, False, 10.0)


def _policy_clipped(log_ratio, adv, m):
    return ppo.policy_loss(log_ratio, adv, m, 0.2)[0]


def _policy_unclipped(log_ratio, adv, m):
    return ppo.policy_loss(log_ratio, adv, m, 1e9)[0]


def _kl(log_ratio, m, valid):
    return ppo.approx_kl(log_ratio, m, valid)


def _normalize_adv(adv, valid):
    return ppo.normalize_advantages(adv, valid)


def _ev(ret, values, valid):
    return ppo.explained_variance(ret, values, valid)


SMALL_HEADS = (3, 3, 3, 4, 3)  # slot, blueprint, blend, op, tempo; few distinct shapes keep the eager (without_jit) variant quick


def _head_logits(rng, shape):
    return tuple(jnp.asarray(rng.normal(size=shape + (n,)), jnp.float32) for n in SMALL_HEADS)


def _logit_batch(rng, ops, valid):
    """A Batch whose masks/actions are random and whose op head takes the given ops."""
    shape = ops.shape
    masks = dist.Masks(*(jnp.ones(shape + (n,), bool) for n in SMALL_HEADS))
    actions = np.stack([ops if h == HEAD_OP else rng.integers(0, n, shape) for h, n in enumerate(SMALL_HEADS)],
                       axis=-1)
    return ppo.Batch(
        obs=None, actions=jnp.asarray(actions, jnp.int32),
        old_log_probs=jnp.asarray(rng.normal(size=shape + (NUM_HEADS,)) * 0.1 - 1.0, jnp.float32),
        old_values=jnp.asarray(rng.normal(size=shape), jnp.float32),
        advantages=jnp.asarray(rng.normal(size=shape), jnp.float32),
        returns=jnp.asarray(rng.normal(size=shape), jnp.float32), masks=masks, carry0=(), valid=jnp.asarray(valid),
    )


def _loss_of_logits(logits, values, batch):
    ev = ppo.Evaluation(dist.heads_log_prob(logits, batch.masks, batch.actions), values,
                        dist.heads_entropy(logits, batch.masks))
    return ppo.loss_from_evaluation(ev, batch, 0.05, CFG)[0]


def _logit_grads(logits, values, batch):
    return jax.grad(_loss_of_logits)(logits, values, batch)


class LossTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_value_loss_example_gives_12_5_with_clipping_and_12_5_without(self):
        """v = 20, v_old = 0, R = 15, clip 10: clipped max(25, 25) and unclipped 25, both halved (issue 69: the
        unclipped loss lost its ½ before)."""
        args = (jnp.array([20.0]), jnp.array([0.0]), jnp.array([15.0]), jnp.array([True]))
        assert float(self.variant(_value_loss_clip)(*args)) == pytest.approx(12.5)
        assert float(self.variant(_value_loss_plain)(*args)) == pytest.approx(12.5)
        assert CFG.value_coef * 12.5 == pytest.approx(6.25)

    @chex.variants(with_jit=True, without_jit=True)
    def test_value_loss_ignores_invalid_steps(self):
        v, v_old, r = jnp.array([1.0, 5.0, 1e9]), jnp.array([0.0, 0.0, 0.0]), jnp.array([0.0, 2.0, 0.0])
        got = self.variant(_value_loss_clip)(v, v_old, r, jnp.array([True, True, False]))
        assert float(got) == pytest.approx(0.5 * (1.0 + 9.0) / 2)

    @chex.variants(with_jit=True, without_jit=True)
    def test_clipped_and_unclipped_surrogates_agree_at_ratio_one(self):
        rng = np.random.default_rng(0)
        adv = jnp.asarray(rng.normal(size=(3, 7)), jnp.float32)
        m = jnp.asarray(rng.random((3, 7, NUM_HEADS)) < 0.7)
        zero = jnp.zeros((3, 7, NUM_HEADS))
        clipped = self.variant(_policy_clipped)(zero, adv, m)
        unclipped = self.variant(_policy_unclipped)(zero, adv, m)
        assert float(clipped) == pytest.approx(float(unclipped), abs=1e-7)
        g1 = jax.grad(_policy_clipped)(zero, adv, m)
        g2 = jax.grad(_policy_unclipped)(zero, adv, m)
        np.testing.assert_allclose(g1, g2, atol=1e-7)
        per_head = [-(np.asarray(adv)[np.asarray(m[..., h])]).sum() / max(int(m[..., h].sum()), 1)
                    for h in range(NUM_HEADS)]
        assert float(clipped) == pytest.approx(sum(per_head), rel=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_approx_kl_is_the_weighted_kl3_and_zero_at_ratio_one(self):
        rng = np.random.default_rng(1)
        log_ratio = jnp.asarray(rng.normal(size=(2, 5, NUM_HEADS)) * 0.3, jnp.float32)
        valid = jnp.asarray(rng.random((2, 5)) < 0.8).at[0, 0].set(True)
        m = jnp.asarray(rng.random((2, 5, NUM_HEADS)) < 0.5) & valid[..., None]
        m = m.at[..., 2].set(False)  # a head never relevant contributes 0
        got = float(self.variant(_kl)(log_ratio, m, valid))
        r = np.exp(np.asarray(log_ratio, np.float64))
        k3 = np.where(np.asarray(m), (r - 1) - np.log(r), 0.0)
        assert got == pytest.approx(k3.sum() / np.asarray(valid).sum(), rel=1e-5)
        assert float(self.variant(_kl)(jnp.zeros_like(log_ratio), m, valid)) == 0.0

    @chex.variants(with_jit=True, without_jit=True)
    def test_advantage_normalisation_uses_unbiased_std_and_one_transition_gives_zero(self):
        f = self.variant(_normalize_adv)
        one = f(jnp.array([3.0, 7.0]), jnp.array([True, False]))
        assert np.asarray(one).tolist() == [0.0, 0.0]
        adv = jnp.array([1.0, 2.0, 4.0, 100.0])
        valid = jnp.array([True, True, True, False])
        ref = (np.array([1.0, 2.0, 4.0]) - 7 / 3) / (np.std([1.0, 2.0, 4.0], ddof=1) + 1e-8)
        np.testing.assert_allclose(f(adv, valid), list(ref) + [0.0], rtol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_explained_variance_is_zero_for_constant_returns_and_the_formula_otherwise(self):
        f = self.variant(_ev)
        valid = jnp.ones(4, bool)
        assert float(f(jnp.full(4, 2.0), jnp.array([0.0, 1.0, 2.0, 3.0]), valid)) == 0.0
        assert float(f(jnp.array([1.0, 2.0]), jnp.array([0.0, 0.0]), jnp.array([True, False]))) == 0.0
        ret, val = np.array([1.0, 2.0, 4.0, 8.0]), np.array([1.5, 1.0, 4.0, 7.0])
        ref = 1 - np.var(ret - val, ddof=1) / np.var(ret, ddof=1)
        assert float(f(jnp.asarray(ret), jnp.asarray(val), valid)) == pytest.approx(ref, rel=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_gradients_of_causally_irrelevant_heads_are_exactly_zero(self):
        rng = np.random.default_rng(2)
        grads = self.variant(_logit_grads)
        values = jnp.zeros((3, 6))
        valid = np.ones((3, 6), bool)
        valid[2, 4:] = False
        logits = _head_logits(rng, (3, 6))
        g = grads(logits, values, _logit_batch(rng, np.zeros((3, 6), int), valid))  # every op WAIT
        for h in range(NUM_HEADS):
            if h != HEAD_OP:
                assert not np.any(np.asarray(g[h])), h
        assert np.any(np.asarray(g[HEAD_OP]))
        g = grads(logits, values, _logit_batch(rng, rng.choice([0, 2, 3], (3, 6)), valid))  # no GERMINATE
        assert not np.any(np.asarray(g[1])) and not np.any(np.asarray(g[2])) and np.any(np.asarray(g[0]))
        assert not np.any(np.asarray(g[HEAD_TEMPO]))  # the tempo acts only with GERMINATE
        g = grads(logits, values, _logit_batch(rng, np.ones((3, 6), int), valid))  # every head relevant
        assert len(g) == NUM_HEADS
        for h in range(NUM_HEADS):
            assert not np.any(np.asarray(g[h])[2, 4:]), "invalid steps must get no gradient"
            assert np.any(np.asarray(g[h])[:2])


def test_clip_fraction_and_ratio_statistics_come_from_the_op_head_only():
    log_ratio = jnp.zeros((1, 4, NUM_HEADS)).at[..., 1].set(3.0).at[..., HEAD_TEMPO].set(3.0).at[0, 0, 3].set(0.5)
    stats = ppo.op_ratio_stats(log_ratio[..., 3], jnp.ones((1, 4), bool), 0.2)
    assert float(stats["clip_fraction"]) == pytest.approx(0.25)
    assert float(stats["ratio_max"]) == pytest.approx(np.exp(0.5), rel=1e-6)
    assert float(stats["ratio_min"]) == 1.0


def test_update_gives_no_gradient_to_the_blueprint_blend_and_tempo_heads_without_germinate(fresh):
    state, ro = fresh
    ops = ro.actions[..., 3]
    assert bool(jnp.any(ops == 1))  # the rollout germinates somewhere, so the edit below matters
    no_germinate = ro.replace(actions=ro.actions.at[..., 3].set(jnp.where(ops == 1, 0, ops)))
    _, metrics = ppo.update(state, no_germinate, jax.random.PRNGKey(2), CFG, E)
    assert float(metrics["grad_norm_blueprint"]) == 0.0 and float(metrics["grad_norm_blend"]) == 0.0
    assert float(metrics["grad_norm_tempo"]) == 0.0
    assert float(metrics["grad_norm_op"]) > 0.0 and float(metrics["grad_norm_slot"]) > 0.0


# ------------------------------------------------------------------------------------------
# acting
# ------------------------------------------------------------------------------------------


def test_act_log_probs_match_a_full_sequence_evaluation(fresh):
    state, ro = fresh
    ev = jax.jit(ppo.evaluate, static_argnums=0)(state.network, state.params, ro.obs, ro.actions, ro.masks,
                                                 ro.carry0)
    np.testing.assert_allclose(ev.log_probs, ro.log_probs, atol=1e-5)
    np.testing.assert_allclose(ev.values, ro.values, atol=1e-5)
    assert np.all((np.asarray(ev.entropy) >= 0) & (np.asarray(ev.entropy) <= 1))


def test_act_flags_rows_with_non_finite_logits_or_no_valid_action(fresh):
    state, _ = fresh
    rng = np.random.default_rng(3)
    obs, masks = jnp.asarray(rng.normal(size=(E, D)), jnp.float32), random_masks(rng)
    out = ppo.act(state, obs, masks, state.network.initial_carry(E), jax.random.PRNGKey(0))
    assert out.actions.dtype == jnp.int32 and out.actions.shape == (E, 5) and bool(jnp.all(out.ok))
    assert out.log_probs.shape == (E, 5)
    empty = masks._replace(op=masks.op.at[2].set(False))
    out = ppo.act(state, obs, empty, state.network.initial_carry(E), jax.random.PRNGKey(0))
    assert np.asarray(out.ok).tolist() == [True, True, False, True]
    no_tempo = masks._replace(tempo=masks.tempo.at[1].set(False))
    out = ppo.act(state, obs, no_tempo, state.network.initial_carry(E), jax.random.PRNGKey(0))
    assert np.asarray(out.ok).tolist() == [True, False, True, True]
    bad = state.replace(params={**state.params, "op_head": jax.tree.map(lambda x: x * jnp.nan,
                                                                         state.params["op_head"])})
    out = ppo.act(bad, obs, masks, state.network.initial_carry(E), jax.random.PRNGKey(0))
    assert not bool(jnp.any(out.ok))
    assert_actions_allowed(out.actions, masks)  # even then, no masked action is emitted
    greedy = ppo.act(state, obs, masks, state.network.initial_carry(E), jax.random.PRNGKey(5), deterministic=True)
    again = ppo.act(state, obs, masks, state.network.initial_carry(E), jax.random.PRNGKey(6), deterministic=True)
    np.testing.assert_array_equal(greedy.actions, again.actions)


# ------------------------------------------------------------------------------------------
# the update
# ------------------------------------------------------------------------------------------


def test_default_update_on_a_fresh_rollout_is_one_step_at_ratio_one(fresh):
    state, ro = fresh
    new, metrics = ppo.update(state, ro, jax.random.PRNGKey(2), CFG, E)
    m = metrics_to_python(metrics)
    assert m["n_steps_taken"] == 1 and adam_count(new.opt_state) == 1 and int(new.train_steps) == 1
    assert abs(m["ratio_max"] - 1) <= 1e-5 and abs(m["ratio_min"] - 1) <= 1e-5 and abs(m["ratio_mean"] - 1) <= 1e-5
    assert m["clip_fraction"] == 0.0 and m["approx_kl"] < 1e-6
    assert m["early_stop"] is None and m["nonfinite_skipped"] is False and m["n_transitions"] == E * T
    assert not tree_equal(new.params, state.params)
    for key in ("policy_loss", "value_loss", "entropy", "explained_variance", "grad_norm", "entropy_coef",
                *(f"entropy_{h}" for h in ACTION_HEADS), *(f"policy_loss_{h}" for h in ACTION_HEADS),
                *(f"grad_norm_{h}" for h in ("slot", "blueprint", "blend", "op", "tempo", "value"))):
        assert np.isfinite(m[key]), key
    assert 0.0 <= m["entropy"] <= 1.0


def test_reported_gradient_norms_are_measured_before_clipping(fresh):
    state, ro = fresh
    _, metrics = ppo.update(state, ro, jax.random.PRNGKey(2), CFG, E)
    total = float(metrics["grad_norm"])
    heads = [float(metrics[f"grad_norm_{h}"]) for h in ("slot", "blueprint", "blend", "op", "tempo", "value")]
    assert total > CFG.max_grad_norm  # a clipped norm could not exceed 0.5
    assert all(h > 0 for h in heads) and np.sqrt(np.sum(np.square(heads))) <= total * (1 + 1e-6)


def test_kl_early_stop_example_keeps_params_and_reports_the_first_group(fresh):
    state, ro = fresh
    stale = ro.replace(log_probs=jnp.full_like(ro.log_probs, -10.0))
    new, metrics = ppo.update(state, stale, jax.random.PRNGKey(2), CFG, E)
    m = metrics_to_python(metrics)
    assert m["early_stop"] == [1, 0] and m["n_steps_taken"] == 0 and m["approx_kl"] > 0.0225
    assert tree_equal(new.params, state.params) and tree_equal(new.opt_state, state.opt_state)
    assert int(new.train_steps) == int(state.train_steps) + 1


def test_an_update_with_no_valid_transition_is_skipped_and_changes_nothing(fresh):
    state, ro = fresh
    new, metrics = ppo.update(state, rollout.discard_envs(ro, jnp.zeros(E, bool)), jax.random.PRNGKey(2), CFG, E)
    assert metrics_to_python(metrics) == SKIPPED_UPDATE and bool(metrics["skipped"])
    assert tree_equal(new.params, state.params) and int(new.train_steps) == int(state.train_steps)


def test_a_single_valid_transition_gives_zero_advantage_and_a_finite_step(fresh):
    state, ro = fresh
    one = ro.replace(step_count=jnp.array([0, 1, 0, 0], jnp.int32))
    new, metrics = ppo.update(state, one, jax.random.PRNGKey(2), CFG, E)
    m = metrics_to_python(metrics)
    assert m["n_transitions"] == 1 and m["n_steps_taken"] == 1 and m["policy_loss"] == 0.0
    assert all(np.isfinite(v) for k, v in m.items() if isinstance(v, float))
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(new.params))


def test_a_non_finite_loss_skips_the_step_and_keeps_params(fresh):
    state, ro = fresh
    poisoned = ro.replace(rewards=ro.rewards.at[1, 3].set(jnp.nan))
    new, metrics = ppo.update(state, poisoned, jax.random.PRNGKey(2), CFG, E)
    m = metrics_to_python(metrics)
    assert m["nonfinite_skipped"] is True and m["n_steps_taken"] == 0 and m["early_stop"] is None
    assert tree_equal(new.params, state.params) and tree_equal(new.opt_state, state.opt_state)
    assert int(new.train_steps) == int(state.train_steps) + 1


def test_whatever_is_stored_at_invalid_steps_never_reaches_the_update(fresh):
    state, ro = fresh
    short = ro.replace(step_count=jnp.array([25, 10, 25, 0], jnp.int32))
    invalid = ~short.valid

    def poison(x):
        v = invalid.reshape(invalid.shape + (1,) * (x.ndim - 2))
        return jnp.where(v, jnp.asarray(jnp.nan if x.dtype == jnp.float32 else 1, x.dtype), x)

    dirty = short.replace(obs=poison(short.obs), log_probs=poison(short.log_probs), values=poison(short.values),
                          rewards=poison(short.rewards), bootstrap=poison(short.bootstrap),
                          actions=poison(short.actions), masks=dist.Masks(*(poison(m) for m in short.masks)))
    clean_state, clean = ppo.update(state, short, jax.random.PRNGKey(2), CFG, E)
    dirty_state, dirty_m = ppo.update(state, dirty, jax.random.PRNGKey(2), CFG, E)
    assert not bool(dirty_m["nonfinite_skipped"]) and int(dirty_m["n_transitions"]) == 60
    chex.assert_trees_all_close(dirty_state.params, clean_state.params, rtol=1e-6, atol=1e-7)
    assert float(dirty_m["policy_loss"]) == pytest.approx(float(clean["policy_loss"]), rel=1e-5)


GROUP_ROWS = jax.jit(ppo.group_rows, static_argnums=3)


@given(n_groups=st.integers(1, 6), n_valid=st.integers(0, 6), seed=st.integers(0, 1000))
@settings(max_examples=25)
def test_env_groups_follow_array_split_and_cover_each_valid_env_once(n_groups, n_valid, seed):
    perm = np.random.default_rng(seed).permutation(6)
    groups = []
    for g in range(n_groups):
        idx, ok = GROUP_ROWS(jnp.asarray(perm), jnp.int32(n_valid), jnp.int32(g), n_groups)
        assert idx.shape == (-(-6 // n_groups),)
        groups.append(np.asarray(idx)[np.asarray(ok)].tolist())
    expected = [p.tolist() for p in np.array_split(perm[:n_valid], min(n_groups, n_valid))] if n_valid else []
    assert groups[: len(expected)] == expected
    assert all(not grp for grp in groups[len(expected):])


# ------------------------------------------------------------------------------------------
# multi-step updates and learning on a toy contextual bandit
# ------------------------------------------------------------------------------------------

BANDIT_CFG = ppo.PPOConfig(lr=3e-3, update_epochs=2, num_minibatches=2, target_kl=None, entropy_coef=0.01)


def bandit_obs(rng, n):
    ctx = rng.integers(0, 4, n)
    obs = np.zeros((n, D), np.float32)
    obs[np.arange(n), ctx] = 1.0
    return jnp.asarray(obs), ctx


def bandit_reward(ctx, actions):
    """1 for op == context, +1 more for GERMINATE with blueprint == context + 1 (chance ≈ 0.27, best 1.25)."""
    op, blueprint = actions[:, 3], actions[:, 1]
    return (op == ctx).astype(np.float32) + ((op == 1) & (blueprint == ctx + 1)).astype(np.float32)


def test_two_epochs_of_two_minibatches_on_four_envs_take_four_steps_and_learning_beats_chance():
    net = ActorCritic(S, B)
    state = ppo.init_train_state(jax.random.PRNGKey(10), net, D, BANDIT_CFG)
    key = jax.random.PRNGKey(11)
    mean_rewards = []
    for i in range(15):
        key, k_roll, k_upd = jax.random.split(key, 3)
        ro = collect(state, k_roll, bandit_obs, bandit_reward, terminal_each_step=True, seed=i)
        mean_rewards.append(float(ro.raw_rewards.mean()))
        state, metrics = ppo.update(state, ro, k_upd, BANDIT_CFG, E)
        assert int(metrics["n_steps_taken"]) == 4 and int(state.train_steps) == i + 1
    assert adam_count(state.opt_state) == 4 * 15
    assert mean_rewards[0] < 0.6 and np.mean(mean_rewards[-3:]) > 0.8, mean_rewards


def test_the_mlp_variant_updates_with_an_empty_carry():
    net = ActorCritic(S, B, recurrent=False)
    state = ppo.init_train_state(jax.random.PRNGKey(0), net, D, CFG)
    ro = collect(state, jax.random.PRNGKey(1), gaussian_obs, gaussian_reward, n_envs=2, steps=3)
    assert ro.carry0 == ()
    new, metrics = ppo.update(state, ro, jax.random.PRNGKey(2), CFG, E)
    assert int(metrics["n_steps_taken"]) == 1 and abs(float(metrics["ratio_max"]) - 1) < 1e-5
    assert not tree_equal(new.params, state.params)


def test_a_step_that_would_write_non_finite_parameters_keeps_the_old_ones(fresh):
    """Issue 12, defect 9: the guard checked loss and gradients but not the parameters after the step, so a
    learning rate that overflows float32 (1e39 passes as a finite python float) wrote NaN parameters."""
    state, ro = fresh
    overflowing = ppo.PPOConfig(lr=1e39)
    new, metrics = ppo.update(state, ro, jax.random.PRNGKey(2), overflowing, E)
    m = metrics_to_python(metrics)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(new.params))
    assert m["nonfinite_skipped"] is True and m["n_steps_taken"] == 0
    assert tree_equal(new.params, state.params) and tree_equal(new.opt_state, state.opt_state)


# ------------------------------------------------------------------------------------------
# the per-head trust region (LEARNING.md §4)
# ------------------------------------------------------------------------------------------


@settings(deadline=None, max_examples=25)
@given(seed=st.integers(0, 2**31 - 1), scale=st.floats(0.0, 2.0))
def test_per_head_kl_is_each_heads_mean_kl3_and_weights_back_to_the_batch_kl(seed, scale):
    """KL_h = (1/n_h)·Σ m_h·k3 >= 0, and Σ_h n_h·KL_h / N is the whole-batch approx_kl."""
    rng = np.random.default_rng(seed)
    log_ratio = jnp.asarray(rng.normal(size=(3, 6, NUM_HEADS)) * scale, jnp.float32)
    valid = jnp.asarray(rng.random((3, 6)) < 0.8).at[0, 0].set(True)
    m = jnp.asarray(rng.random((3, 6, NUM_HEADS)) < 0.4) & valid[..., None]
    per_head = np.asarray(ppo.approx_kl_per_head(log_ratio, m), np.float64)
    chex.assert_shape(per_head, (5,))
    r = np.exp(np.asarray(log_ratio, np.float64))
    k3 = np.where(np.asarray(m), (r - 1) - np.log(r), 0.0)
    n_h = np.maximum(np.asarray(m).sum(axis=(0, 1)), 1)
    np.testing.assert_allclose(per_head, k3.sum(axis=(0, 1)) / n_h, rtol=1e-4, atol=1e-6)
    assert np.all(per_head >= -1e-7)
    batch = float(ppo.approx_kl(log_ratio, m, valid))
    assert batch == pytest.approx((per_head * n_h).sum() / np.asarray(valid).sum(), rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("per_head", [True, False])
def test_a_head_that_acts_on_few_steps_is_held_to_the_trust_region_only_per_head(fresh, per_head):
    """The slot head moved on under a third of the batch's steps (and not at all on its others): diluted
    over the batch its KL is below the stop, its own mean KL is above it, so only the per-head trust region
    stops the update."""
    state, ro = fresh
    cfg = dataclasses.replace(CFG, kl_per_head=per_head, target_kl=0.05)
    slot_steps = ppo.head_weights(ro.actions, ro.valid)[..., 0]
    n_valid = int(jnp.sum(ro.valid))
    relevant = slot_steps & (jnp.cumsum(slot_steps.reshape(-1)).reshape(slot_steps.shape) <= 0.3 * n_valid)
    assert 0.2 < float(jnp.sum(relevant)) / n_valid <= 0.3  # the slot decisions that moved: under a third
    n_moved, n_slot = float(jnp.sum(relevant)), float(jnp.sum(slot_steps))
    target = 0.8 * cfg.kl_stop * n_valid / n_moved  # whole-batch KL 0.8·stop; k3(δ) = e^δ − 1 − δ = target
    assert target * n_moved / n_slot > cfg.kl_stop  # the slot head's own KL is above the stop
    lo, hi = 0.0, 5.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.expm1(mid) - mid < target else (lo, mid)
    old = jnp.where(relevant, ro.log_probs[..., 0] - lo, ro.log_probs[..., 0])  # new − old = δ on those steps
    _, metrics = ppo.update(state, ro.replace(log_probs=ro.log_probs.at[..., 0].set(old)),
                            jax.random.PRNGKey(2), cfg, E)
    m = metrics_to_python(metrics)
    if per_head:
        assert m["early_stop"] == [1, 0] and m["n_steps_taken"] == 0
    else:
        assert m["early_stop"] is None and m["n_steps_taken"] > 0


# ------------------------------------------------------------------------------------------
# the entropy bonus weighted per head (LEARNING.md §10)
# ------------------------------------------------------------------------------------------


@settings(deadline=None, max_examples=25)
@given(seed=st.integers(0, 2**31 - 1), weights=st.lists(st.floats(0.0, 5.0), min_size=NUM_HEADS,
                                                         max_size=NUM_HEADS))
def test_the_weighted_entropy_bonus_is_minus_the_weighted_sum_of_each_heads_mean_entropy(seed, weights):
    """L_ent = −Σ_h w_h·E_h, E_h = (1/n_h)·Σ m_h·H_h; unit weights give the plain bonus, and E_h does not
    depend on the weights (the logged per-head entropy stays the unweighted one)."""
    rng = np.random.default_rng(seed)
    entropy = jnp.asarray(rng.random((3, 6, NUM_HEADS)), jnp.float32)
    m = jnp.asarray(rng.random((3, 6, NUM_HEADS)) < 0.5)
    loss, per_head = ppo.entropy_bonus(entropy, m, tuple(weights))
    plain, plain_h = ppo.entropy_bonus(entropy, m)
    chex.assert_shape(per_head, (NUM_HEADS,))
    chex.assert_trees_all_close(per_head, plain_h)
    n_h = np.maximum(np.asarray(m).sum(axis=(0, 1)), 1)
    e_h = np.where(np.asarray(m), np.asarray(entropy, np.float64), 0.0).sum(axis=(0, 1)) / n_h
    np.testing.assert_allclose(per_head, e_h, rtol=1e-5, atol=1e-6)
    assert float(loss) == pytest.approx(-(np.asarray(weights) * e_h).sum(), rel=1e-5, abs=1e-5)
    assert float(plain) == pytest.approx(-e_h.sum(), rel=1e-5, abs=1e-5)


def test_a_head_weighted_zero_gets_no_entropy_gradient_and_a_weight_scales_its_gradient(fresh):
    """The bonus's gradient through one head's entropy is w_h times the unweighted one: zero at w_h = 0."""
    state, ro = fresh
    m = ppo.head_weights(ro.actions, ro.valid)
    blueprint = ACTION_HEADS.index("blueprint")

    def bonus(entropy, weights):
        return ppo.entropy_bonus(entropy, m, weights)[0]

    entropy = jnp.full(m.shape, 0.5, jnp.float32)
    unit = jax.grad(bonus)(entropy, (1.0,) * NUM_HEADS)
    weights = tuple(3.0 if h == blueprint else 0.0 if h == HEAD_OP else 1.0 for h in range(NUM_HEADS))
    scaled = jax.grad(bonus)(entropy, weights)
    np.testing.assert_allclose(scaled, unit * jnp.asarray(weights), rtol=1e-6)
    assert float(jnp.abs(scaled[..., HEAD_OP]).sum()) == 0.0 and float(jnp.abs(unit[..., blueprint]).sum()) > 0


def test_entropy_head_weights_take_a_list_or_a_mapping_of_head_names_and_name_a_bad_one():
    from rl.config import PPOConfig

    by_name = PPOConfig(entropy_head_weights={"blueprint": 3})
    assert by_name.entropy_head_weights == tuple(3.0 if h == "blueprint" else 1.0 for h in ACTION_HEADS)
    assert PPOConfig(entropy_head_weights=list(by_name.entropy_head_weights)) == by_name
    assert PPOConfig().entropy_head_weights == (1.0,) * NUM_HEADS
    hash(by_name)  # a static argument of the jitted update
    with pytest.raises(ValueError, match="unknown head 'bluprint'"):
        PPOConfig(entropy_head_weights={"bluprint": 3})
    with pytest.raises(ValueError, match="5 numbers"):
        PPOConfig(entropy_head_weights=[1, 2])
    with pytest.raises(ValueError, match=r"entropy_head_weights\[slot\] must be >= 0"):
        PPOConfig(entropy_head_weights=[-1, 1, 1, 1, 1])


def test_an_update_with_a_heavier_blueprint_bonus_differs_only_through_the_entropy_term(fresh):
    """Same batch, same key: weights of 1 reproduce the default update bit for bit; a blueprint weight of 3
    changes the parameters (the bonus reaches the blueprint head)."""
    state, ro = fresh
    key = jax.random.PRNGKey(4)
    default, _ = ppo.update(state, ro, key, CFG, E)
    unit, _ = ppo.update(state, ro, key, dataclasses.replace(CFG, entropy_head_weights=(1.0,) * NUM_HEADS), E)
    heavy, _ = ppo.update(state, ro, key, dataclasses.replace(CFG, entropy_head_weights={"blueprint": 3.0}), E)
    assert tree_equal(default.params, unit.params)
    assert not tree_equal(default.params, heavy.params)


# ------------------------------------------------------------------------------------------
# issue 69: rows that hold several episodes (the carry reset at each episode start)
# ------------------------------------------------------------------------------------------


def collect_several_episodes(state, key, rng, n_envs, steps, p_end):
    """Act for `steps` steps, each env's episode ending at random (done, or truncated with a bootstrap) and the
    next one starting in the same row with a zero carry, as a driver of a standard environment does."""
    net = state.network
    ro = rollout.init(n_envs, steps, D, S, B, net.hidden_dim)
    carry = net.initial_carry(n_envs)
    starts = np.zeros(n_envs, bool)
    for t in range(steps):
        key, k = jax.random.split(key)
        obs = jnp.asarray(rng.normal(size=(n_envs, D)), jnp.float32)
        masks = random_masks(rng, n_envs)
        carry = jax.tree.map(lambda c: jnp.where(jnp.asarray(starts)[:, None], 0.0, c), carry)
        out = ppo.act(state, obs, masks, carry, k)
        ends = rng.random(n_envs) < p_end
        truncated = ends & (rng.random(n_envs) < 0.5)
        step = rollout.StepData(obs, obs, out.actions, out.log_probs, out.value, jnp.ones(n_envs), jnp.ones(n_envs),
                                jnp.asarray(ends), jnp.asarray(truncated), jnp.asarray(rng.normal(size=n_envs)),
                                masks, carry, starts=jnp.asarray(starts & (t > 0)))
        ro = rollout.append(ro, t, step)
        carry, starts = out.carry, ends
    return ro


@given(seed=st.integers(0, 2**31 - 1), p_end=st.sampled_from([0.1, 0.3, 0.6]))
@settings(max_examples=5)
def test_the_update_scores_each_action_as_the_actor_did_when_episodes_share_rows(seed, p_end):
    rng = np.random.default_rng(seed)
    state = ppo.init_train_state(jax.random.PRNGKey(seed % 1000), ActorCritic(num_slots=S, num_blueprints=B,
                                                                             hidden_dim=16), D, CFG)
    ro = collect_several_episodes(state, jax.random.PRNGKey(seed), rng, 3, 12, p_end)
    data, _ = ppo.build_training_data(ro, LearnerConfig())
    assert bool(jnp.any(data.starts)) or p_end == 0.1  # (rows that hold several episodes, nearly always)
    ev = ppo.evaluate(state.network, state.params, data.obs, data.actions, data.masks, data.carry0, data.starts)
    np.testing.assert_allclose(ev.log_probs, ro.log_probs, atol=1e-6)
    np.testing.assert_allclose(ev.values, ro.values, atol=1e-6)
    _, aux = ppo.ppo_loss(state.params, state.network, data, 0.0, CFG)  # the loss the first step minimises
    assert float(aux["approx_kl"]) < 1e-10 and abs(float(aux["ratio_mean"]) - 1.0) < 1e-6
    if bool(jnp.any(data.starts)):  # without the resets the update would score other log-probs
        stale = ppo.evaluate(state.network, state.params, data.obs, data.actions, data.masks, data.carry0)
        assert float(jnp.max(jnp.abs(stale.log_probs - ro.log_probs))) > 1e-5
