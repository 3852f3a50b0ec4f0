"""MorphogeneticModel routing, accounting and isolation (BEHAVIOUR §3.3, §3.4, §2.2)."""

import copy

import pytest
import torch

from esper_fx.contracts.stages import SeedStage
from hosts import CNNHost, MorphogeneticModel, TransformerHost
from tests.hosts.lifecycle_helpers import CIFAR_CLOCK, drive_to, epoch

S = SeedStage


def tiny_transformer():
    return TransformerHost(vocab_size=64, n_embd=32, n_head=4, n_layer=3, block_size=16, dropout=0.0)


def cnn_model(slots=("r0c0", "r0c1", "r0c2"), host=None):
    torch.manual_seed(0)
    return MorphogeneticModel(host or CNNHost(), list(slots), "cnn", clock=CIFAR_CLOCK)


def tf_model(slots=("r0c0", "r0c1", "r0c2")):
    torch.manual_seed(0)
    return MorphogeneticModel(tiny_transformer(), list(slots), "transformer", clock=CIFAR_CLOCK)


# ------------------------------------------------------------------ BEHAVIOUR §3.3 empty model == host


@pytest.mark.parametrize(
    "make_host, topology, x",
    [
        (CNNHost, "cnn", torch.randn(3, 3, 32, 32)),
        (CNNHost.cifar10_deep, "cnn", torch.randn(3, 3, 32, 32)),
        (tiny_transformer, "transformer", torch.randint(0, 64, (2, 16))),
        (TransformerHost.pytext, "transformer", torch.randint(0, 256, (2, 12))),
    ],
)
def test_empty_model_output_equals_host_exactly(make_host, topology, x):
    torch.manual_seed(0)
    host = make_host()
    ids = [s.slot_id for s in host.injection_specs()]
    for slots in (ids, ids[1:2], []):
        model = MorphogeneticModel(host, slots, topology).eval()
        assert torch.equal(model(x), host(x))


def test_slot_channels_per_task():
    assert [s.channels for s in cnn_model().slots.values()] == [8, 16, 32]
    deep = cnn_model(("r0c0", "r0c1", "r0c2", "r0c3", "r0c4"), CNNHost.cifar10_deep())
    assert [s.channels for s in deep.slots.values()] == [8, 16, 32, 64, 128]
    assert [s.channels for s in tf_model().slots.values()] == [32, 32, 32]


def test_slots_are_visited_in_position_order():
    model = cnn_model(("r0c2", "r0c0"))
    assert model.slot_order == ["r0c0", "r0c2"]


def test_unknown_slot_raises_naming_it_and_listing_available():
    with pytest.raises(ValueError, match=r"r0c7.*r0c0.*r0c1.*r0c2"):
        MorphogeneticModel(CNNHost(), ["r0c7"], "cnn")
    model = cnn_model(("r0c1",))
    for call in (lambda: model.germinate("r0c0", "norm"), lambda: model.cull("r0c5"),
                 lambda: model.fossilize("r0c2"), lambda: model.seed_parameters("r0c9")):
        with pytest.raises(ValueError, match="r0c1"):
            call()


def test_unknown_topology_raises():
    with pytest.raises(ValueError):
        MorphogeneticModel(CNNHost(), ["r0c1"], "rnn")


# ------------------------------------------------------------------ BEHAVIOUR §3.4 parameter accounting


def test_host_parameters_count_tied_weight_once():
    model = MorphogeneticModel(TransformerHost.pytext(), ["r0c1"], "transformer")
    params = model.host_parameters()
    assert len({id(p) for p in params}) == len(params)
    assert model.host_param_count() == 644_224
    assert cnn_model().host_param_count() == 6418


def test_seed_accounting_and_counts():
    model = cnn_model()
    assert (model.active_seed_params(), model.count_active_seeds(), model.count_fossilized_seeds()) == (0, 0, 0)
    model.germinate("r0c0", "conv_light", blend="gated")
    drive_to(model.slot("r0c0"), S.FOSSILIZED, blend="gated")
    model.germinate("r0c2", "conv_light", blend="gated")
    drive_to(model.slot("r0c2"), S.BLENDING)
    assert model.seed_param_count("r0c0") == 592 and model.seed_param_count("r0c2") == 9280
    assert model.active_seed_params() == 592 + 9280
    assert model.total_params() == 6418 + 592 + 9280
    assert (model.count_active_seeds(), model.count_fossilized_seeds(), model.total_seeds()) == (1, 1, 2)
    gate = model.gate_parameters("r0c2")
    assert gate and not {id(p) for p in gate} & {id(p) for p in model.seed_parameters()}
    assert len(model.seed_parameters()) == len(model.seed_parameters("r0c0")) + len(model.seed_parameters("r0c2"))
    assert model.slot("r0c2").state.metrics.host_param_count == 6418


def test_slot_reports_only_for_occupied_slots():
    model = cnn_model()
    assert model.slot_reports() == {}
    model.germinate("r0c1", "norm", seed_id="env0_seed_0")
    reports = model.slot_reports()
    assert list(reports) == ["r0c1"] and reports["r0c1"].seed_id == "env0_seed_0"


def test_model_cull_and_fossilize_delegate():
    model = cnn_model()
    model.germinate("r0c1", "norm")
    drive_to(model.slot("r0c1"), S.PROBATIONARY)
    model.slot("r0c1").set_contribution(0.5)
    assert not model.fossilize("r0c1").passed
    model.slot("r0c1").set_contribution(3.0)
    assert model.fossilize("r0c1").passed and model.slot("r0c1").alpha == 1.0
    assert model.cull("r0c1") is False
    assert model.cull("r0c0") is False


# ------------------------------------------------------------------ isolation (BEHAVIOUR §2.2, §2.3)


def test_training_seed_leaves_host_gradients_bit_identical():
    x, y = torch.randn(6, 3, 32, 32), torch.randint(0, 10, (6,))
    reference = cnn_model(("r0c1",))
    with_seed = copy.deepcopy(reference)
    with_seed.germinate("r0c1", "conv_heavy")
    with_seed.slot("r0c1").step_epoch()
    assert with_seed.slot("r0c1").stage == S.TRAINING
    for model in (reference, with_seed):
        model.train()
        torch.nn.functional.cross_entropy(model(x), y).backward()
    assert torch.equal(reference(x), with_seed(x))
    for a, b in zip(reference.host_parameters(), with_seed.host_parameters()):
        assert torch.equal(a.grad, b.grad)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in with_seed.seed_parameters("r0c1"))


def test_training_seed_in_transformer_leaves_host_gradients_bit_identical():
    x = torch.randint(0, 64, (2, 16))
    reference = tf_model(("r0c1",))
    with_seed = copy.deepcopy(reference)
    with_seed.germinate("r0c1", "norm")
    with_seed.slot("r0c1").step_epoch()
    for model in (reference, with_seed):
        model(x).square().mean().backward()
    for a, b in zip(reference.host_parameters(), with_seed.host_parameters()):
        assert torch.equal(a.grad, b.grad)
    assert all(p.grad.abs().sum() > 0 for p in with_seed.seed_parameters("r0c1"))


def test_cnn_seed_at_alpha_one_zeroes_upstream_host_gradients():
    model = cnn_model(("r0c1",))
    model.germinate("r0c1", "conv_light")
    drive_to(model.slot("r0c1"), S.PROBATIONARY)
    assert model.slot("r0c1").isolate_gradients and model.slot("r0c1").alpha == 1.0
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    torch.nn.functional.cross_entropy(model.train()(x), y).backward()
    for block in model.host.blocks[:2]:
        for p in block.parameters():
            assert p.grad is not None and torch.count_nonzero(p.grad) == 0
    for module in (model.host.blocks[2], model.host.classifier):
        assert all(p.grad.abs().sum() > 0 for p in module.parameters())


def test_transformer_blending_turns_isolation_off_and_host_gets_seed_path_gradient():
    model = tf_model(("r0c1",))
    model.germinate("r0c1", "norm")
    slot = model.slot("r0c1")
    drive_to(slot, S.PROBATIONARY)
    assert not slot.isolate_gradients
    x = torch.randint(0, 64, (2, 16))
    model(x).square().mean().backward()
    assert model.host.layers[0].mlp.c_fc.weight.grad.abs().sum() > 0


# ------------------------------------------------------------------ counterfactual (BEHAVIOUR §2.11)


@pytest.mark.parametrize("stage", [S.BLENDING, S.PROBATIONARY, S.FOSSILIZED])
def test_force_alpha_zero_equals_model_with_that_slot_emptied(stage):
    model = cnn_model(("r0c0", "r0c1"))
    model.germinate("r0c0", "conv_light")
    model.germinate("r0c1", "conv_light", blend="gated")
    drive_to(model.slot("r0c0"), S.PROBATIONARY)
    drive_to(model.slot("r0c1"), stage, blend="gated")
    if stage == S.BLENDING:
        epoch(model.slot("r0c1"), 90.0)
    model.eval()
    emptied = copy.deepcopy(model)
    emptied.slot("r0c1").seed = None
    emptied.slot("r0c1").state = None
    x = torch.randn(3, 3, 32, 32)
    slot = model.slot("r0c1")
    alpha, schedule = slot.alpha, slot.alpha_schedule
    with torch.no_grad(), slot.force_alpha(0.0):
        forced = model(x)
    assert torch.equal(forced, emptied(x))
    assert not torch.equal(model(x), forced)
    assert slot.alpha == alpha and slot.alpha_schedule is schedule


def _blending_model(make, blueprints):
    """Seeds in every slot, the first on probation, the others blending (the last with a gated blend)."""
    model = make()
    for i, (slot_id, blueprint) in enumerate(zip(model.slot_order, blueprints)):
        blend = "gated" if i == len(blueprints) - 1 else "sigmoid"
        model.germinate(slot_id, blueprint, blend=blend)
        drive_to(model.slot(slot_id), S.PROBATIONARY if i == 0 else S.BLENDING, blend=blend)
        if i > 0:
            epoch(model.slot(slot_id), 90.0)
    return model.eval()


@pytest.mark.parametrize(
    "make, blueprints, x",
    [
        (cnn_model, ("conv_light", "attention", "depthwise"), torch.randn(5, 3, 32, 32)),
        (tf_model, ("lora", "mlp_small", "attention"), torch.randint(0, 64, (3, 16))),
    ],
)
def test_fused_counterfactual_pass_equals_one_forced_forward_per_slot(make, blueprints, x):
    model = _blending_model(make, blueprints)
    with torch.inference_mode():
        for cf_slots in (("r0c0",), ("r0c1", "r0c2"), ("r0c0", "r0c1", "r0c2"), ()):
            real, counterfactual = model.forward_with_counterfactuals(x, cf_slots)
            torch.testing.assert_close(real, model(x), rtol=1e-5, atol=1e-5)
            assert sorted(counterfactual) == sorted(cf_slots)
            for slot_id in cf_slots:
                with model.slot(slot_id).force_alpha(0.0):
                    torch.testing.assert_close(counterfactual[slot_id], model(x), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ the gate trains (BEHAVIOUR §2.12)


def test_gate_enters_seed_optimizer_and_changes_after_one_step():
    model = cnn_model(("r0c1",))
    model.germinate("r0c1", "conv_light", blend="gated")
    slot = model.slot("r0c1")
    optimizer = torch.optim.SGD(model.seed_parameters("r0c1"), lr=0.01, momentum=0.9)
    drive_to(slot, S.BLENDING, blend="gated")
    epoch(slot, 90.0)
    optimizer.add_param_group({"params": model.gate_parameters("r0c1"), "lr": 0.01, "momentum": 0.9})
    before = [p.detach().clone() for p in model.gate_parameters("r0c1")]
    x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
    torch.nn.functional.cross_entropy(model.train()(x), y).backward()
    optimizer.step()
    assert any(not torch.equal(b, p) for b, p in zip(before, model.gate_parameters("r0c1")))
    assert model.seed_param_count("r0c1") == 2336 and model.active_seed_params() == 2336


def test_model_to_moves_slots_and_later_seeds():
    model = cnn_model(("r0c1",)).to(torch.float64)
    model.germinate("r0c1", "conv_light")
    model.slot("r0c1").step_epoch()
    out = model(torch.randn(2, 3, 32, 32, dtype=torch.float64))
    assert out.dtype == torch.float64


# ------------------------------------------------------------------ AMP and CUDA


def occupied_model(topology):
    if topology == "cnn":
        model, bp = cnn_model(), "conv_light"
    else:
        model, bp = tf_model(), "norm"
    model.germinate("r0c0", bp, blend="gated")
    drive_to(model.slot("r0c0"), S.BLENDING, blend="gated")
    epoch(model.slot("r0c0"), 90.0)
    model.germinate("r0c1", bp)
    model.slot("r0c1").step_epoch()
    model.germinate("r0c2", "attention")
    drive_to(model.slot("r0c2"), S.PROBATIONARY)
    return model


def model_input(topology, device="cpu"):
    if topology == "cnn":
        return torch.randn(4, 3, 32, 32, device=device)
    return torch.randint(0, 64, (2, 16), device=device)


@pytest.mark.parametrize("topology", ["cnn", "transformer"])
def test_every_stage_runs_under_bf16_autocast(topology):
    model = occupied_model(topology)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(model_input(topology))
    out.float().sum().backward()
    assert torch.isfinite(out.float()).all()
    assert all(p.grad is not None for p in model.seed_parameters("r0c1"))


@pytest.mark.gpu
@pytest.mark.parametrize("topology", ["cnn", "transformer"])
def test_cuda_fp16_autocast_matches_every_stage_semantics(topology):
    model = occupied_model(topology).cuda()
    x = model_input(topology, "cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        out = model(x)
    out.float().sum().backward()
    assert torch.isfinite(out.float()).all()
    assert all(p.grad is not None for p in model.seed_parameters("r0c1"))
    assert model.slot("r0c2").seed_parameters()[0].device.type == "cuda"
    with torch.no_grad(), model.slot("r0c2").force_alpha(0.0):
        forced = model.eval()(x)
    assert forced.shape == out.shape
