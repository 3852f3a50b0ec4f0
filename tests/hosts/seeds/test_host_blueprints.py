"""The blueprints initialised from the host (BEHAVIOUR §4.5): `copy_block` (depth) and `widen` (width) copy the
host block next to their slot, preserve the network's function at germination and train from their first step."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from hosts.layout import to_layout
from hosts.models.cnn import CNNHost
from hosts.models.morphogenetic import MorphogeneticModel
from esper_fx.contracts.lifecycle import lifecycle_timings
from hosts.seeds import blueprints as bp
from hosts.seeds.lifecycle import SeedClock

HOST_SEEDED = ("copy_block", "widen")


def _trained_host(seed: int, width: int) -> CNNHost:
    """A host whose weights and batch-norm statistics are not at their init (as a trained one's are not)."""
    torch.manual_seed(seed)
    host = CNNHost(widths=(width, width, width), in_channels=1)
    with torch.no_grad():
        for p in host.parameters():
            p.add_(0.3 * torch.randn_like(p))
        for block in host.blocks:
            block[1].running_mean.normal_()
            block[1].running_var.uniform_(0.5, 2.0)
    return host


IMMEDIATE = SeedClock.for_run(lifecycle_timings("immediate", 20, 25), 20 * 50)  # ramps of 10, 25 and 50 steps


def _model(host: nn.Module, slots=("r0c0", "r0c1", "r0c2")) -> MorphogeneticModel:
    return MorphogeneticModel(host, slots, "cnn", clock=IMMEDIATE)


@settings(deadline=None, max_examples=12)
@given(name=st.sampled_from(HOST_SEEDED), slot=st.sampled_from(["r0c0", "r0c1", "r0c2"]),
       width=st.sampled_from([4, 8, 16]), seed=st.integers(0, 2**16), train=st.booleans())
def test_germinating_preserves_the_network_and_every_new_weight_gets_a_gradient(name, slot, width, seed, train):
    """The whole network's output before and after the germination agrees to 1e-5 (float32) in training and
    in eval mode, and the first backward pass (the seed's first training step under the immediate clock)
    reaches every parameter of the new seed."""
    model = _model(_trained_host(seed, width))
    torch.manual_seed(seed + 1)
    x = torch.randn(8, 1, 28, 28)
    model.train(train)
    with torch.no_grad():
        before = model(x)
    model.germinate(slot, name, blend="linear")
    s = model.slot(slot)
    s.start_training()  # GERMINATED -> TRAINING -> BLENDING, nothing detached
    s.tick_step()  # the first step's tick: α = 1/10
    assert s.alpha > 0 and not s.isolate_gradients
    after = model(x)
    assert torch.allclose(after, before, atol=1e-5, rtol=0)
    after.logsumexp(dim=1).sum().backward()
    grads = [p.grad for p in s.seed_parameters()]
    assert grads and all(g is not None and g.abs().sum().item() > 0 for g in grads)


@pytest.mark.parametrize("name", HOST_SEEDED)
def test_the_seed_starts_from_the_neighbouring_block(name):
    host = _trained_host(0, 8)
    source = host.neighbour_block("r0c0")
    assert source is host.blocks[1]  # the block after the slot maps 8 channels to 8
    seed = bp.create("cnn", name, 8, source=source)
    first = seed.a if name == "copy_block" else seed.expand
    conv, norm = source[0], source[1]
    repeat = 1 if name == "copy_block" else 2
    assert torch.equal(first[0].weight, conv.weight.repeat(repeat, 1, 1, 1))
    for attr in ("weight", "bias", "running_mean", "running_var"):
        assert torch.equal(getattr(first[1], attr), getattr(norm, attr).repeat(repeat))
    # a copy, not the host's own tensors
    assert first[0].weight.data_ptr() != conv.weight.data_ptr()


def test_the_neighbouring_block_is_the_next_one_then_the_previous_one_then_none():
    host = CNNHost(widths=(8, 8, 8), in_channels=1)
    assert host.neighbour_block("r0c0") is host.blocks[1]
    assert host.neighbour_block("r0c1") is host.blocks[2]
    assert host.neighbour_block("r0c2") is host.blocks[2]  # no block after the last slot: the one before it
    growing = CNNHost(widths=(8, 16, 32))  # every block changes the width: nothing to copy
    assert [growing.neighbour_block(s) for s in ("r0c0", "r0c1", "r0c2")] == [None, None, None]


@pytest.mark.parametrize("name", HOST_SEEDED)
def test_without_a_block_to_copy_the_seed_is_fresh_and_still_cancels(name):
    torch.manual_seed(0)
    x = torch.randn(4, 8, 5, 5)
    for source in (None, CNNHost(widths=(8, 16, 32)).blocks[1]):  # none, and one of another shape
        seed = bp.create("cnn", name, 8, source=source)
        assert torch.allclose(seed(x), x, atol=1e-6, rtol=0)


def test_other_blueprints_ignore_the_source():
    block = CNNHost(widths=(8, 8, 8)).blocks[1]
    torch.manual_seed(0)
    a = bp.create("cnn", "conv_light", 8)
    torch.manual_seed(0)
    b = bp.create("cnn", "conv_light", 8, source=block)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not bp.get("cnn", "conv_light").from_host and bp.get("cnn", "copy_block").from_host


@pytest.mark.parametrize("name", HOST_SEEDED)
def test_carried_state_repeats_the_source_momentum_as_the_channels_were(name):
    host = _trained_host(3, 8)
    model = _model(host, ("r0c0",))
    model.germinate("r0c0", name)
    source = host.blocks[1]
    buffers = {p: torch.randn_like(p) for p in source.parameters()}
    state = model.slot("r0c0").carried_state(buffers.get)
    repeat = 1 if name == "copy_block" else 2
    copied = {"copy_block": 6, "widen": 3}[name]  # conv, norm weight and bias of each copy
    assert len(state) == copied
    for param, buffer in state.items():
        assert buffer.shape == param.shape
    first = model.slot("r0c0").seed.a if name == "copy_block" else model.slot("r0c0").seed.expand
    assert torch.equal(state[first[0].weight], buffers[source[0].weight].repeat(repeat, 1, 1, 1))
    assert model.slot("r0c0").carried_state(lambda p: None) == {}


def test_a_seed_not_copied_carries_nothing():
    model = _model(_trained_host(0, 8), ("r0c0",))
    model.germinate("r0c0", "conv_light")
    assert model.slot("r0c0").carried_state(lambda p: torch.zeros_like(p)) == {}


def test_a_static_copy_plants_the_block_copied_from_its_fresh_host():
    host = to_layout(_trained_host(0, 8), "cnn")
    model = _model(host, ("r0c0",))
    model.slot("r0c0").plant_fossil("copy_block", source=model.neighbour_block("r0c0"))
    seed = model.slot("r0c0").seed
    assert torch.equal(seed.a[0].weight, host.blocks[1][0].weight)
    x = torch.randn(2, 1, 28, 28)
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(x), host(x), atol=1e-5, rtol=0)
