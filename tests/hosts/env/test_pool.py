"""EnvPool: the multi-env epoch engine (BEHAVIOUR §7.2–§7.5)."""

from __future__ import annotations

import copy
import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_fx.config import TrainingConfig
from esper_fx.contracts.actions import DEFAULT_TEMPO, LifecycleOp
from esper_fx.contracts.events import EventType
from esper_fx.contracts.observation import obs_dim
from esper_fx.contracts.signals import SIGNAL_FIELDS
from esper_fx.contracts.stages import SeedStage
from esper_fx.training.pools import pool_settings
from hosts.data.task_data import TaskData, load_task_data, val_batches
from hosts.env import EnvPool
from hosts.env.epoch_compute import loss_and_correct
from hosts.data.feed import DataFeed
from hosts.tasks import get_task
from hosts.seeds.governor import Governor

WAIT, GERMINATE, CULL, FOSSILIZE = (int(op) for op in LifecycleOp)
LINEAR, SIGMOID, GATED = 0, 1, 2
CONV_LIGHT, ATTENTION, NORM = 1, 2, 3
DTYPES = {"float32": torch.float32, "int32": torch.int32, "bool": torch.bool}


# ------------------------------------------------------------------------------------------
# fixtures and helpers
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny CPU workloads on a shared 2-core machine: intra-op threads only add contention."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def shapes10_data() -> TaskData:
    return load_task_data(get_task("shapes10"), "cpu", synthetic_train_samples=2048, synthetic_test_samples=512)


def fake_image_data(n_train: int = 1024, n_test: int = 256, seed: int = 0) -> TaskData:
    """Random CIFAR-shaped images: enough to run a host of any CNN task without a download."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n_train + n_test, 3, 32, 32, generator=gen)
    y = torch.randint(0, 10, (n_train + n_test,), generator=gen)
    return TaskData("classification", x[:n_train], y[:n_train], x[n_train:], y[n_train:], torch.zeros(3))


def make_config(**overrides) -> TrainingConfig:
    """The pool under the reference's masks (BEHAVIOUR §9.1: CULL from age 1, GERMINATE beside a developing
    seed); the LEARNING masks (min_cull_age 9, one_seed_at_a_time) are tested in tests/hosts/signals/test_masks.py."""
    base = dict(task="shapes10", n_envs=2, max_epochs=8, slots=("r0c1",), device="cpu", batch_size_per_env=64,
                max_train_batches=3, synthetic_train_samples=2048, synthetic_test_samples=512, val_samples=256,
                min_cull_age=1, one_seed_at_a_time=False, germination_deadline=False)
    base.update(overrides)
    return TrainingConfig(**base)


def make_pool(data, **overrides) -> EnvPool:
    nan_faults = overrides.pop("nan_faults", ())
    pool = EnvPool(pool_settings(make_config(**overrides)), data=data, nan_faults=nan_faults)
    pool.build_envs(0)
    return pool


def actions(*rows) -> np.ndarray:
    """The epoch's actions [E, 5] int32; a row given without its tempo takes the standard one."""
    return np.array([list(r) + [DEFAULT_TEMPO] * (5 - len(r)) for r in rows], dtype=np.int32)


def wait_all(pool: EnvPool, slot: int = 1) -> np.ndarray:
    return actions(*[(slot, 1, 1, WAIT)] * pool.n_active)


def germinate_all(pool: EnvPool, slot: int = 1, blueprint: int = CONV_LIGHT, blend: int = SIGMOID) -> np.ndarray:
    return actions(*[(slot, blueprint, blend, GERMINATE)] * pool.n_active)


def epoch(pool: EnvPool, acts=None, bootstrap: bool = False):
    """One full epoch: train, validate, signals, apply (WAIT by default); returns (signals, result)."""
    signals = pool.train_and_validate()
    result = pool.apply(wait_all(pool) if acts is None else acts, bootstrap=bootstrap)
    return signals, result


def force_stage(slot, stage: SeedStage, alpha: float | None = None) -> None:
    """Walk a seed along the legal chain to `stage` without gates (scripted states for tests)."""
    chain = (SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY, SeedStage.FOSSILIZED)
    for target in chain[chain.index(slot.stage) + 1 if slot.stage in chain else 0 : chain.index(stage) + 1]:
        assert slot.state.transition(target)
    slot.alpha_schedule = None
    if alpha is not None:
        slot.set_alpha(alpha)


def independent_accuracy(model, data: TaskData, val_samples: int, batch: int) -> float:
    """Plain eval-mode accuracy over the fixed validation set, outside the pool."""
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in val_batches(data, val_samples, batch):
            _, c = loss_and_correct(model(x), y)
            correct += int(c)
            total += y.numel()
    return 100.0 * correct / total


def assert_signals_equal(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for name in a:
        assert torch.equal(a[name].nan_to_num(), b[name].nan_to_num()), name
        assert torch.equal(a[name].isnan(), b[name].isnan()) if a[name].is_floating_point() else True


# ------------------------------------------------------------------------------------------
# the signals contract
# ------------------------------------------------------------------------------------------


def check_contract(signals: dict, e: int, s: int, b: int, d: int) -> None:
    sizes = {"E": e, "S": s, "B": b, "D": d}
    assert list(signals) == list(SIGNAL_FIELDS)
    for name, (shape, dtype) in SIGNAL_FIELDS.items():
        t = signals[name]
        want = tuple(sizes[tok] if tok in sizes else int(tok) for tok in shape.strip("[]").replace(" ", "").split(","))
        assert tuple(t.shape) == want, name
        assert t.dtype == DTYPES[dtype], name
        assert t.is_contiguous(), name


@pytest.mark.parametrize("slots", [("r0c1",), ("r0c0", "r0c1", "r0c2")])
@pytest.mark.parametrize("telemetry", [True, False])
def test_signals_match_the_contract_on_the_three_slot_host(shapes10_data, slots, telemetry):
    pool = make_pool(shapes10_data, slots=slots, use_telemetry=telemetry, n_envs=2)
    signals = pool.train_and_validate()
    check_contract(signals, e=2, s=3, b=5, d=obs_dim(3, telemetry))
    assert signals["obs"].shape[1] == (89 if telemetry else 59)


def test_signals_match_the_contract_on_the_five_slot_deep_host():
    slots = ("r0c0", "r0c1", "r0c2", "r0c3", "r0c4")
    pool = EnvPool(pool_settings(make_config(task="cifar10_deep", slots=slots, n_envs=1, max_train_batches=1)),
                   data=fake_image_data())
    pool.build_envs(0)
    signals = pool.train_and_validate()
    check_contract(signals, e=1, s=5, b=5, d=133)
    pool.apply(actions((4, CONV_LIGHT, SIGMOID, GERMINATE)))
    assert pool.envs[0].model.slot("r0c4").stage == SeedStage.TRAINING
    check_contract(pool.train_and_validate(), e=1, s=5, b=5, d=133)


def test_signals_are_fresh_tensors_every_call(shapes10_data):
    pool = make_pool(shapes10_data)
    pool.train_and_validate()
    first, second = pool.signals(), pool.signals()
    assert all(first[n].data_ptr() != second[n].data_ptr() for n in first)
    assert_signals_equal(first, second)


def test_fewer_active_envs_give_fewer_signal_rows(shapes10_data):
    pool = EnvPool(pool_settings(make_config(n_envs=3)), data=shapes10_data)
    pool.build_envs(1, n_active=2)
    check_contract(pool.train_and_validate(), e=2, s=3, b=5, d=89)


def test_per_env_fields_report_epoch_metrics_and_accounting(shapes10_data):
    pool = make_pool(shapes10_data)
    signals = pool.train_and_validate()
    m = pool.envs[0].metrics
    assert signals["epoch"].tolist() == [1, 1] and signals["max_epochs"].tolist() == [8, 8]
    assert signals["val_acc"][0].item() == pytest.approx(m.val_acc)
    assert signals["obs"][0, 1].item() == pool.steps_per_epoch  # global_step = t·K
    assert signals["loss_delta"][0].item() == math.inf  # +inf at t = 1
    assert signals["host_params"].tolist() == [6418.0, 6418.0]
    assert signals["seed_params"].tolist() == [0.0, 0.0]
    pool.apply(germinate_all(pool, blueprint=CONV_LIGHT))
    signals = pool.train_and_validate()
    assert signals["seed_params"].tolist() == [2336.0, 2336.0]  # conv_light at C = 16
    assert signals["total_seeds"].tolist() == [1, 1]
    assert signals["slot_acc_at_germination_valid"][:, 1].all()
    assert signals["slot_acc_at_germination"][0, 1].item() == pytest.approx(m.val_acc)


# ------------------------------------------------------------------------------------------
# the lifecycle's clock in the pool (BEHAVIOUR §2.14)
# ------------------------------------------------------------------------------------------


def test_the_tempo_mask_allows_only_the_standard_tempo_under_the_reference_clock(shapes10_data):
    signals = make_pool(shapes10_data, n_envs=1).train_and_validate()
    assert signals["mask_tempo"].tolist() == [[False, True, False]]
    proportional = make_pool(shapes10_data, n_envs=1, lifecycle="proportional").train_and_validate()
    assert proportional["mask_tempo"].tolist() == [[True, True, True]]


def test_a_proportional_seed_ramps_during_its_blending_epoch_and_carries_its_tempo(shapes10_data):
    """T = 30 epochs of 3 steps: the slow ramp lasts round(8/150 · 90) = 5 training steps, two epochs' worth."""
    pool = make_pool(shapes10_data, n_envs=1, lifecycle="proportional", max_epochs=30)
    assert pool.clock.blend_ticks(2) == round(8 / 150 * 90) == 5
    pool.train_and_validate()
    pool.apply(actions((1, CONV_LIGHT, SIGMOID, GERMINATE, 2)))  # the slow tempo
    slot = pool.envs[0].slot("r0c1")
    assert slot.stage == SeedStage.TRAINING and slot.report().tempo == 2
    metrics = slot.state.metrics  # G2 as if the host had gained 1 pp over the clock's dwell
    metrics.epochs_in_current_stage, metrics.current_val_accuracy = 2, metrics.accuracy_at_stage_start + 1.0
    slot.set_gradient_ratio(1.0)
    assert slot.advance_stage(SeedStage.BLENDING).passed
    assert slot.state.blending_steps_total == 5
    pool.train_epoch()  # 3 of the ramp's 5 steps
    assert slot.state.blending_steps_done == 3 and 0.0 < slot.alpha < 1.0


# ------------------------------------------------------------------------------------------
# masks and telemetry for scripted slot states (BEHAVIOUR §9.1, §8.4)
# ------------------------------------------------------------------------------------------


def test_masks_follow_the_slot_states(shapes10_data):
    pool = make_pool(shapes10_data, slots=("r0c1", "r0c2"), n_envs=1)
    signals = pool.train_and_validate()
    assert signals["mask_slot"].tolist() == [[False, True, True]]
    assert signals["mask_blueprint"].tolist() == [[False, True, True, True, True]]
    assert signals["mask_blend"].tolist() == [[True, True, True]]
    assert signals["mask_op"].tolist() == [[True, True, False, False]]  # empty slots: WAIT, GERMINATE
    pool.apply(actions((1, CONV_LIGHT, SIGMOID, GERMINATE)))
    signals, _ = epoch(pool)  # TRAINING, age 1 -> cullable; r0c2 still empty
    assert signals["mask_op"].tolist() == [[True, True, True, False]]
    model = pool.envs[0].model
    force_stage(model.slot("r0c1"), SeedStage.PROBATIONARY, alpha=1.0)
    signals = pool.train_and_validate()
    assert signals["mask_op"].tolist() == [[True, True, True, True]]
    force_stage(model.slot("r0c1"), SeedStage.FOSSILIZED, alpha=1.0)
    pool.apply(actions((2, ATTENTION, SIGMOID, GERMINATE)))
    signals = pool.train_and_validate()  # fossil in r0c1, a TRAINING seed in r0c2 (age 1): no empty slot left
    assert signals["mask_op"].tolist() == [[True, False, True, False]]
    assert signals["slot_stage"].tolist() == [[0, int(SeedStage.FOSSILIZED), int(SeedStage.TRAINING)]]


def test_telemetry_block_is_zero_for_disabled_and_empty_slots(shapes10_data):
    pool = make_pool(shapes10_data, slots=("r0c1",), n_envs=1)
    pool.train_and_validate()
    pool.apply(germinate_all(pool))
    obs = pool.train_and_validate()["obs"][0]
    telemetry = obs[obs_dim(3, telemetry=False):]  # the three telemetry blocks follow the slot blocks
    blocks = [telemetry[10 * i : 10 * i + 10] for i in range(3)]
    assert not blocks[0].any() and not blocks[2].any()  # disabled slots
    assert blocks[1][1].item() == 1.0  # gradient health of the seed in r0c1
    assert blocks[1][0].item() > 0.0  # its gradient norm was measured in TRAINING


# ------------------------------------------------------------------------------------------
# determinism and the data split
# ------------------------------------------------------------------------------------------


def scripted_run(data, batch: int = 0, **overrides) -> list[dict]:
    pool = EnvPool(pool_settings(make_config(slots=("r0c0", "r0c1"), **overrides)), data=data)
    pool.build_envs(batch)
    script = [germinate_all(pool, slot=0), actions((1, NORM, GATED, GERMINATE), (1, ATTENTION, LINEAR, GERMINATE)),
              None, None]
    out = []
    for acts in script:
        signals, result = epoch(pool, acts, bootstrap=acts is None)
        out += [signals, result.bootstrap_signals or {}]
    return out


def test_same_seed_gives_bitwise_identical_signals_in_two_fresh_pools(shapes10_data):
    first, second = scripted_run(shapes10_data), scripted_run(shapes10_data)
    for a, b in zip(first, second):
        assert_signals_equal(a, b)


def test_another_batch_index_changes_the_episode(shapes10_data):
    a, b = scripted_run(shapes10_data, batch=0)[0], scripted_run(shapes10_data, batch=1)[0]
    assert not torch.equal(a["obs"], b["obs"])


def test_loader_path_gives_the_same_episode_as_the_device_path(shapes10_data):
    device = scripted_run(shapes10_data)
    loader = scripted_run(shapes10_data, data_path="loader", num_workers=0)
    for a, b in zip(device, loader):
        assert_signals_equal(a, b)


def test_a_feed_built_for_another_seed_is_rejected(shapes10_data):
    feed = DataFeed(get_task("shapes10"), shapes10_data, ["cpu", "cpu"], batch_per_env=64, seed=1)
    with pytest.raises(ValueError, match="seed"):
        EnvPool(pool_settings(make_config(seed=42)), data=feed)


def test_shared_split_gives_disjoint_env_slices(shapes10_data):
    pool = make_pool(shapes10_data, n_envs=4, batch_size_per_env=64, max_train_batches=0)
    assert pool.steps_per_epoch == 2048 // (4 * 64)
    pool.train_epoch()
    indices = pool.data.plan("cpu").indices  # [E, K, Bpe]
    for k in range(pool.steps_per_epoch):
        step = indices[:, k]
        assert torch.unique(step).numel() == step.numel()
    assert torch.unique(indices).numel() == indices.numel()  # nothing repeats within the epoch


def test_full_split_runs_every_env_through_its_own_permutation(shapes10_data):
    pool = make_pool(shapes10_data, data_split="full", max_train_batches=0, batch_size_per_env=256)
    assert pool.steps_per_epoch == 2048 // 256
    pool.train_epoch()
    indices = pool.data.plan("cpu").indices
    assert all(torch.unique(indices[i]).numel() == 2048 for i in range(2))
    assert not torch.equal(indices[0], indices[1])


def test_validation_metrics_do_not_depend_on_the_validation_batch_size(shapes10_data):
    results = []
    for vbs in (64, 100, 256):
        pool = make_pool(shapes10_data, val_batch_size=vbs)
        signals = pool.train_and_validate()
        results.append((signals["val_acc"], signals["val_loss"]))
    for acc, loss in results[1:]:
        assert torch.equal(acc, results[0][0])
        assert torch.allclose(loss, results[0][1], rtol=1e-5)


def test_identical_models_in_two_envs_report_identical_validation(shapes10_data):
    pool = make_pool(shapes10_data)
    pool.train_epoch()  # different batches give different models; validate two copies of env 0's
    pool.envs[1].model.load_state_dict(pool.envs[0].model.state_dict())
    pool.validate()
    signals = pool.signals()
    assert signals["val_acc"][0] == signals["val_acc"][1]
    assert signals["val_loss"][0] == signals["val_loss"][1]


def test_language_model_validation_loss_is_token_weighted_over_the_fixed_set():
    data = load_task_data(get_task("pytext"), "cpu")
    config = make_config(task="pytext", n_envs=1, batch_size_per_env=4, max_train_batches=2, val_samples=10,
                         val_batch_size=4)  # chunks of 4, 4, 2 blocks
    pool = EnvPool(pool_settings(config), data=data)
    pool.build_envs(0)
    signals = pool.train_and_validate()
    check_contract(signals, e=1, s=3, b=5, d=89)
    model = pool.envs[0].model.eval()
    blocks = data.x_test[:10]
    with torch.no_grad():
        logits = model(blocks[:, :-1]).reshape(-1, 256)
    targets = blocks[:, 1:].reshape(-1).long()
    assert signals["val_loss"][0].item() == pytest.approx(F.cross_entropy(logits, targets).item(), rel=1e-5)
    accuracy = 100.0 * (logits.argmax(-1) == targets).float().mean().item()
    assert signals["val_acc"][0].item() == pytest.approx(accuracy, abs=1e-4)
    pool.apply(actions((1, 1, SIGMOID, GERMINATE)))  # lora on the transformer menu
    assert pool.envs[0].slot("r0c1").state.blueprint_id == "lora"
    signals = pool.train_and_validate()
    assert signals["slot_stage"][0, 1].item() == int(SeedStage.TRAINING)
    assert torch.isfinite(signals["train_loss"]).all()


# ------------------------------------------------------------------------------------------
# counterfactual (BEHAVIOUR §7.3 phase 2, §7.3 phase 6)
# ------------------------------------------------------------------------------------------


def test_contribution_equals_the_accuracy_drop_with_alpha_forced_to_zero(shapes10_data):
    pool = make_pool(shapes10_data, n_envs=1, slots=("r0c0", "r0c1"))
    pool.train_and_validate()
    pool.apply(actions((0, NORM, SIGMOID, GERMINATE)))
    pool.train_and_validate()
    pool.apply(actions((1, CONV_LIGHT, SIGMOID, GERMINATE)))
    model = pool.envs[0].model
    force_stage(model.slot("r0c0"), SeedStage.PROBATIONARY, alpha=1.0)
    force_stage(model.slot("r0c1"), SeedStage.BLENDING, alpha=0.5)
    pool.train_epoch()
    pool.validate()
    signals = pool.signals()
    real = independent_accuracy(copy.deepcopy(model), shapes10_data, 256, 64)
    for index, slot_id in ((0, "r0c0"), (1, "r0c1")):
        without = copy.deepcopy(model)
        without.cull(slot_id)
        baseline = independent_accuracy(without, shapes10_data, 256, 64)
        assert pool.envs[0].metrics.baseline_acc[slot_id] == pytest.approx(baseline)
        assert signals["slot_contribution_valid"][0, index]
        assert signals["slot_contribution"][0, index].item() == pytest.approx(real - baseline, abs=1e-4)
        assert model.slot(slot_id).state.metrics.counterfactual_contribution == pytest.approx(real - baseline)
    assert signals["val_acc"][0].item() == pytest.approx(real)


def test_a_training_seed_has_no_contribution(shapes10_data):
    pool = make_pool(shapes10_data, n_envs=1)
    pool.train_and_validate()
    pool.apply(germinate_all(pool))
    signals = pool.train_and_validate()
    assert pool.envs[0].metrics.cf_slots == ()
    assert not signals["slot_contribution_valid"].any()


# ------------------------------------------------------------------------------------------
# actions (BEHAVIOUR §7.4) and step_epoch (§7.3 step 10.7)
# ------------------------------------------------------------------------------------------


def test_cull_aimed_at_a_fossil_keeps_the_same_optimizer_and_momentum(shapes10_data):
    pool = make_pool(shapes10_data, n_envs=1)
    pool.train_and_validate()
    pool.apply(germinate_all(pool))
    env = pool.envs[0]
    force_stage(env.slot("r0c1"), SeedStage.FOSSILIZED, alpha=1.0)
    pool.train_and_validate()  # the fossil keeps training: its optimizer holds momentum
    entry = env.seed_optimizers["r0c1"]
    optimizer = entry.optimizer
    momentum = {id(p): s["momentum_buffer"].clone() for p, s in optimizer.state.items()}
    assert momentum
    result = pool.apply(actions((1, 1, 1, CULL)))
    assert result.success == (False,)
    assert env.slot("r0c1").stage == SeedStage.FOSSILIZED
    assert env.seed_optimizers["r0c1"] is entry and entry.optimizer is optimizer
    assert all(torch.equal(s["momentum_buffer"], momentum[id(p)]) for p, s in optimizer.state.items())
    assert env.counters.action_counts[CULL] == 1 and env.counters.successful_action_counts[CULL] == 0


def test_gated_blend_gate_joins_the_seed_optimizer_at_blending_and_trains(shapes10_data):
    pool = make_pool(shapes10_data, n_envs=1, max_train_batches=1)
    pool.train_and_validate()
    pool.apply(actions((1, CONV_LIGHT, GATED, GERMINATE)))
    env = pool.envs[0]
    for _ in range(2):  # eis 1, 2: G2 cannot pass yet
        epoch(pool)
    slot = env.slot("r0c1")
    optimizer = env.seed_optimizers["r0c1"].optimizer
    pool.train_and_validate()
    metrics = slot.state.metrics  # make G2 pass at this step_epoch, with the measured ratio kept
    metrics.accuracy_at_stage_start = metrics.current_val_accuracy - 1.0
    metrics.seed_gradient_norm_ratio = max(metrics.seed_gradient_norm_ratio, 0.2)
    seed_params_before = pool.envs[0].model.active_seed_params()
    pool.apply(wait_all(pool))
    assert slot.stage == SeedStage.BLENDING
    gate = env.model.gate_parameters("r0c1")
    assert gate
    gate_before = [p.detach().clone() for p in gate]
    momentum_before = {id(p): s["momentum_buffer"].clone() for p, s in optimizer.state.items()}
    signals = pool.train_and_validate()
    entry = env.seed_optimizers["r0c1"]
    assert entry.optimizer is optimizer and entry.gate_added
    grouped = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert all(id(p) in grouped for p in gate)
    assert any(not torch.equal(p, before) for p, before in zip(gate, gate_before))
    with_state = {id(p) for p in optimizer.state}
    assert all(id(p) in with_state for p in env.model.seed_parameters("r0c1"))
    assert momentum_before  # the seed's momentum existed before BLENDING and was kept
    assert env.model.active_seed_params() == seed_params_before
    assert signals["seed_params"][0].item() == seed_params_before


def test_ratio_is_computed_without_telemetry_and_g2_moves_the_seed_to_blending(shapes10_data):
    pool = make_pool(shapes10_data, n_envs=1, use_telemetry=False, slots=("r0c0",), max_train_batches=4,
                     max_epochs=10)
    pool.train_and_validate()
    pool.apply(actions((0, CONV_LIGHT, SIGMOID, GERMINATE)))
    slot = pool.envs[0].slot("r0c0")
    reached = False
    for _ in range(8):
        pool.train_and_validate()
        report = slot.report()
        assert report.gradient_ratio > 0.0 and pool.envs[0].counters.ratio_ema["r0c0"] == report.gradient_ratio
        g2 = (report.improvement_since_stage_start >= 0.5 and report.epochs_in_stage >= 3
              and report.gradient_ratio >= 0.10)
        was_training = report.stage == SeedStage.TRAINING
        pool.apply(wait_all(pool, slot=0))
        if was_training:
            assert (slot.stage == SeedStage.BLENDING) == g2
            reached |= g2
        if slot.stage != SeedStage.TRAINING:
            break
    assert reached


def test_germinate_fossilize_and_cull_follow_the_action_table(shapes10_data):
    pool = make_pool(shapes10_data, n_envs=1, slots=("r0c1", "r0c2"))
    pool.train_and_validate()
    result = pool.apply(actions((0, CONV_LIGHT, SIGMOID, GERMINATE)))  # r0c0 is disabled
    assert result.success == (False,)
    pool.train_and_validate()
    result = pool.apply(actions((1, NORM, LINEAR, GERMINATE)))
    env = pool.envs[0]
    assert result.success == (True,) and env.slot("r0c1").state.seed_id == "env0_seed_0"
    assert env.slot("r0c1").state.blueprint_id == "norm" and env.slot("r0c1").blend == "linear"
    pool.train_and_validate()
    assert pool.apply(actions((1, CONV_LIGHT, SIGMOID, GERMINATE))).success == (False,)  # occupied
    pool.train_and_validate()
    assert pool.apply(actions((1, 1, 1, FOSSILIZE))).success == (False,)  # TRAINING
    pool.train_and_validate()
    result = pool.apply(actions((1, 1, 1, CULL)))
    assert result.success == (True,) and env.slot("r0c1").state is None
    assert "r0c1" not in env.seed_optimizers and "r0c1" not in env.counters.acc_at_germination
    assert "r0c1" not in env.counters.ratio_ema
    assert [e.data["reason"] for e in result.events if e.event_type == EventType.SEED_CULLED] == [""]
    assert env.counters.action_counts == [0, 3, 1, 1]
    assert env.counters.successful_action_counts == [0, 1, 1, 0]


def test_fossilize_succeeds_from_probationary_with_contribution(shapes10_data):
    pool = make_pool(shapes10_data, n_envs=1)
    pool.train_and_validate()
    pool.apply(germinate_all(pool))
    env = pool.envs[0]
    force_stage(env.slot("r0c1"), SeedStage.PROBATIONARY, alpha=1.0)
    pool.train_and_validate()
    env.slot("r0c1").set_contribution(2.0)
    metrics = env.slot("r0c1").state.metrics
    metrics.initial_val_accuracy = metrics.current_val_accuracy - 1.5
    result = pool.apply(actions((1, 1, 1, FOSSILIZE)))
    assert result.success == (True,) and env.slot("r0c1").stage == SeedStage.FOSSILIZED
    assert env.counters.seeds_fossilized == 1 and env.counters.contributing_fossilized == 1
    assert "r0c1" not in env.counters.acc_at_germination
    results = pool.episode_results()[0]
    assert (results.seeds_created, results.seeds_fossilized) == (1, 1)


def test_auto_culls_are_reported_in_the_next_signals_once(shapes10_data):
    pool = make_pool(shapes10_data, n_envs=1)
    pool.train_and_validate()
    pool.apply(germinate_all(pool))
    env = pool.envs[0]
    force_stage(env.slot("r0c1"), SeedStage.PROBATIONARY, alpha=1.0)
    signals = pool.train_and_validate()
    assert signals["auto_culls"].tolist() == [0]
    env.slot("r0c1").set_contribution(-1.0)
    result = pool.apply(wait_all(pool))
    assert env.slot("r0c1").state is None and "r0c1" not in env.seed_optimizers
    culls = [e for e in result.events if e.event_type == EventType.SEED_CULLED]
    assert [(e.data["reason"], e.data["auto"]) for e in culls] == [("negative_counterfactual", True)]
    signals = pool.train_and_validate()
    assert signals["auto_culls"].tolist() == [1]  # a count: the reward prices it (RewardConfig.auto_cull_penalty)
    pool.apply(wait_all(pool))
    assert pool.train_and_validate()["auto_culls"].tolist() == [0]


def test_bootstrap_signals_describe_the_post_action_state(shapes10_data):
    pool = make_pool(shapes10_data, n_envs=1, max_epochs=2)
    epoch(pool)
    pre = pool.train_and_validate()
    result = pool.apply(germinate_all(pool), bootstrap=True)
    boot = result.bootstrap_signals
    check_contract(boot, e=1, s=3, b=5, d=89)
    assert boot["slot_stage"][0, 1].item() == int(SeedStage.GERMINATED)  # before step_epoch
    assert pool.envs[0].slot("r0c1").stage == SeedStage.TRAINING  # after it
    assert boot["mask_op"].tolist() == [[True, False, False, False]]
    assert boot["loss_delta"].tolist() == [0.0] and boot["acc_delta"].tolist() == [0.0]
    assert boot["obs"][0, 15].item() == boot["obs"][0, 14].item() == pre["obs"][0, 15].item()
    assert boot["obs"][0, 21].item() == 6418 + 2336
    assert pool.envs[0].tracker.plateau_epochs == pre["plateau_epochs"][0].item()


def test_peek_between_execute_and_finish_equals_the_bootstrap(shapes10_data):
    a, b = make_pool(shapes10_data, n_envs=1), make_pool(shapes10_data, n_envs=1)
    a.train_and_validate()
    b.train_and_validate()
    boot = a.apply(germinate_all(a), bootstrap=True).bootstrap_signals
    b.execute_actions(germinate_all(b))
    assert_signals_equal(boot, b.peek_signals())
    b.finish_epoch()


def test_calls_out_of_order_raise(shapes10_data):
    pool = EnvPool(pool_settings(make_config()), data=shapes10_data)
    with pytest.raises(RuntimeError, match="begin"):
        pool.train_epoch()
    pool.build_envs(0)
    with pytest.raises(RuntimeError):
        pool.validate()
    pool.train_epoch()
    with pytest.raises(RuntimeError):
        pool.apply(wait_all(pool))


def test_the_episode_ends_after_max_epochs(shapes10_data):
    pool = make_pool(shapes10_data, n_envs=1, max_epochs=2)
    epoch(pool)
    epoch(pool)
    with pytest.raises(RuntimeError, match="2 epochs"):
        pool.train_epoch()
    assert pool.episode_results()[0].epochs == 2


def test_begin_and_step_run_a_whole_episode_with_the_bootstrap_at_the_end(shapes10_data):
    pool = EnvPool(pool_settings(make_config(max_epochs=3, n_envs=1)), data=shapes10_data)
    signals = pool.begin(0)
    seen = [signals["epoch"].item()]
    for _ in range(3):
        result, signals = pool.step(wait_all(pool))
        if signals is not None:
            seen.append(signals["epoch"].item())
            assert result.bootstrap_signals is None
    assert seen == [1, 2, 3] and signals is None
    assert result.bootstrap_signals is not None and result.bootstrap_signals["epoch"].item() == 3


def test_bad_actions_raise_naming_the_head(shapes10_data):
    pool = make_pool(shapes10_data)
    pool.train_and_validate()
    with pytest.raises(ValueError, match="blueprint"):
        pool.apply(actions((1, 7, 1, WAIT), (1, 1, 1, WAIT)))
    with pytest.raises(ValueError, match=r"^env 1: tempo index -1 is outside \[0, 3\)$"):
        pool.apply(actions((1, 1, 1, WAIT), (1, 1, 1, WAIT, -1)))


def test_actions_other_than_a_numpy_integer_array_of_the_pools_shape_are_refused(shapes10_data):
    """One form from the policy to the slots: a list, a torch tensor, a float array or another shape is
    refused before any env acts, with a message that says the form."""
    pool = make_pool(shapes10_data)
    pool.train_and_validate()
    rows = [[1, 1, 1, WAIT, DEFAULT_TEMPO]] * 2
    for wrong, form in ((rows, "builtins.list"), (torch.tensor(rows, dtype=torch.int32), "torch.Tensor"),
                        (np.array(rows, dtype=np.float32), "dtype float32")):
        with pytest.raises(TypeError, match=rf"actions must be a numpy integer array \[E, 5\] .*got {form}"):
            pool.apply(wrong)
    for shape in ((1, 5), (2, 4)):
        with pytest.raises(ValueError, match=r"actions must be \[2, 5\], .*got shape " + re.escape(str(list(shape)))):
            pool.apply(np.ones(shape, dtype=np.int32))
    assert [env.counters.action_counts for env in pool.envs] == [[0, 0, 0, 0]] * 2


def test_the_result_holds_the_executed_actions_as_a_read_only_int32_array(shapes10_data):
    pool = make_pool(shapes10_data)
    pool.train_and_validate()
    given = actions((1, CONV_LIGHT, SIGMOID, GERMINATE), (1, 1, 1, WAIT)).astype(np.int64)
    result = pool.apply(given)
    assert result.actions.dtype == np.int32 and result.actions.tolist() == given.tolist()
    assert not result.actions.flags.writeable
    given[0, 3] = WAIT  # the caller's array stays the caller's
    assert result.actions[0, 3] == GERMINATE


def test_a_non_finite_gradient_measurement_leaves_the_ratio_ema_alone(shapes10_data, monkeypatch):
    pool = make_pool(shapes10_data, n_envs=1)
    epoch(pool, germinate_all(pool))
    epoch(pool)
    env = pool.envs[0]
    before = env.counters.ratio_ema["r0c1"]
    monkeypatch.setattr("hosts.env.epoch_compute.gradient_ratio", lambda host, seed: torch.full((), float("inf")))
    pool.train_and_validate()
    assert env.counters.ratio_ema["r0c1"] == before == env.slot("r0c1").report().gradient_ratio


# ------------------------------------------------------------------------------------------
# governor (BEHAVIOUR §5.3, §5.4, §7.3 phase 4)
# ------------------------------------------------------------------------------------------


def test_forced_nan_in_env_1_rolls_back_without_ghost_state(shapes10_data):
    pool = make_pool(shapes10_data, n_envs=2, slots=("r0c0", "r0c1"), nan_faults=[(1, 3)])
    epoch(pool, actions((1, CONV_LIGHT, SIGMOID, GERMINATE), (1, CONV_LIGHT, SIGMOID, GERMINATE)))
    env0, env1 = pool.envs
    force_stage(env1.slot("r0c1"), SeedStage.BLENDING, alpha=0.5)
    epoch(pool, actions((0, NORM, SIGMOID, GERMINATE), (0, NORM, SIGMOID, GERMINATE)))
    signals = pool.train_and_validate()  # epoch 3: env 1's host is NaN after training
    assert signals["panic"].tolist() == [False, True]
    assert math.isnan(env1.metrics.val_loss) and env1.counters.rollbacks == 1 and env0.counters.rollbacks == 0
    for slot_id in ("r0c0", "r0c1"):
        assert env1.slot(slot_id).state is None and env1.slot(slot_id).seed is None
        assert env1.slot(slot_id).alpha_schedule is None
        assert env0.slot(slot_id).state is not None
    assert env1.seed_optimizers == {} and env1.counters.acc_at_germination == {} and env1.counters.ratio_ema == {}
    assert not signals["slot_occupied"][1].any() and not signals["slot_contribution_valid"][1].any()
    assert all(torch.isfinite(p).all() for p in env1.model.host_parameters())
    assert all((s["momentum_buffer"] == 0).all() for s in env1.host_optimizer.state.values())
    result = pool.apply(wait_all(pool))
    types = [(e.env_id, e.event_type, e.data.get("reason")) for e in result.events]
    assert (1, EventType.GOVERNOR_PANIC, None) in types and (1, EventType.GOVERNOR_ROLLBACK, None) in types
    assert types.count((1, EventType.SEED_CULLED, "governor_rollback")) == 2
    after = pool.train_and_validate()
    assert after["panic"].tolist() == [False, False]
    assert math.isfinite(after["val_loss"][1].item())
    assert pool.episode_results()[1].rollbacks == 1


def test_snapshot_is_retaken_after_a_passing_check_at_epoch_five(shapes10_data):
    pool = make_pool(shapes10_data, n_envs=1, max_epochs=5, max_train_batches=1)
    snapshots = []
    for _ in range(5):
        _, result = epoch(pool)
        snapshots.append(sum(e.event_type == "GOVERNOR_SNAPSHOT" for e in result.events))
    assert snapshots == [0, 0, 0, 0, 1]
    host = pool.envs[0].model.host.state_dict()
    snap = pool.envs[0].governor.snapshot_data.host
    assert all(torch.equal(snap[k], host[k].cpu()) for k in host)


class AnomalousGovernor:
    """Every check is anomalous but below the panic count: never a rollback, never a passing check."""

    def __init__(self) -> None:
        self.snapshots = 0
        self.passed_last_check = False

    def check(self, loss: float) -> bool:
        return False

    def snapshot(self) -> None:
        self.snapshots += 1

    maybe_snapshot = Governor.maybe_snapshot  # the real cadence, on this stub's checks


def test_no_snapshot_after_an_anomalous_check_at_epoch_five(shapes10_data):
    pool = make_pool(shapes10_data, n_envs=1, max_epochs=5, max_train_batches=1)
    pool.envs[0].governor = stub = AnomalousGovernor()
    for _ in range(5):
        _, result = epoch(pool)
        assert not any(e.event_type == "GOVERNOR_SNAPSHOT" for e in result.events)
    assert stub.snapshots == 0


# ------------------------------------------------------------------------------------------
# bookkeeping invariants under any action sequence
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def property_pool(shapes10_data) -> EnvPool:
    return EnvPool(pool_settings(make_config(n_envs=2, max_epochs=4, slots=("r0c0", "r0c2"), max_train_batches=1)),
                   data=shapes10_data)


action_rows = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 4), st.integers(0, 2), st.integers(0, 3), st.integers(0, 2)),
    min_size=2, max_size=2
)


def check_bookkeeping(pool: EnvPool, signals: dict) -> None:
    for i, env in enumerate(pool.envs):
        seeded = {s for s in pool.enabled if env.holds_seed(s)}
        non_fossil = {s for s in seeded if env.slot(s).stage != SeedStage.FOSSILIZED}
        assert set(env.seed_optimizers) <= seeded
        assert set(env.counters.ratio_ema) <= seeded
        assert set(env.counters.acc_at_germination) <= non_fossil
        occupied = [sid in seeded for sid in pool.slot_ids]
        assert signals["slot_occupied"][i].tolist() == occupied
        assert signals["mask_op"][i, GERMINATE].item() == (len(seeded) < len(pool.enabled))
        assert signals["total_seeds"][i].item() == len(seeded)


@given(st.lists(action_rows, min_size=4, max_size=4), st.integers(0, 3))
@settings(max_examples=6)
def test_any_action_sequence_keeps_the_bookkeeping_consistent(property_pool, script, batch):
    pool = property_pool
    pool.build_envs(batch)
    for t, rows in enumerate(script, start=1):
        signals = pool.train_and_validate()
        check_bookkeeping(pool, signals)
        result = pool.apply(actions(*rows), bootstrap=t == 4)
        for env, row, ok in zip(pool.envs, rows, result.success):
            if row[0] == 1:  # r0c1 is disabled: every op fails there
                assert not ok
    for env in pool.envs:
        counters = env.counters
        assert sum(counters.action_counts) == 4
        assert counters.seeds_created == counters.successful_action_counts[GERMINATE]
        assert all(s <= a for s, a in zip(counters.successful_action_counts, counters.action_counts))


# ------------------------------------------------------------------------------------------
# no host sync in the batch loop, AMP on CPU
# ------------------------------------------------------------------------------------------


def test_training_epoch_reads_nothing_back_to_the_host(shapes10_data, monkeypatch):
    pool = make_pool(shapes10_data)
    pool.train_and_validate()
    pool.apply(germinate_all(pool))

    def forbidden(*_args, **_kwargs):
        raise AssertionError("host sync inside the training loop")

    for name in ("item", "tolist", "__bool__", "__float__", "__int__"):
        monkeypatch.setattr(torch.Tensor, name, forbidden)
    pool.train_epoch()
    monkeypatch.undo()
    pool.validate()


def test_amp_on_cpu_is_disabled_with_a_warning(shapes10_data):
    with pytest.warns(RuntimeWarning, match="AMP"):
        pool = EnvPool(pool_settings(make_config(amp=True)), data=shapes10_data)
    pool.build_envs(0)
    assert all(env.scaler is None for env in pool.envs)
    assert torch.isfinite(pool.train_and_validate()["val_loss"]).all()


def test_packed_signals_unpack_to_the_same_fields(shapes10_data):
    from esper_fx.contracts.signals import PACKED_DTYPES, signal_columns, unpack_signals
    from hosts.signals.assembly import pack_signals

    pool = make_pool(shapes10_data, slots=("r0c0", "r0c1", "r0c2"))
    epoch(pool, germinate_all(pool, slot=1))
    signals = pool.train_and_validate()
    columns = signal_columns(3, 5, obs_dim(3, True))
    packed = pack_signals(signals, columns)
    assert list(packed) == list(PACKED_DTYPES)
    assert all(t.is_contiguous() and t.dtype == DTYPES[d] and t.shape[0] == 2 for d, t in packed.items())
    assert_signals_equal(signals, unpack_signals(packed, columns))


def test_a_gated_blend_draws_its_gate_from_its_own_env_whatever_runs_beside_it(shapes10_data):
    """The gate is built when the seed starts blending (in finish_epoch): the same env must get the same gate
    alone in its pool (one Ray worker's slice) as beside another env that germinated too."""
    GATED = 2

    def gate_of_env0(env_ids):
        pool = EnvPool(pool_settings(make_config()), data=shapes10_data, env_ids=env_ids)
        pool.build_envs(0)
        epoch(pool, germinate_all(pool, blend=GATED))
        slot = pool.envs[0].model.slot("r0c1")
        for _ in range(pool.max_epochs - 1):
            if slot.alpha_schedule is not None:
                break
            epoch(pool)
        assert slot.stage == SeedStage.BLENDING
        return [p.detach().clone() for p in slot.alpha_schedule.parameters()]

    together, alone = gate_of_env0((0, 1)), gate_of_env0((0,))
    assert len(together) == len(alone) > 0
    assert all(torch.equal(a, b) for a, b in zip(together, alone))


def test_seed_flop_share_follows_the_seeds_that_train(shapes10_data):
    """The signal a FLOP rent reads: 0 with no seed, then the env's meter's seed share once its seed trains."""
    pool = make_pool(shapes10_data, n_envs=1)
    assert pool.train_and_validate()["seed_flop_share"].tolist() == [0.0]
    pool.apply(germinate_all(pool))
    signals = pool.train_and_validate()
    env = pool.envs[0]
    share = env.compute.seed_share(env.model)
    assert share > 0.0 and signals["seed_flop_share"].tolist() == [pytest.approx(share)]
