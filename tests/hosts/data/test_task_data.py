"""Epoch plans, device augmentation, validation batches and the DataFeed (BEHAVIOUR §6.3, §6.4)."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from esper_fx.config import TrainingConfig
from esper_fx.training.pools import pool_settings
from hosts.data.batching import PAD, augment_batch, plan_epoch, resolve_max_batches, steps_per_epoch
from hosts.data.task_data import TaskData, train_batch, val_batches, val_size
from hosts.data.external import CIFAR_MEAN, CIFAR_STD, normalized_black
from hosts.data.feed import DataFeed
from hosts.data.batching import make_generator, mix_seed
from hosts.tasks import get_task

CPU = torch.device("cpu")


def _plan(n=50_000, n_envs=4, bpe=512, split="shared", max_batches=None, seed=42, b=0, t=1, running=None,
          augment=True):
    return plan_epoch(n, n_envs=n_envs, batch_per_env=bpe, split=split, max_batches=max_batches, seed=seed,
                      batch_idx=b, epoch=t, envs_running=running, pad=PAD if augment else None)


def _image_data(n_train=64, n_test=23, seed=0) -> TaskData:
    g = torch.Generator().manual_seed(seed)
    return TaskData(
        "classification",
        torch.randn(n_train, 3, 32, 32, generator=g), torch.randint(0, 10, (n_train,), generator=g),
        torch.randn(n_test, 3, 32, 32, generator=g), torch.randint(0, 10, (n_test,), generator=g),
        normalized_black(),
    )


def _lm_data(n_train=40, n_test=9, block=17) -> TaskData:
    g = torch.Generator().manual_seed(1)
    make = lambda n: torch.randint(0, 256, (n, block), generator=g, dtype=torch.int32)  # noqa: E731
    return TaskData("lm", make(n_train), None, make(n_test), None)


# ------------------------------------------------------------------------------------------
# seeds
# ------------------------------------------------------------------------------------------


@given(st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=4))
def test_mix_seed_is_pure_and_fits_in_63_bits(values):
    assert mix_seed(*values) == mix_seed(*values)
    assert 0 <= mix_seed(*values) < 2**63


def test_mix_seed_depends_on_every_value_and_the_order():
    base = mix_seed(42, 3, 7)
    assert len({base, mix_seed(43, 3, 7), mix_seed(42, 4, 7), mix_seed(42, 3, 8), mix_seed(42, 7, 3),
                mix_seed(42, 3, 7, 0)}) == 6


def test_make_generator_leaves_the_global_rng_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    torch.rand(5, generator=make_generator("cpu", 1, 2))
    assert torch.equal(torch.rand(3), expected)


# ------------------------------------------------------------------------------------------
# steps and plans (BEHAVIOUR §6.3)
# ------------------------------------------------------------------------------------------


def test_cifar_sized_shared_split_has_24_steps_and_full_split_97():
    assert steps_per_epoch(50_000, 4, 512, "shared", None) == 24
    assert steps_per_epoch(50_000, 4, 512, "full", None) == 97


@pytest.mark.parametrize("requested, default, expected", [(None, None, None), (None, 32, 32), (0, 32, None),
                                                          (5, 32, 5), (5, None, 5)])
def test_resolve_max_batches(requested, default, expected):
    assert resolve_max_batches(requested, default) == expected


def test_max_batches_caps_both_modes():
    assert steps_per_epoch(50_000, 4, 512, "shared", 10) == 10
    assert steps_per_epoch(50_000, 4, 512, "full", 10) == 10
    assert steps_per_epoch(50_000, 4, 512, "shared", 1000) == 24


def test_too_small_training_split_raises():
    with pytest.raises(ValueError, match="fewer than one step"):
        steps_per_epoch(100, 4, 512, "shared", None)
    with pytest.raises(ValueError, match="data_split"):
        steps_per_epoch(100, 1, 10, "sideways", None)


def test_shared_plan_env_slices_are_disjoint_and_from_one_permutation():
    plan = _plan()
    assert plan.indices.shape == (4, 24, 512)
    flat = plan.indices.reshape(-1)
    assert flat.unique().numel() == flat.numel() == 4 * 24 * 512  # disjoint across envs and steps
    assert int(flat.min()) >= 0 and int(flat.max()) < 50_000
    assert plan.crops.shape == (4, 24, 512, 2) and plan.flips.shape == (4, 24, 512)


def test_shared_plan_with_fewer_envs_running_discards_the_unused_slices():
    full = _plan()
    part = _plan(running=2)
    assert part.indices.shape == (2, 24, 512)
    assert torch.equal(part.indices, full.indices[:2])
    assert torch.equal(part.crops, full.crops[:2]) and torch.equal(part.flips, full.flips[:2])


def test_shared_step_batch_is_consecutive_in_the_permutation():
    plan = _plan(n=1000, n_envs=3, bpe=10)
    # step k of env i is [k·30 + i·10, k·30 + (i+1)·10) of one permutation: re-interleave and check
    rebuilt = plan.indices.transpose(0, 1).reshape(-1)
    assert rebuilt.unique().numel() == rebuilt.numel()


def test_full_plan_gives_each_env_its_own_permutation_of_97_steps():
    plan = _plan(split="full")
    assert plan.indices.shape == (4, 97, 512)
    for env in range(4):
        idx = plan.indices[env].reshape(-1)
        assert idx.unique().numel() == idx.numel()
    assert not torch.equal(plan.indices[0], plan.indices[1])
    # an env's plan does not depend on how many envs run
    assert torch.equal(_plan(split="full", running=2).indices, plan.indices[:2])


@given(st.integers(0, 2**31), st.integers(0, 1000), st.integers(1, 60), st.sampled_from(["shared", "full"]))
def test_plans_are_pure_functions_of_seed_batch_and_epoch(seed, b, t, split):
    a = _plan(n=300, n_envs=2, bpe=16, split=split, seed=seed, b=b, t=t)
    again = _plan(n=300, n_envs=2, bpe=16, split=split, seed=seed, b=b, t=t)
    assert torch.equal(a.indices, again.indices) and torch.equal(a.crops, again.crops)
    assert torch.equal(a.flips, again.flips)
    for other in (dict(seed=seed + 1, b=b, t=t), dict(seed=seed, b=b + 1, t=t), dict(seed=seed, b=b, t=t + 1)):
        assert not torch.equal(_plan(n=300, n_envs=2, bpe=16, split=split, **other).indices, a.indices)


def test_plan_without_augmentation_has_no_draws():
    plan = _plan(augment=False)
    assert plan.crops is None and plan.flips is None
    assert torch.equal(plan.indices, _plan().indices)  # the permutation is drawn first either way


# ------------------------------------------------------------------------------------------
# augmentation (BEHAVIOUR §6.4)
# ------------------------------------------------------------------------------------------


def _reference_augment(images, crops, flips, pad_value):
    """Per-sample loop over F.pad + slicing: the obvious (slow) definition."""
    out = []
    for img, (dy, dx), flip in zip(images, crops.tolist(), flips.tolist()):
        padded = torch.stack([F.pad(img[c], (4, 4, 4, 4), value=float(pad_value[c])) for c in range(3)])
        crop = padded[:, dy : dy + 32, dx : dx + 32]
        out.append(torch.flip(crop, dims=(2,)) if flip else crop)
    return torch.stack(out)


@given(st.integers(0, 2**31))
def test_augment_batch_equals_pad_crop_flip_per_sample(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(6, 3, 32, 32, generator=g)
    crops = torch.randint(0, 9, (6, 2), generator=g)
    flips = torch.rand(6, generator=g) < 0.5
    pad = normalized_black()
    assert torch.equal(augment_batch(x, crops, flips, pad), _reference_augment(x, crops, flips, pad))


def test_crop_padding_equals_normalised_black_per_channel():
    x = torch.randn(2, 3, 32, 32)
    out = augment_batch(x, torch.tensor([[0, 0], [8, 8]]), torch.tensor([False, False]), normalized_black())
    expected = -torch.tensor(CIFAR_MEAN) / torch.tensor(CIFAR_STD)
    for c in range(3):
        assert torch.all(out[0, c, :4, :] == expected[c]) and torch.all(out[0, c, :, :4] == expected[c])
        assert torch.all(out[1, c, -4:, :] == expected[c]) and torch.all(out[1, c, :, -4:] == expected[c])
    assert torch.equal(out[0, :, 4:, 4:], x[0, :, :28, :28])


def test_centre_crop_without_flip_is_the_identity_and_with_flip_the_mirror():
    x = torch.randn(3, 3, 32, 32)
    centre = torch.full((3, 2), 4)
    assert torch.equal(augment_batch(x, centre, torch.zeros(3, dtype=torch.bool), torch.zeros(3)), x)
    assert torch.equal(augment_batch(x, centre, torch.ones(3, dtype=torch.bool), torch.zeros(3)),
                       torch.flip(x, dims=(3,)))


def test_with_crop_and_flip_disabled_a_batch_equals_the_stored_tensors():
    data = _image_data()
    plan = _plan(n=64, n_envs=2, bpe=8, augment=False)
    for env in range(2):
        for step in range(plan.num_steps):
            x, y = train_batch(data, plan, env, step)
            idx = plan.indices[env, step]
            assert torch.equal(x, data.x_train[idx]) and torch.equal(y, data.y_train[idx])


def test_flip_rate_over_10000_samples_is_one_half_and_crops_cover_0_to_8():
    plan = _plan(n=10_240, n_envs=1, bpe=512)
    flips = plan.flips.reshape(-1)[:10_000]
    assert abs(flips.float().mean().item() - 0.5) <= 0.02
    crops = plan.crops.reshape(-1, 2)[:10_000]
    for axis in range(2):
        counts = torch.bincount(crops[:, axis], minlength=9)
        assert counts.numel() == 9 and int(counts.min()) > 10_000 / 9 * 0.85


def test_train_batch_applies_the_plans_augmentation():
    data = _image_data()
    plan = _plan(n=64, n_envs=2, bpe=8)
    x, y = train_batch(data, plan, 1, 2)
    idx = plan.indices[1, 2]
    expected = _reference_augment(data.x_train[idx], plan.crops[1, 2], plan.flips[1, 2], data.pad_value)
    assert torch.equal(x, expected) and torch.equal(y, data.y_train[idx])


def test_lm_train_batch_splits_blocks_into_int32_inputs_and_int64_next_tokens():
    data = _lm_data()
    plan = _plan(n=40, n_envs=2, bpe=4, augment=False)
    x, y = train_batch(data, plan, 0, 1)
    block = data.x_train[plan.indices[0, 1]]
    assert x.dtype == torch.int32 and y.dtype == torch.int64
    assert torch.equal(x, block[:, :-1]) and torch.equal(y, block[:, 1:].long())


# ------------------------------------------------------------------------------------------
# validation set
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("val_samples, batch, sizes", [(None, 10, [10, 10, 3]), (15, 4, [4, 4, 4, 3]),
                                                       (100, 50, [23])])
def test_val_batches_cover_the_first_samples_in_order_keeping_the_partial_batch(val_samples, batch, sizes):
    data = _image_data()
    batches = list(val_batches(data, val_samples, batch))
    assert [x.shape[0] for x, _ in batches] == sizes
    n = val_size(data, val_samples)
    assert torch.equal(torch.cat([x for x, _ in batches]), data.x_test[:n])
    assert torch.equal(torch.cat([y for _, y in batches]), data.y_test[:n])


def test_sample_weighted_val_loss_does_not_depend_on_the_val_batch_size():
    data = _image_data()
    torch.manual_seed(0)
    model = get_task("shapes10").build_host().eval()

    def val_loss(batch):
        with torch.no_grad():
            total = sum(F.cross_entropy(model(x), y) * y.numel() for x, y in val_batches(data, None, batch))
        return float(total) / data.n_test

    assert val_loss(7) == pytest.approx(val_loss(23), rel=1e-5)


# ------------------------------------------------------------------------------------------
# DataFeed: both data paths
# ------------------------------------------------------------------------------------------


def _feed(data, path, workers=0, split="shared", n_envs=2, **kw):
    return DataFeed(get_task("shapes10" if data.kind == "classification" else "pytext"), data, [CPU] * n_envs,
                    batch_per_env=8, split=split, seed=3, data_path=path, num_workers=workers, **kw)


@pytest.mark.parametrize("split", ["shared", "full"])
def test_loader_path_gives_the_same_batches_as_the_device_path(split):
    data = _image_data()
    device, loader = _feed(data, "device", split=split), _feed(data, "loader", workers=0, split=split)
    got_d = list(device.train_epoch(batch_idx=1, epoch=2, envs_running=2))
    got_l = list(loader.train_epoch(batch_idx=1, epoch=2, envs_running=2))
    assert len(got_d) == len(got_l) == device.steps_per_epoch
    for step_d, step_l in zip(got_d, got_l):
        for (xd, yd), (xl, yl) in zip(step_d, step_l):
            assert torch.equal(xd, xl) and torch.equal(yd, yl)


def test_loader_path_with_worker_processes_matches_the_device_path():
    data = _image_data()
    device, loader = _feed(data, "device"), _feed(data, "loader", workers=2)
    for step_d, step_l in zip(device.train_epoch(0, 1), loader.train_epoch(0, 1)):
        for (xd, yd), (xl, yl) in zip(step_d, step_l):
            assert torch.equal(xd, xl) and torch.equal(yd, yl)


def test_loader_path_lm_batches_and_validation_match_the_device_path():
    data = _lm_data()
    device, loader = _feed(data, "device"), _feed(data, "loader", val_batch_size=4)
    for step_d, step_l in zip(device.train_epoch(0, 1, 1), loader.train_epoch(0, 1, 1)):
        assert len(step_d) == len(step_l) == 1
        assert torch.equal(step_d[0][0], step_l[0][0]) and torch.equal(step_d[0][1], step_l[0][1])
    device = _feed(data, "device", val_batch_size=4)
    for (xd, yd), (xl, yl) in zip(device.val_batches(1), loader.val_batches(1)):
        assert torch.equal(xd, xl) and torch.equal(yd, yl)


def test_every_env_validates_on_the_same_fixed_set():
    feed = _feed(_image_data(), "device", val_samples=20, val_batch_size=6)
    env0 = [y for _, y in feed.val_batches(0)]
    env1 = [y for _, y in feed.val_batches(1)]
    assert feed.n_val == 20 and [len(y) for y in env0] == [6, 6, 6, 2]
    assert all(torch.equal(a, b) for a, b in zip(env0, env1))


def test_feed_defaults_follow_the_task():
    feed = DataFeed(get_task("pytext"), _lm_data(n_train=2000), [CPU], seed=0)
    assert feed.batch_per_env == 16 and feed.val_batch_size == 16
    assert feed.steps_per_epoch == 32  # the task's default max_train_batches
    unlimited = DataFeed(get_task("pytext"), _lm_data(n_train=2000), [CPU], seed=0, max_train_batches=0)
    assert unlimited.steps_per_epoch == 2000 // 16


def test_feed_from_the_settings_builds_shapes10_at_reduced_size():
    config = TrainingConfig(task="shapes10", n_envs=2, device="cpu", synthetic_train_samples=400,
                            synthetic_test_samples=50, batch_size_per_env=32, val_batch_size=20)
    feed = DataFeed.from_settings(pool_settings(config), get_task("shapes10"))
    assert feed.env_devices == [CPU, CPU]
    assert feed.steps_per_epoch == 400 // 64 and feed.n_val == 50
    steps = list(feed.train_epoch(0, 1))
    assert len(steps) == 6 and all(len(s) == 2 for s in steps)
    x, y = steps[0][0]
    assert x.shape == (32, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert [x.shape[0] for x, _ in feed.val_batches(0)] == [20, 20, 10]


@pytest.mark.gpu
def test_device_path_on_cuda_matches_the_cpu_batches():
    data = _image_data()
    cpu = _feed(data, "device")
    gpu = DataFeed(get_task("shapes10"), data, ["cuda:0", "cuda:0"], batch_per_env=8, seed=3)
    for step_c, step_g in zip(cpu.train_epoch(0, 1), gpu.train_epoch(0, 1)):
        for (xc, yc), (xg, yg) in zip(step_c, step_g):
            assert xg.device.type == "cuda"
            assert torch.equal(xc, xg.cpu()) and torch.equal(yc, yg.cpu())


def test_two_envs_holding_identical_models_report_identical_validation_results():
    feed = _feed(_image_data(), "device", val_batch_size=10)
    torch.manual_seed(0)
    model = get_task("shapes10").build_host().eval()
    twin = get_task("shapes10").build_host().eval()
    twin.load_state_dict(model.state_dict())

    def evaluate(net, env):
        loss, correct = torch.zeros(()), torch.zeros((), dtype=torch.int64)
        with torch.no_grad():
            for x, y in feed.val_batches(env):
                logits = net(x)
                loss += F.cross_entropy(logits, y) * y.numel()
                correct += (logits.argmax(1) == y).sum()
        return loss / feed.n_val, 100.0 * correct / feed.n_val

    assert [torch.equal(a, b) for a, b in zip(evaluate(model, 0), evaluate(twin, 1))] == [True, True]


def test_the_augmentation_pads_by_an_eighth_of_the_image():
    from hosts.data.batching import pad_for

    assert pad_for(32) == 4 and pad_for(16) == 2
    plan = plan_epoch(64, n_envs=1, batch_per_env=16, split="full", max_batches=None, seed=0, batch_idx=0,
                      epoch=1, pad=2)
    assert int(plan.crops.min()) >= 0 and int(plan.crops.max()) <= 4
    x = torch.randn(2, 3, 16, 16)
    out = augment_batch(x, torch.tensor([[0, 0], [4, 4]]), torch.tensor([False, False]), torch.zeros(3))
    assert torch.all(out[0, :, :2, :] == 0) and torch.equal(out[0, :, 2:, 2:], x[0, :, :14, :14])
    assert torch.equal(out[1, :, :14, :14], x[1, :, 2:, 2:])
