"""Governor (BEHAVIOUR §5)."""

import math

import pytest
import torch

from esper_fx.contracts.stages import SeedStage
from hosts import CNNHost, Governor, MorphogeneticModel
from tests.hosts.lifecycle_helpers import CIFAR_CLOCK, drive_to

LN10 = math.log(10)
S = SeedStage


def model():
    torch.manual_seed(0)
    return MorphogeneticModel(CNNHost(), ["r0c0", "r0c1", "r0c2"], "cnn", clock=CIFAR_CLOCK)


def governor(**kw):
    return Governor(model(), **kw)


# ------------------------------------------------------------------ BEHAVIOUR §5.2 check


@pytest.mark.parametrize("loss", [math.nan, math.inf, -math.inf])
def test_non_finite_loss_panics_immediately(loss):
    gov = governor()
    assert gov.check(loss) is True
    assert gov.consecutive_panics == 3 and len(gov.loss_history) == 0 and not gov.passed_last_check
    assert gov.last_panic_loss is loss or math.isnan(gov.last_panic_loss)


def test_nine_normal_losses_are_recorded():
    gov = governor()
    for _ in range(9):
        assert gov.check(2.0) is False
        assert gov.passed_last_check
    assert len(gov.loss_history) == 9


def test_history_window_is_twenty():
    gov = governor()
    for i in range(30):
        gov.check(2.0 + 0.01 * i)
    assert len(gov.loss_history) == 20


def test_lobotomy_rules():
    gov = governor()
    for _ in range(15):
        gov.check(0.8)
    assert gov.check(LN10) is True and gov.consecutive_panics == 3
    gov = governor()
    for _ in range(15):
        gov.check(2.0)
    assert gov.check(LN10) is False
    gov = governor(random_guess_loss=math.log(50257))
    for _ in range(15):
        gov.check(3.0)
    assert gov.check(math.log(50257) + 0.5) is True


def test_lobotomy_tolerance_bounds_for_ln10():
    for loss, expected in ((LN10 + 0.149, True), (LN10 + 0.151, False), (LN10 - 0.149, True)):
        gov = governor()
        for _ in range(10):
            gov.check(0.8)
        assert gov.check(loss) is expected


def test_lobotomy_needs_ten_history_entries():
    gov = governor()
    for _ in range(9):
        gov.check(0.8)
    assert gov.check(LN10) is False and len(gov.loss_history) == 10


def test_statistical_anomaly_rule():
    gov = governor(sensitivity=3.0, multiplier=3.0, absolute_threshold=20.0, min_panics_before_rollback=1)
    for _ in range(15):
        gov.check(2.0)
    assert gov.check(15.0) is False and gov.passed_last_check
    assert gov.check(25.0) is True and gov.last_panic_loss == 25.0
    assert len(gov.loss_history) == 16 and gov.loss_history[-1] == 15.0  # the anomaly is not appended
    assert gov.check(2.0) is False and gov.consecutive_panics == 0


def test_three_consecutive_anomalies_needed_by_default():
    gov = governor()
    for _ in range(15):
        gov.check(2.0)
    assert gov.check(50.0) is False and gov.consecutive_panics == 1
    assert not gov.passed_last_check  # returned False but left a panic count
    assert gov.check(50.0) is False
    assert gov.check(50.0) is True and gov.consecutive_panics == 3


# ------------------------------------------------------------------ BEHAVIOUR §5.3 snapshot and rollback


def populated():
    gov = governor()
    m = gov.model
    m.germinate("r0c0", "conv_light")
    drive_to(m.slot("r0c0"), S.FOSSILIZED)
    m.germinate("r0c1", "norm", blend="gated")
    drive_to(m.slot("r0c1"), S.BLENDING, blend="gated")
    m.germinate("r0c2", "conv_small")
    return gov


def perturb(module):
    with torch.no_grad():
        for t in module.state_dict().values():
            if t.is_floating_point():
                t.add_(1.0)


def test_snapshot_holds_cpu_copies_of_host_and_fossils_only():
    gov = populated()
    snap = gov.snapshot()
    assert set(snap.host) == set(gov.model.host.state_dict())
    assert any("running_mean" in k for k in snap.host)  # buffers included
    assert set(snap.fossils) == {"r0c0"}
    seed_id, tensors = snap.fossils["r0c0"]
    assert seed_id == gov.model.slot("r0c0").state.seed_id
    for t in list(snap.host.values()) + list(tensors.values()):
        assert t.device.type == "cpu" and not t.requires_grad
    live = dict(gov.model.host.named_parameters())
    assert all(snap.host[k].data_ptr() != p.data_ptr() for k, p in live.items())
    names = " ".join(snap.host)
    assert "slots" not in names and "gate" not in names


def test_rollback_restores_host_and_fossils_and_empties_other_slots():
    gov = populated()
    m = gov.model
    snap = gov.snapshot()
    optimizer = torch.optim.SGD(m.host_parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    torch.nn.functional.cross_entropy(m.train()(x), y).backward()
    optimizer.step()
    perturb(m.host)
    perturb(m.slot("r0c0").seed)
    fossil_state = m.slot("r0c0").state
    gov.check(math.nan)
    report = gov.rollback(optimizer)
    assert report.reason == "Structural Collapse" and report.rollback_occurred
    assert report.consecutive_panics == 0 and gov.consecutive_panics == 0
    assert math.isnan(report.loss_at_panic)
    assert report.culled_slots == ("r0c1", "r0c2") and report.restored_fossils == ("r0c0",)
    for slot_id in ("r0c1", "r0c2"):
        slot = m.slot(slot_id)
        assert slot.state is None and slot.seed is None and slot.alpha_schedule is None
        assert slot.last_culled.stage == S.CULLED
    for k, v in m.host.state_dict().items():
        assert torch.equal(v, snap.host[k])
    for k, v in m.slot("r0c0").seed.state_dict().items():
        assert torch.equal(v, snap.fossils["r0c0"][1][k])
    assert m.slot("r0c0").state is fossil_state and m.slot("r0c0").stage == S.FOSSILIZED
    momenta = [s["momentum_buffer"] for s in optimizer.state.values()]
    assert momenta and all(torch.count_nonzero(b) == 0 for b in momenta)


def test_rollback_keeps_loss_history_and_reports_threshold():
    gov = governor()
    for v in (1.0, 2.0, 3.0):
        gov.check(v)
    report = gov.rollback()
    assert list(gov.loss_history) == [1.0, 2.0, 3.0]
    assert report.loss_threshold == pytest.approx(2.0 + 6.0 * math.sqrt(2 / 3))


def test_fossil_made_after_snapshot_keeps_current_tensors():
    gov = governor()  # snapshot of the fresh model, no fossils
    m = gov.model
    m.germinate("r0c1", "conv_light")
    drive_to(m.slot("r0c1"), S.FOSSILIZED)
    perturb(m.slot("r0c1").seed)
    current = {k: v.clone() for k, v in m.slot("r0c1").seed.state_dict().items()}
    report = gov.rollback()
    assert report.culled_slots == () and report.restored_fossils == ()
    assert m.slot("r0c1").stage == S.FOSSILIZED
    for k, v in m.slot("r0c1").seed.state_dict().items():
        assert torch.equal(v, current[k])


def test_rollback_keeps_parameter_objects_for_the_optimizer():
    gov = governor()
    before = [id(p) for p in gov.model.host_parameters()]
    gov.rollback()
    assert [id(p) for p in gov.model.host_parameters()] == before


# ------------------------------------------------------------------ snapshot cadence [fix] (BEHAVIOUR §5.3)


def test_snapshot_retaken_only_at_multiples_of_five_after_a_passing_check():
    gov = governor(sensitivity=3.0, multiplier=3.0, absolute_threshold=20.0, min_panics_before_rollback=2)
    first = gov.snapshot_data
    taken = []
    for epoch in range(1, 11):
        gov.check(2.0)
        if gov.maybe_snapshot(epoch):
            taken.append(epoch)
    assert taken == [5, 10] and gov.snapshot_data is not first
    snap = gov.snapshot_data
    assert gov.check(50.0) is False and gov.consecutive_panics == 1  # anomalous, below min_panics
    assert gov.maybe_snapshot(15) is False and gov.snapshot_data is snap
    assert gov.check(math.nan) is True  # panicking epoch
    assert gov.maybe_snapshot(20) is False and gov.snapshot_data is snap
    gov.rollback()
    assert gov.check(2.0) is False and gov.maybe_snapshot(25) is True


def test_snapshot_never_contains_non_fossil_seeds_or_schedules():
    gov = populated()
    gov.check(2.0)
    gov.maybe_snapshot(5)
    assert set(gov.snapshot_data.fossils) == {"r0c0"}
    n_host = len(gov.model.host.state_dict())
    assert len(gov.snapshot_data.host) == n_host


def test_tied_transformer_weight_is_copied_once_and_restored():
    from hosts import TransformerHost

    torch.manual_seed(0)
    host = TransformerHost(vocab_size=64, n_embd=32, n_head=4, n_layer=3, block_size=16)
    gov = Governor(MorphogeneticModel(host, ["r0c1"], "transformer"), random_guess_loss=math.log(64))
    snap = gov.snapshot_data
    assert snap.host["tok_emb.weight"] is snap.host["head.weight"]
    perturb(host)
    gov.rollback()
    assert host.head.weight is host.tok_emb.weight
    assert torch.equal(host.tok_emb.weight, snap.host["tok_emb.weight"])
    for k, v in host.state_dict().items():
        assert torch.equal(v, snap.host[k])
