"""TransformerHost (BEHAVIOUR §3.2)."""

import math

import pytest
import torch
import torch.nn.functional as F

from hosts.models.transformer import TransformerHost
from tests.hosts.param_count import count_parameters


def small(**kw):
    args = dict(vocab_size=97, n_embd=32, n_head=4, n_layer=6, block_size=16, dropout=0.0)
    args.update(kw)
    return TransformerHost(**args)


def test_default_host_has_30044544_params_tied_head_counted_once():
    host = TransformerHost()
    assert host.head.weight is host.tok_emb.weight
    assert count_parameters(host) == 30_044_544
    assert TransformerHost.expected_param_count(50257, 384, 6, 256) == 30_044_544


def test_pytext_host_has_644224_params():
    host = TransformerHost.pytext()
    assert (host.vocab_size, host.n_embd, host.n_layer, host.block_size) == (256, 128, 3, 128)
    assert count_parameters(host) == 644_224


@pytest.mark.parametrize("d, layers", [(32, 3), (48, 6), (64, 2)])
def test_param_formula_matches_constructed_models(d, layers):
    host = TransformerHost(vocab_size=101, n_embd=d, n_head=4, n_layer=layers, block_size=24, num_segments=1)
    assert count_parameters(host) == TransformerHost.expected_param_count(101, d, layers, 24)


def test_per_layer_count_is_12d2_plus_13d():
    assert count_parameters(TransformerHost().layers[0]) == 1_774_464


def test_n_layer_not_divisible_by_segments_raises():
    with pytest.raises(ValueError):
        small(n_layer=4, num_segments=3)


def test_init_matches_gpt2_and_initial_loss_is_near_ln_v():
    torch.manual_seed(0)
    host = TransformerHost(block_size=64).eval()
    assert abs(host.tok_emb.weight.std().item() - 0.02) <= 0.002
    tokens = torch.randint(0, host.vocab_size, (2, 64))
    with torch.no_grad():
        logits = host(tokens)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, host.vocab_size), tokens[:, 1:].reshape(-1))
    assert abs(loss.item() - math.log(50257)) < 0.3


def test_init_biases_zero_layernorms_unit_and_residual_projections_scaled():
    torch.manual_seed(1)
    host = TransformerHost(vocab_size=512, n_embd=256, n_head=4, n_layer=8, block_size=32, num_segments=4)
    for block in host.layers:
        for lin in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
            assert torch.all(lin.bias == 0)
        for ln in (block.ln_1, block.ln_2):
            assert torch.all(ln.weight == 1) and torch.all(ln.bias == 0) and ln.eps == 1e-5
    resid = torch.cat([torch.cat([b.attn.c_proj.weight.flatten(), b.mlp.c_proj.weight.flatten()]) for b in host.layers])
    assert resid.std().item() == pytest.approx(0.02 / math.sqrt(16), rel=0.05)
    assert host.layers[0].mlp.c_fc.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert host.pos_emb.weight.std().item() == pytest.approx(0.02, rel=0.05)


def test_injection_specs_after_layers_2_4_6():
    host = small()
    specs = host.injection_specs()
    assert [s.slot_id for s in specs] == ["r0c0", "r0c1", "r0c2"]
    assert [s.channels for s in specs] == [32, 32, 32]
    assert [s.layer_range for s in specs] == [(0, 2), (2, 4), (4, 6)]
    assert [s.position for s in specs] == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_segmented_forward_equals_plain_forward():
    torch.manual_seed(0)
    host = small().eval()
    idx = torch.randint(0, 97, (2, 16))
    h = host.forward_to_segment("r0c0", idx)
    h = host.forward_to_segment("r0c2", h, from_seg="r0c0")
    out = host.forward_from_segment("r0c2", h)
    assert out.shape == (2, 16, 97)
    assert torch.allclose(out, host(idx), atol=1e-6)


def test_attention_is_causal():
    torch.manual_seed(0)
    host = small().eval()
    idx = torch.randint(0, 97, (1, 10))
    changed = idx.clone()
    changed[0, 7] = (idx[0, 7] + 1) % 97
    with torch.no_grad():
        a, b = host(idx), host(changed)
    assert torch.allclose(a[:, :7], b[:, :7], atol=1e-6)
    assert not torch.allclose(a[:, 7:], b[:, 7:])


def test_input_longer_than_block_size_raises():
    host = small()
    with pytest.raises(ValueError):
        host(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError):
        host.forward_to_segment("r0c0", torch.zeros(1, 17, dtype=torch.long))


def test_unknown_segment_raises():
    host = small()
    with pytest.raises(ValueError):
        host.forward_to_segment("r0c3", torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(ValueError):
        host.forward_from_segment("late", torch.zeros(1, 4, 32))


def test_dropout_only_in_training_mode():
    torch.manual_seed(0)
    host = small(dropout=0.5)
    idx = torch.randint(0, 97, (2, 8))
    host.eval()
    assert torch.equal(host(idx), host(idx))
    host.train()
    assert not torch.equal(host(idx), host(idx))
