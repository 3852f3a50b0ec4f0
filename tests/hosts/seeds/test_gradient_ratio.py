"""Gradient-activity ratio (BEHAVIOUR §2.13)."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from esper_fx.contracts.stages import SeedStage
from hosts import CNNHost, MorphogeneticModel
from hosts.seeds.gradient_ratio import (
    SquaredNorm,
    gradient_ratio,
    gradient_stats,
    ratio_ema,
    seed_gradient_norm,
    squared_grad_norm,
)
from tests.hosts.lifecycle_helpers import CIFAR_CLOCK, drive_to


def sq(norm, numel):
    return SquaredNorm(torch.tensor(float(norm) ** 2), numel)


def test_spec_example_gives_one():
    assert gradient_ratio(sq(2.0, 400), sq(1.0, 100)).item() == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize(
    "host, seed", [(sq(0.0, 400), sq(1.0, 100)), (sq(2.0, 400), sq(1e-9, 100)), (sq(2.0, 0), sq(1.0, 100)),
                   (sq(2.0, 400), sq(1.0, 0))],
)
def test_tiny_norm_or_zero_count_gives_zero(host, seed):
    assert gradient_ratio(host, seed).item() == 0.0


def test_no_upper_clamp():
    expected = 1.0 / (1e-5 + 1e-8)  # seed 10/10 over host 1e-4/10 (+1e-8): far above 1, not clamped
    assert gradient_ratio(sq(1e-4, 100), sq(10.0, 100)).item() == pytest.approx(expected, rel=1e-4)


@given(st.floats(1e-3, 1e3), st.integers(1, 10**6), st.floats(1e-3, 1e3), st.integers(1, 10**6))
def test_ratio_matches_the_formula(host_norm, n_host, seed_norm, n_seed):
    expected = (seed_norm / math.sqrt(n_seed)) / (host_norm / math.sqrt(n_host) + 1e-8)
    got = gradient_ratio(sq(host_norm, n_host), sq(seed_norm, n_seed)).item()
    assert got == pytest.approx(expected, rel=1e-4)


def test_ema_over_point_two_then_point_one_is_point_nineteen():
    assert ratio_ema(ratio_ema(None, 0.2), 0.1) == pytest.approx(0.19)
    table = {}  # the env pool's per-slot EMAs: a slot that empties is dropped, so a new seed starts afresh
    table["r0c1"] = ratio_ema(table.get("r0c1"), 0.2)
    assert table["r0c1"] == 0.2
    table["r0c1"] = ratio_ema(table.get("r0c1"), 0.1)
    assert table["r0c1"] == pytest.approx(0.19)
    table.pop("r0c1")
    assert ratio_ema(table.get("r0c1"), 0.5) == 0.5


def test_ema_works_on_device_tensors():
    value = ratio_ema(torch.tensor(0.2), torch.tensor(0.1))
    assert torch.is_tensor(value) and value.item() == pytest.approx(0.19)


def test_squared_norm_skips_params_without_grad():
    a, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(5))
    a.grad = torch.full((3,), 2.0)
    stat = squared_grad_norm([a, b])
    assert stat.numel == 3 and stat.sq.item() == pytest.approx(12.0)
    empty = squared_grad_norm([b])
    assert empty.numel == 0 and empty.sq.item() == 0.0


def model_after_backward():
    torch.manual_seed(0)
    model = MorphogeneticModel(CNNHost(), ["r0c0", "r0c1", "r0c2"], "cnn", clock=CIFAR_CLOCK)
    model.germinate("r0c0", "conv_light")
    drive_to(model.slot("r0c0"), SeedStage.PROBATIONARY)  # not measured
    model.germinate("r0c1", "conv_light", blend="gated")
    drive_to(model.slot("r0c1"), SeedStage.BLENDING, blend="gated")
    model.germinate("r0c2", "conv_light")
    model.slot("r0c2").step_epoch()  # TRAINING
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    torch.nn.functional.cross_entropy(model.train()(x), y).backward()
    return model


def test_gradient_stats_match_manual_sums_and_exclude_gate_and_other_stages():
    model = model_after_backward()
    stats = gradient_stats(model)
    assert set(stats.seeds) == {"r0c1", "r0c2"}  # TRAINING and BLENDING only
    host_sq = sum(p.grad.double().square().sum() for p in model.host_parameters() if p.grad is not None)
    assert stats.host.numel == 6418 and stats.host.sq.item() == pytest.approx(host_sq.item(), rel=1e-5)
    seed = stats.seeds["r0c1"]
    assert seed.numel == 2336 and stats.seeds["r0c2"].numel == 9280  # gate excluded
    manual = sum(p.grad.square().sum() for p in model.seed_parameters("r0c1"))
    assert seed.sq.item() == pytest.approx(manual.item(), rel=1e-5)
    assert seed_gradient_norm(seed).item() == pytest.approx(math.sqrt(manual.item()), rel=1e-5)
    assert stats.host.sq.dim() == 0 and stats.host.sq.dtype == torch.float32
    assert seed.sq.item() > 0 and gradient_ratio(stats.host, seed).item() > 0
    host_block0 = sum(p.grad.square().sum() for p in model.host.blocks[0].parameters())
    assert host_block0.item() == 0.0  # upstream of the isolated PROBATIONARY seed at r0c0: zero, not None


def test_gradient_stats_and_ratio_never_sync_to_the_host(monkeypatch):
    model = model_after_backward()

    def forbidden(*args, **kwargs):
        raise AssertionError("host sync")

    for name in ("item", "tolist", "__bool__", "__float__", "__int__", "cpu", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, forbidden)
    stats = gradient_stats(model)
    table = {}
    for slot_id, seed in stats.seeds.items():
        table[slot_id] = ratio_ema(table.get(slot_id), gradient_ratio(stats.host, seed))
        table[slot_id] = ratio_ema(table.get(slot_id), gradient_ratio(stats.host, seed))
        seed_gradient_norm(seed)
    monkeypatch.undo()
    assert all(torch.is_tensor(v) for v in table.values())


@pytest.mark.gpu
def test_gradient_stats_on_cuda_do_not_synchronize():
    torch.manual_seed(0)
    model = MorphogeneticModel(CNNHost(), ["r0c1"], "cnn", clock=CIFAR_CLOCK).cuda()
    model.germinate("r0c1", "conv_light")
    model.slot("r0c1").step_epoch()
    x, y = torch.randn(4, 3, 32, 32, device="cuda"), torch.randint(0, 10, (4,), device="cuda")
    torch.nn.functional.cross_entropy(model.train()(x), y).backward()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        stats = gradient_stats(model)
        ratio = ratio_ema(None, gradient_ratio(stats.host, stats.seeds["r0c1"]))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert ratio.device.type == "cuda" and ratio.item() > 0
