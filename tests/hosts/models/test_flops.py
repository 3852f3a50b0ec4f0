"""FLOP counts from layer shapes, checked against counts worked out by hand."""

import pytest
import torch
from torch import nn

from hosts.models import flops as F
from hosts.models.cnn import CNNHost
from hosts.seeds import blueprints as B


def test_per_layer_formulas_by_hand():
    # 3x3 conv 2 -> 4 channels on a 5x5 output, no bias: 2·2·9·4·25 = 3600
    assert F.conv2d_flops(2, 4, (3, 3), 1, (5, 5), bias=False) == 3600
    # the same with a bias: + 4·25 = 100
    assert F.conv2d_flops(2, 4, (3, 3), 1, (5, 5), bias=True) == 3700
    # depthwise 3x3 on 4 channels (groups 4), 5x5: 2·1·9·4·25 = 1800
    assert F.conv2d_flops(4, 4, (3, 3), 4, (5, 5), bias=False) == 1800
    assert F.linear_flops(16, 10, 1, bias=True) == 2 * 16 * 10 + 10
    assert F.norm_flops(100) == 400 and F.activation_flops(100) == 100
    assert F.max_pool_flops((2, 2), 25) == 75
    assert F.backward_flops(1000) == 2000


def test_a_small_host_by_hand():
    # one grey 4x4 input; blocks 1 -> 2 -> 4 channels, 3x3 convs, a 2x2 pool after each, GAP, Linear(4, 10)
    host = CNNHost(num_classes=10, widths=(2, 4), kernel_size=3, in_channels=1)
    block0 = 2 * 1 * 9 * 2 * 16 + 4 * 2 * 16 + 2 * 16 + 3 * 2 * 4  # conv, BN, ReLU on 2x4x4; pool to 2x2x2
    block1 = 2 * 2 * 9 * 4 * 4 + 4 * 4 * 4 + 4 * 4 + 3 * 4 * 1  # conv, BN, ReLU on 4x2x2; pool to 4x1x1
    head = 2 * 4 * 10 + 10
    assert block0 == 576 + 128 + 32 + 24 and block1 == 576 + 64 + 16 + 12
    assert F.forward_flops(host, (1, 4, 4)) == block0 + block1 + head


def test_a_seed_by_hand():
    # conv_light on 4 channels, 3x3 features: Residual(Conv3x3 no bias -> GroupNorm -> ReLU)
    seed = B._cnn_conv_light(4)
    assert F.forward_flops(seed, (4, 3, 3)) == 2 * 4 * 9 * 4 * 9 + 4 * 36 + 36
    # channel attention on 8 channels: Linear(8, 2) and Linear(2, 8), no bias (the mean and gate uncounted)
    assert F.forward_flops(B._cnn_attention(8), (8, 5, 5)) == 2 * 8 * 2 + 2 * 2 * 8


def test_counting_touches_neither_the_module_nor_the_random_stream():
    host = CNNHost.fashion()
    before = {k: v.clone() for k, v in host.state_dict().items()}
    state = torch.random.get_rng_state()
    F.forward_flops(host, (1, 28, 28))
    assert torch.equal(torch.random.get_rng_state(), state)
    after = host.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_a_layer_with_weights_and_no_count_is_refused():
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))

        def forward(self, x):
            return x * self.w

    with pytest.raises(ValueError, match="no FLOP count for layer kind Odd"):
        F.forward_flops(Odd(), (3,))
