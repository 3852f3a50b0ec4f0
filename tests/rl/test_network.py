"""The BEHAVIOUR §10 actor-critic: parameter counts and init (§10.1), a NumPy forward reference, scan equivalence
(BEHAVIOUR §10.2), resets inside the scan, the MLP ablation."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from esper_fx.contracts.actions import HEAD_TEMPO, NUM_HEADS, NUM_TEMPOS, head_sizes
from esper_fx.contracts.observation import obs_dim
from rl import distributions as dist
from rl.network import ActorCritic, init_params, param_count

D, S, B, E = 89, 3, 5, 4  # D = contracts.observation.obs_dim(3): 23 + (4 + 5 + 3)·3 + 10·3


@partial(jax.jit, static_argnums=0)
def apply(net, params, obs, carry, masks=None, resets=None):
    return net.apply({"params": params}, obs, carry, masks, resets)


@pytest.fixture(scope="module")
def lstm():
    net = ActorCritic(S, B)
    return net, init_params(net, jax.random.PRNGKey(0), D)


@pytest.fixture(scope="module")
def mlp():
    net = ActorCritic(S, B, recurrent=False)
    return net, init_params(net, jax.random.PRNGKey(1), D)


@pytest.mark.parametrize(
    "dim, slots, recurrent, expected",
    # D = obs_dim(S) with telemetry (89, 133) and without it (59); five policy heads and the value head
    [(89, 3, True, 194_387), (59, 3, True, 190_547), (133, 5, True, 200_149), (89, 3, False, 79_315)],
)
def test_parameter_counts_match_the_spec(dim, slots, recurrent, expected):
    assert dim in (obs_dim(slots), obs_dim(slots, telemetry=False))
    net = ActorCritic(slots, 5, recurrent=recurrent)
    shapes = jax.eval_shape(lambda k: init_params(net, k, dim), jax.random.PRNGKey(0))
    assert param_count(shapes) == expected


def test_the_heads_are_slot_blueprint_blend_op_tempo_with_the_contract_sizes(lstm):
    net, p = lstm
    assert net.initial_carry(E)[0].shape == (E, 128)
    out, _ = apply(net, p, jnp.zeros((E, 2, D), jnp.float32), net.initial_carry(E))
    assert [lg.shape for lg in out.logits] == [(E, 2, n) for n in head_sizes(S, B)]
    assert out.logits[HEAD_TEMPO].shape[-1] == NUM_TEMPOS == 3
    assert p["tempo_head"]["out"]["kernel"].shape == (64, 3)


def test_lstm_has_fused_kernels_and_one_bias_with_forget_slice_two(lstm):
    _, p = lstm
    cell = p["lstm"]
    assert cell["w_x"].shape == (128, 512) and cell["w_h"].shape == (128, 512) and cell["bias"].shape == (512,)
    bias = np.asarray(cell["bias"])
    assert np.all(bias[128:256] == 2.0) and np.all(bias[:128] == 0.0) and np.all(bias[256:] == 0.0)


def _gram(kernel):
    k = np.asarray(kernel, np.float64)
    return k @ k.T if k.shape[0] <= k.shape[1] else k.T @ k


@pytest.mark.parametrize(
    "path, gain",
    [(("feature", "kernel"), np.sqrt(2)), (("lstm", "w_x"), 1.0), (("lstm", "w_h"), 1.0),
     *[((h, "hidden", "kernel"), np.sqrt(2)) for h in ("slot_head", "blueprint_head", "blend_head", "op_head",
                                                       "tempo_head", "value_head")],
     *[((h, "out", "kernel"), 0.01) for h in ("slot_head", "blueprint_head", "blend_head", "op_head",
                                               "tempo_head")],
     (("value_head", "out", "kernel"), 1.0)],
)
def test_kernels_are_orthogonal_with_the_spec_gains(lstm, path, gain):
    _, p = lstm
    kernel = p
    for key in path:
        kernel = kernel[key]
    g = _gram(kernel)
    np.testing.assert_allclose(g, gain**2 * np.eye(g.shape[0]), atol=1e-5 * max(1.0, gain**2))


def test_every_bias_except_the_forget_slice_is_zero_and_layernorms_are_identity(lstm):
    _, p = lstm
    flat = jax.tree_util.tree_flatten_with_path(p)[0]
    for path, leaf in flat:
        name = "/".join(str(getattr(k, "key", k)) for k in path)
        if name.endswith("bias") and not name.startswith("lstm"):
            assert np.all(np.asarray(leaf) == 0.0), name
        if name.endswith("scale"):
            assert np.all(np.asarray(leaf) == 1.0), name


def test_mlp_core_is_an_orthogonal_sqrt2_linear_with_an_empty_carry(mlp):
    net, p = mlp
    assert net.initial_carry(E) == ()
    g = _gram(p["mlp"]["kernel"])
    np.testing.assert_allclose(g, 2.0 * np.eye(128), atol=1e-5)
    assert "lstm" not in p


def _layer_norm(x, norm, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * norm["scale"] + norm["bias"]


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def numpy_forward(p, obs):
    """BEHAVIOUR §10.1 written out in NumPy (float64): LayerNorm eps 1e-5, LSTM gates (i, f, g, o)."""
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), p)
    x = np.maximum(_layer_norm(obs @ p["feature"]["kernel"] + p["feature"]["bias"], p["feature_norm"]), 0.0)
    h = np.zeros((obs.shape[0], 128))
    c = np.zeros_like(h)
    zs = []
    for t in range(obs.shape[1]):
        gates = x[:, t] @ p["lstm"]["w_x"] + h @ p["lstm"]["w_h"] + p["lstm"]["bias"]
        i, f, g, o = np.split(gates, 4, axis=-1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        zs.append(_layer_norm(h, p["core_norm"]))
    z = np.stack(zs, axis=1)

    def head(name):
        hid = np.maximum(z @ p[name]["hidden"]["kernel"] + p[name]["hidden"]["bias"], 0.0)
        return hid @ p[name]["out"]["kernel"] + p[name]["out"]["bias"]

    heads = ("slot_head", "blueprint_head", "blend_head", "op_head", "tempo_head")
    return [head(n) for n in heads], head("value_head")[..., 0]


def _perturbed(p, seed=7):
    """Params with every leaf nudged, so biases and LayerNorm affine terms are exercised too."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: x + jnp.asarray(0.1 * rng.normal(size=x.shape), x.dtype), p)


def test_forward_matches_a_numpy_transcription_of_the_spec(lstm):
    net, p = lstm
    p = _perturbed(p)
    obs = np.random.default_rng(0).normal(size=(E, 6, D))
    out, _ = apply(net, p, jnp.asarray(obs, jnp.float32), net.initial_carry(E))
    ref_logits, ref_value = numpy_forward(p, obs)
    assert len(out.logits) == len(ref_logits) == NUM_HEADS
    for got, ref in zip(out.logits, ref_logits):
        np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(out.value, ref_value, atol=1e-4, rtol=1e-4)


def _random_masks(rng, shape):
    masks = []
    for n in head_sizes(S, B):
        m = rng.random(shape + (n,)) < 0.5
        m[..., 0] = True
        masks.append(jnp.asarray(m))
    return dist.Masks(*masks)


def test_initial_policy_is_uniform_over_valid_actions_within_002(lstm):
    net, p = lstm
    rng = np.random.default_rng(1)
    obs = jnp.asarray(rng.normal(size=(E, 5, D)) * 3, jnp.float32)
    masks = _random_masks(rng, (E, 5))
    out, _ = apply(net, p, obs, net.initial_carry(E), masks)
    for logits, mask in zip(out.logits, masks):
        prob = np.asarray(dist.probs(logits, mask))
        mask = np.asarray(mask)
        uniform = mask / mask.sum(-1, keepdims=True)
        assert np.abs(prob - uniform).max() < 0.02
        assert np.all(np.asarray(logits)[~mask] == -1e4)


@pytest.mark.parametrize("which", ["lstm", "mlp"])
def test_a_25_step_scan_equals_25_single_steps_threading_the_carry(which, request):
    net, p = request.getfixturevalue(which)
    p = _perturbed(p, seed=3)
    obs = jnp.asarray(np.random.default_rng(2).normal(size=(E, 25, D)), jnp.float32)
    seq, seq_carry = apply(net, p, obs, net.initial_carry(E))
    step = jax.jit(lambda o, c: net.apply({"params": p}, o, c, method=net.step))
    carry = net.initial_carry(E)
    for t in range(25):
        out, carry = step(obs[:, t], carry)
        for a, b in zip(out.logits, seq.logits):
            np.testing.assert_allclose(a, b[:, t], atol=1e-5)
        np.testing.assert_allclose(out.value, seq.value[:, t], atol=1e-5)
    for a, b in zip(jax.tree.leaves(carry), jax.tree.leaves(seq_carry)):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_a_reset_flag_inside_the_scan_restarts_from_a_zero_carry(lstm):
    net, p = lstm
    obs = jnp.asarray(np.random.default_rng(3).normal(size=(E, 10, D)), jnp.float32)
    resets = jnp.zeros((E, 10), bool).at[1, 6].set(True)
    out, _ = apply(net, p, obs, net.initial_carry(E), resets=resets)
    fresh, _ = apply(net, p, obs[:, 6:], net.initial_carry(E))
    plain, _ = apply(net, p, obs, net.initial_carry(E))
    np.testing.assert_allclose(out.value[1, 6:], fresh.value[1], atol=1e-5)
    np.testing.assert_allclose(out.value[0], plain.value[0], atol=1e-6)
    assert np.abs(np.asarray(out.value[1, 6:] - plain.value[1, 6:])).max() > 1e-4


def test_the_carry_carries_history_in_the_lstm_but_not_in_the_mlp(lstm, mlp):
    obs = jnp.asarray(np.random.default_rng(4).normal(size=(E, 3, D)), jnp.float32)
    swapped = obs.at[:, 0].set(-obs[:, 0])
    for (net, p), remembers in ((lstm, True), (mlp, False)):
        a, _ = apply(net, p, obs, net.initial_carry(E))
        b, _ = apply(net, p, swapped, net.initial_carry(E))
        changed = float(jnp.abs(a.value[:, 2] - b.value[:, 2]).max())
        assert (changed > 1e-6) == remembers


def test_a_non_default_hidden_dim_resizes_the_lstm_layernorm_and_head_inputs():
    net = ActorCritic(S, B, hidden_dim=64)
    p = jax.eval_shape(lambda k: init_params(net, k, D), jax.random.PRNGKey(0))
    assert p["feature"]["kernel"].shape == (D, 128)
    assert p["lstm"]["w_x"].shape == (128, 256) and p["lstm"]["w_h"].shape == (64, 256)
    assert p["core_norm"]["scale"].shape == (64,) and p["op_head"]["hidden"]["kernel"].shape == (64, 64)


def test_layer_norms_use_eps_1e_5(lstm):
    net, p = lstm
    bound = net.bind({"params": p})
    assert bound.feature_norm.epsilon == 1e-5 and bound.core_norm.epsilon == 1e-5
