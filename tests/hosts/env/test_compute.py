"""The per-episode FLOP meter: host and seed shares per stage, validation and counterfactuals apart."""

from esper_fx.contracts.stages import SeedStage
from hosts.env.compute import ComputeMeter, ModelCosts
from hosts.models import flops as F
from hosts.models.cnn import CNNHost
from hosts.models.morphogenetic import MorphogeneticModel


def _model():
    host = CNNHost(num_classes=10, widths=(2, 4), kernel_size=3, in_channels=1)
    return MorphogeneticModel(host, ["r0c0", "r0c1"], "cnn")


def test_host_costs_split_at_each_slot():
    model = _model()
    costs = ModelCosts.of(model, (1, 4, 4))
    assert costs.host == F.forward_flops(model.host, (1, 4, 4))
    assert costs.activation == {"r0c0": (2, 2, 2), "r0c1": (4, 1, 1)}
    # after r0c1 only the head is left: Linear(4, 10) with a bias
    assert costs.host_after["r0c1"] == 2 * 4 * 10 + 10
    block1 = 2 * 2 * 9 * 4 * 4 + 4 * 4 * 4 + 4 * 4 + 3 * 4 * 1
    assert costs.host_after["r0c0"] == block1 + 2 * 4 * 10 + 10


def test_seed_stages_are_booked_apart_and_evaluation_is_not_training():
    model = _model()
    meter = ComputeMeter(ModelCosts.of(model, (1, 4, 4)))
    host = meter.costs.host
    meter.train_step(model, 8)
    assert meter.totals()["training_flops"] == 8 * 3 * host
    assert model.germinate("r0c0", "conv_light").passed
    model.slot("r0c0").advance_stage(SeedStage.TRAINING)
    seed = 2 * 2 * 9 * 2 * 4 + 4 * 8 + 8  # conv_light on 2x2x2
    meter.train_step(model, 8)
    meter.validation(model, (), 5)
    t = meter.totals()
    assert t["seed_isolated_flops"] == 8 * 3 * seed and t["seed_blending_flops"] == 0
    assert t["host_train_flops"] == 2 * 8 * 3 * host
    assert t["validation_flops"] == 5 * (host + seed) and t["counterfactual_flops"] == 0
    model.slot("r0c0").state.transition(SeedStage.BLENDING)  # past the dwell gate: only the stage matters here
    meter.train_step(model, 8)
    meter.validation(model, ("r0c0",), 5)
    t = meter.totals()
    assert t["seed_blending_flops"] == 8 * 3 * seed
    assert t["counterfactual_flops"] == 5 * meter.costs.host_after["r0c0"]
    assert t["training_flops"] == 3 * 8 * 3 * host + 2 * 8 * 3 * seed
    assert t["total_flops"] == t["training_flops"] + t["validation_flops"] + t["counterfactual_flops"]


def test_seed_share_is_the_active_seeds_forward_flops_over_the_hosts():
    model = _model()
    meter = ComputeMeter(ModelCosts.of(model, (1, 4, 4)))
    assert meter.seed_share(model) == 0.0
    assert model.germinate("r0c0", "conv_light").passed
    assert meter.seed_share(model) == 0.0  # germinated, not yet training: it costs nothing
    model.slot("r0c0").advance_stage(SeedStage.TRAINING)
    seed = 2 * 2 * 9 * 2 * 4 + 4 * 8 + 8  # conv_light on 2x2x2, as above
    assert meter.seed_share(model) == seed / meter.costs.host
    before = meter.totals()["seed_isolated_flops"]
    meter.train_step(model, 8)  # the share is what one training step books for the seeds, per host FLOP
    booked = meter.totals()["seed_isolated_flops"] - before
    assert booked == meter.seed_share(model) * 8 * 3 * meter.costs.host
