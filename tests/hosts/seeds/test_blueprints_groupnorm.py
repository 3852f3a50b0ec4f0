"""The seeds' GroupNorm survives torch's channels_last CPU backward on an input that needs no gradient."""

import torch

from hosts.seeds import blueprints as B


def test_a_norm_seed_on_detached_channels_last_features_trains_and_matches_the_contiguous_gradient():
    torch.manual_seed(0)
    seed = B._cnn_norm(4)
    h = torch.randn(8, 4, 14, 14)
    seed(h).pow(2).sum().backward()
    expected = seed.norm.weight.grad.clone()
    seed.zero_grad()
    seed(h.to(memory_format=torch.channels_last).detach()).pow(2).sum().backward()  # crashed before the guard
    torch.testing.assert_close(seed.norm.weight.grad, expected)
    assert isinstance(seed.norm, torch.nn.GroupNorm)
