"""`rl` as a library (issue 69, items 3–4): a head specification other than the growth contract's, Adam's rate
annealed over the updates, the raw entropy, one value-loss convention, and the update's diagnostics optional.
(Rows holding several episodes: test_ppo.py and test_gae.py; the standard-env check: test_gymnax_check.py.)"""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_fx.contracts.schedules import schedule_factor
from hosts.env.lr_schedule import lr_factor as host_lr_factor
from rl import distributions as dist
from rl import ppo, rollout
from rl.config import PPOConfig, lr_factor
from rl.heads import HeadSpec, discrete, growth_heads
from rl.network import ActorCritic


@given(step=st.integers(0, 300), total=st.integers(1, 200), warmup=st.floats(0.0, 0.5), decay=st.floats(0.0, 0.5),
       schedule=st.sampled_from(["constant", "cosine", "wsd"]))
@settings(deadline=None, max_examples=60)
def test_one_schedule_formula_serves_the_hosts_and_jnp_alike(step, total, warmup, decay, schedule):
    py = host_lr_factor(schedule, step, total, warmup, decay)
    traced = jax.jit(lambda s: jnp.asarray(schedule_factor(schedule, s, total, warmup, decay, where=jnp.where,
                                                           minimum=jnp.minimum, maximum=jnp.maximum,
                                                           cos=jnp.cos), jnp.float32))(step)
    assert float(traced) == pytest.approx(py, rel=1e-5, abs=1e-6)
    assert 0.0 <= py <= 1.0


def test_a_linear_anneal_reaches_zero_at_its_last_update_and_wsd_follows_the_hosts():
    cfg = PPOConfig(lr=1e-3, lr_anneal="linear", lr_anneal_updates=4)
    assert [float(ppo.update_lr(cfg, jnp.asarray(u))) for u in range(5)] == pytest.approx([1e-3, 7.5e-4, 5e-4,
                                                                                          2.5e-4, 0.0])
    wsd = PPOConfig(lr=1.0, lr_anneal="wsd", lr_anneal_updates=10, lr_anneal_warmup=0.2, lr_anneal_decay=0.3)
    assert [float(ppo.update_lr(wsd, jnp.asarray(u))) for u in range(10)] == pytest.approx(
        [host_lr_factor("wsd", u, 10, 0.2, 0.3) for u in range(10)])
    assert ppo.update_lr(PPOConfig(), jnp.asarray(3)) == PPOConfig().lr  # constant: exactly the configured float
    assert lr_factor(PPOConfig(), 7, jnp.where, jnp.minimum, jnp.maximum) == 1.0


@pytest.mark.parametrize("changes, needle", [
    ({"lr_anneal": "linear"}, "needs lr_anneal_updates"),
    ({"lr_anneal": "cosine", "lr_anneal_updates": 3}, "lr_anneal must be one of"),
    ({"entropy_mode": "nats"}, "entropy_mode must be one of"),
    ({"lr_anneal": "wsd", "lr_anneal_updates": 3, "lr_anneal_warmup": 0.7, "lr_anneal_decay": 0.7}, "at most 1"),
    ({"update_diagnostics": 1}, "update_diagnostics"),
])
def test_a_bad_option_is_named(changes, needle):
    with pytest.raises(ValueError, match=needle):
        PPOConfig(**changes)


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 6))
@settings(deadline=None, max_examples=30)
def test_the_raw_entropy_is_minus_sum_p_log_p_over_the_allowed_actions(seed, n):
    rng = np.random.default_rng(seed)
    logits = jnp.asarray(rng.normal(size=(3, n)) * 3, jnp.float32)
    mask = jnp.asarray(rng.random((3, n)) < 0.7).at[:, 0].set(True)
    p = np.where(mask, np.exp(np.asarray(dist.log_probs(logits, mask))), 0.0)
    expected = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)
    np.testing.assert_allclose(dist.entropy(logits, mask), expected, atol=1e-5)
    n_valid = np.asarray(mask).sum(-1)
    normalised = np.where(n_valid > 1, expected / np.log(np.maximum(n_valid, 2)), 0.0)
    np.testing.assert_allclose(dist.normalized_entropy(logits, mask), np.clip(normalised, 0, 1), atol=1e-5)


def test_a_head_spec_names_its_heads_sizes_and_relevance():
    growth = growth_heads(3, 5)
    assert growth.names == ("slot", "blueprint", "blend", "op", "tempo") and growth.sizes[0] == 3
    wait_then_germinate = jnp.asarray([[0, 1, 0, 0, 0], [1, 1, 0, 1, 0]])  # op WAIT, then GERMINATE
    np.testing.assert_array_equal(growth.relevant(wait_then_germinate),
                                  [[False, False, False, True, False], [True, True, True, True, True]])
    plain = discrete(2)
    np.testing.assert_array_equal(plain.relevant(jnp.zeros((4, 1), jnp.int32)), np.ones((4, 1), bool))
    assert [m.shape for m in plain.all_allowed((4,))] == [(4, 2)]
    for bad in (dict(names=("a", "a"), sizes=(2, 2)), dict(names=("a",), sizes=(0,)),
                dict(names=("a",), sizes=(2,), ratio_head=1)):
        with pytest.raises(ValueError):
            HeadSpec(**bad)


def _plain_rollout(state, heads: HeadSpec, n_envs=3, steps=6, seed=0):
    rng = np.random.default_rng(seed)
    ro = rollout.init(n_envs, steps, 4, hidden_dim=state.network.hidden_dim, heads=heads)
    carry, masks = state.network.initial_carry(n_envs), heads.all_allowed((n_envs,))
    for t in range(steps):
        obs = jnp.asarray(rng.normal(size=(n_envs, 4)), jnp.float32)
        out = ppo.act(state, obs, masks, carry, jax.random.PRNGKey(t))
        last = jnp.full((n_envs,), t == steps - 1)
        ro = rollout.append(ro, t, rollout.StepData(obs, obs, out.actions, out.log_probs, out.value,
                                                    jnp.asarray(rng.normal(size=n_envs), jnp.float32),
                                                    jnp.zeros(n_envs), last, last, jnp.zeros(n_envs), masks, carry))
        carry = out.carry
    return ro


@pytest.mark.parametrize("diagnostics", [True, False])
def test_a_plain_task_updates_without_masks_and_names_its_metrics_by_its_heads(diagnostics):
    heads = HeadSpec(("move", "jump"), (3, 2))
    cfg = PPOConfig(update_epochs=2, num_minibatches=1, entropy_mode="raw", update_diagnostics=diagnostics,
                    lr_anneal="linear", lr_anneal_updates=10)
    net = ActorCritic(heads=heads, hidden_dim=8)
    state = ppo.init_train_state(jax.random.PRNGKey(0), net, 4, cfg)
    assert {"move_head", "jump_head", "value_head"} <= set(state.params)
    ro = _plain_rollout(state, heads)
    assert ro.actions.shape == (3, 6, 2) and isinstance(ro.masks, tuple)
    new, metrics = ppo.update(state, ro, jax.random.PRNGKey(1), cfg, 3)
    assert int(new.train_steps) == 1 and int(metrics["n_steps_taken"]) >= 1
    assert {"entropy_move", "entropy_jump", "grad_norm_move", "grad_norm_jump", "grad_norm_value"} <= set(metrics)
    assert float(metrics["lr"]) == pytest.approx(cfg.lr)  # the first update's rate: the whole of it
    assert ("approx_kl_after" in metrics) == diagnostics
    assert all(np.all(np.isfinite(np.asarray(v))) for v in metrics.values() if jnp.issubdtype(
        jnp.asarray(v).dtype, jnp.floating))
    # a fresh policy is near uniform (output gain 0.01): the raw entropy, in nats, is the mean of ln 3 and ln 2
    # (normalised it would be near 1)
    assert float(metrics["entropy"]) == pytest.approx((math.log(3) + math.log(2)) / 2, abs=0.02)


def test_entropy_weights_of_another_count_of_heads_are_refused():
    with pytest.raises(ValueError, match="has 5 weights; the policy has 2 heads"):
        ppo.entropy_weights(PPOConfig(entropy_head_weights=(1.0, 3.0, 1.0, 1.0, 1.0)), 2)
    assert ppo.entropy_weights(PPOConfig(), 2) == 1.0


def test_the_unclipped_value_loss_keeps_its_half():
    v, r, ok = jnp.array([2.0, 0.0]), jnp.array([0.0, 1.0]), jnp.array([True, True])
    chex.assert_trees_all_close(ppo.value_loss(v, v, r, ok, False), 0.5 * (4.0 + 1.0) / 2)
    chex.assert_trees_all_close(ppo.value_loss(v, v, r, ok, True), 0.5 * (4.0 + 1.0) / 2)  # within the clip
