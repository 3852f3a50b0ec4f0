"""Blueprint registry (BEHAVIOUR §4)."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from esper_fx.contracts.blueprints import BLUEPRINT_NAMES
from hosts.seeds import blueprints as bp
from tests.hosts.param_count import count_parameters

CNN_TABLE = {  # BEHAVIOUR §4.3 at C = 8 / 16 / 32 / 64 / 128
    "noop": (0, 0, 0, 0, 0),
    "norm": (17, 33, 65, 129, 257),
    "attention": (32, 128, 512, 2048, 8192),
    "depthwise": (152, 432, 1376, 4800, 17792),
    "bottleneck": (720, 864, 1152, 4480, 17664),
    "conv_small": (80, 288, 1088, 4224, 16640),
    "conv_light": (592, 2336, 9280, 36992, 147712),
    "conv_heavy": (1184, 4672, 18560, 73984, 295424),
    "copy_block": (1184, 4672, 18560, 73984, 295424),
    "widen": (1312, 5184, 20608, 82176, 328192),
}
TF_TABLE = {  # BEHAVIOUR §4.4 at D = 384 / 128
    "noop": (0, 0),
    "norm": (769, 257),
    "lora": (6144, 2048),
    "lora_large": (24576, 8192),
    "attention": (591360, 66048),
    "flex_attention": (591360, 66048),
    "mlp_small": (590976, 65920),
    "mlp": (1181568, 131712),
}
CNN_IDENTITY = ("noop", "conv_small", "bottleneck", "copy_block", "widen")
TF_IDENTITY = ("noop", "lora", "lora_large", "attention", "flex_attention", "mlp_small", "mlp")


@pytest.mark.parametrize("topology", ["cnn", "transformer"])
def test_registered_names_equal_the_contract(topology):
    assert set(bp.names(topology)) == set(BLUEPRINT_NAMES[topology])
    assert len(bp.names(topology)) == {"cnn": 10, "transformer": 8}[topology]


def test_num_groups_rule():
    assert [bp.num_groups(c) for c in (8, 16, 32, 64, 128, 384)] == [8, 1, 2, 4, 8, 16]
    assert bp.num_groups(7) == 1 and bp.num_groups(6) == 2


@given(st.integers(1, 1024))
def test_num_groups_divides_channels(c):
    assert c % bp.num_groups(c) == 0


@pytest.mark.parametrize("name", sorted(CNN_TABLE))
def test_cnn_param_counts_match_table_and_constructed_modules(name):
    for c, expected in zip((8, 16, 32, 64, 128), CNN_TABLE[name]):
        assert bp.param_count("cnn", name, c) == expected
        assert count_parameters(bp.create("cnn", name, c)) == expected


@pytest.mark.parametrize("name", sorted(TF_TABLE))
def test_transformer_param_counts_match_table_and_constructed_modules(name):
    for d, expected in zip((384, 128), TF_TABLE[name]):
        assert bp.param_count("transformer", name, d) == expected
        assert count_parameters(bp.create("transformer", name, d)) == expected


@pytest.mark.parametrize("name", sorted(CNN_TABLE))
@pytest.mark.parametrize("c", [8, 16, 32, 64])
def test_cnn_blueprints_preserve_shape(name, c):
    x = torch.randn(2, c, 5, 5)
    assert bp.create("cnn", name, c)(x).shape == x.shape


@pytest.mark.parametrize("name", sorted(TF_TABLE))
@pytest.mark.parametrize("d", [64, 128, 384])
def test_transformer_blueprints_preserve_shape(name, d):
    x = torch.randn(2, 3, d)
    assert bp.create("transformer", name, d)(x).shape == x.shape


@pytest.mark.parametrize("name", CNN_IDENTITY)
def test_zero_init_cnn_blueprints_are_exact_identity(name):
    torch.manual_seed(0)
    x = torch.randn(2, 16, 6, 6)
    module = bp.create("cnn", name, 16)
    assert torch.equal(module(x), x)
    assert bp.get("cnn", name).identity_at_init


@pytest.mark.parametrize("name", TF_IDENTITY)
def test_zero_init_transformer_blueprints_are_exact_identity(name):
    torch.manual_seed(0)
    x = torch.randn(2, 5, 64)
    assert torch.equal(bp.create("transformer", name, 64)(x), x)


@pytest.mark.parametrize("topology, dim", [("cnn", 8), ("transformer", 64)])
def test_norm_blueprint_is_not_identity_at_init(topology, dim):
    x = torch.randn(2, dim, 4, 4) if topology == "cnn" else torch.randn(2, 3, dim)
    module = bp.create(topology, "norm", dim)
    assert module.scale.item() == 1.0
    assert not torch.allclose(module(x), x)


def test_cnn_attention_scales_input_by_about_half_at_init():
    torch.manual_seed(0)
    x = torch.rand(4, 32, 4, 4) + 0.5
    ratio = bp.create("cnn", "attention", 32)(x) / x
    assert 0.3 < ratio.mean().item() < 0.7


def test_transformer_attention_blueprint_is_causal_after_training_proj():
    torch.manual_seed(0)
    module = bp.create("transformer", "attention", 32)
    torch.nn.init.normal_(module.proj.weight)
    x = torch.randn(1, 6, 32)
    y = x.clone()
    y[0, 4] += 1.0
    assert torch.allclose(module(x)[:, :4], module(y)[:, :4], atol=1e-6)


def test_attention_blueprint_requires_dim_divisible_by_four():
    with pytest.raises(ValueError):
        bp.create("transformer", "attention", 30)


def test_unknown_blueprint_raises_listing_available_names():
    with pytest.raises(ValueError, match="conv_light"):
        bp.create("cnn", "lora", 8)
    with pytest.raises(ValueError, match="mlp_small"):
        bp.get("transformer", "conv_light")
    with pytest.raises(ValueError):
        bp.names("rnn")


def test_create_forwards_keyword_arguments():
    assert count_parameters(bp.create("transformer", "lora", 64, rank=4)) == 2 * 4 * 64


def test_list_for_topology_orders_by_estimate():
    estimates = [s.param_estimate for s in bp.list_for_topology("cnn")]
    assert estimates == sorted(estimates)
    assert bp.list_for_topology("transformer")[0].name == "noop"
