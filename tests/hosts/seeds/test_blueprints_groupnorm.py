"""A norm seed trains on detached channels_last host features (torch 2.13's CPU GroupNorm backward crashed there;
constraints.txt pins a torch without the fault)."""

import torch

from hosts.seeds import blueprints as B


def test_a_norm_seed_on_detached_channels_last_features_trains_and_matches_the_contiguous_gradient():
    torch.manual_seed(0)
    seed = B._cnn_norm(4)
    h = torch.randn(8, 4, 14, 14)
    seed(h).pow(2).sum().backward()
    expected = seed.norm.weight.grad.clone()
    seed.zero_grad()
    seed(h.to(memory_format=torch.channels_last).detach()).pow(2).sum().backward()  # crashed under torch 2.13
    torch.testing.assert_close(seed.norm.weight.grad, expected)
    assert isinstance(seed.norm, torch.nn.GroupNorm)
