"""CNNHost (BEHAVIOUR §3.1)."""

import pytest
import torch

from tests.hosts.param_count import count_parameters
from hosts.models.cnn import CNNHost
from hosts.layout import InjectionSpec


def test_cifar10_host_has_6418_params_with_the_documented_breakdown():
    host = CNNHost()
    assert count_parameters(host) == 6418
    convs = [b[0].weight.numel() for b in host.blocks]
    bns = [b[1].weight.numel() + b[1].bias.numel() for b in host.blocks]
    assert convs == [216, 1152, 4608] and bns == [16, 32, 64]
    assert count_parameters(host.classifier) == 330


def test_cifar10_deep_host_has_99922_params():
    assert count_parameters(CNNHost.cifar10_deep()) == 99922
    assert count_parameters(CNNHost(num_classes=10, base_channels=8, n_blocks=5, pool_layers=5)) == 99922


def test_conv_blocks_have_no_bias_and_track_bn_statistics():
    for block in CNNHost().blocks:
        assert block[0].bias is None
        assert block[1].affine and block[1].track_running_stats


def test_n_blocks_below_two_raises():
    with pytest.raises(ValueError):
        CNNHost(n_blocks=1)


@pytest.mark.parametrize(
    "host, shapes",
    [
        (CNNHost(), [(8, 16), (16, 8), (32, 4)]),
        (CNNHost.cifar10_deep(), [(8, 16), (16, 8), (32, 4), (64, 2), (128, 1)]),
    ],
)
def test_injection_specs_and_segment_shapes_match_the_table(host, shapes):
    specs = host.injection_specs()
    n = len(shapes)
    assert [s.slot_id for s in specs] == [f"r0c{i}" for i in range(n)]
    assert [s.channels for s in specs] == [c for c, _ in shapes]
    assert [s.position for s in specs] == pytest.approx([(i + 1) / n for i in range(n)])
    assert [s.layer_range for s in specs] == [(i, i + 1) for i in range(n)]
    x = torch.randn(2, 3, 32, 32)
    for spec, (c, hw) in zip(specs, shapes):
        assert host.forward_to_segment(spec.slot_id, x).shape == (2, c, hw, hw)


def test_pool_layers_limits_pooling():
    host = CNNHost(n_blocks=3, pool_layers=1)
    x = torch.randn(1, 3, 32, 32)
    assert host.forward_to_segment("r0c2", x).shape == (1, 32, 16, 16)


def test_chained_segments_equal_the_plain_forward():
    torch.manual_seed(0)
    host = CNNHost.cifar10_deep().eval()
    x = torch.randn(3, 3, 32, 32)
    h = host.forward_to_segment("r0c1", x)
    h = host.forward_to_segment("r0c3", h, from_seg="r0c1")
    out = host.forward_from_segment("r0c3", h)
    assert torch.equal(out, host(x))
    assert out.shape == (3, 10)


def test_from_last_segment_runs_only_the_head():
    host = CNNHost().eval()
    x = torch.randn(2, 3, 32, 32)
    h = host.forward_to_segment("r0c2", x)
    assert torch.equal(host.forward_from_segment("r0c2", h), host(x))


@pytest.mark.parametrize("bad", ["r0c3", "r1c0", "mid", ""])
def test_unknown_segment_ids_raise_value_error(bad):
    host = CNNHost()
    x = torch.randn(1, 3, 32, 32)
    with pytest.raises(ValueError):
        host.forward_to_segment(bad, x)
    with pytest.raises(ValueError):
        host.forward_from_segment(bad, x)
    with pytest.raises(ValueError):
        host.forward_to_segment("r0c1", x, from_seg=bad)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(slot_id="r0c0", channels=0, position=0.5, layer_range=(0, 1)),
        dict(slot_id="r0c0", channels=8, position=1.5, layer_range=(0, 1)),
        dict(slot_id="r0c0", channels=8, position=-0.1, layer_range=(0, 1)),
        dict(slot_id="r0c0", channels=8, position=0.5, layer_range=(2, 1)),
        dict(slot_id="r0c0", channels=8, position=0.5, layer_range=(-1, 1)),
        dict(slot_id="mid", channels=8, position=0.5, layer_range=(0, 1)),
    ],
)
def test_invalid_injection_specs_raise(kwargs):
    with pytest.raises(ValueError):
        InjectionSpec(**kwargs)


def test_the_pointwise_shapes16_host_sees_one_pixel_per_layer():
    host = CNNHost.pointwise()
    assert count_parameters(host) == 826
    convs = [m for m in host.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.kernel_size for c in convs] == [(1, 1)] * 3
    assert [s.channels for s in host.injection_specs()] == [16, 16, 16]
    x = torch.randn(2, 3, 16, 16)
    assert host.forward_to_segment("r0c0", x).shape == (2, 16, 16, 16)  # r0c0 at full resolution
    assert host.forward_to_segment("r0c1", x).shape == (2, 16, 8, 8)
    assert host(x).shape == (2, 10)
