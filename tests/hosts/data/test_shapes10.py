"""shapes10 (BEHAVIOUR §6.6): a pure, balanced, normalised, augmentation-invariant offline dataset."""

import hashlib
import inspect
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hosts.data import shapes10
from hosts.data.shapes10 import Latents, pixel
from hosts.data.task_data import load_task_data
from hosts.data.batching import make_generator
from hosts.tasks import get_task


# ------------------------------------------------------------------------------------------
# equivariance helpers: the flipped / shifted image of the same latent sample
# ------------------------------------------------------------------------------------------


def flip_latents(lat: Latents) -> Latents:
    """Latents whose rendering is the horizontal mirror image; the class attributes are unchanged."""
    neg_x = torch.tensor([-1.0, 1.0], device=lat.center.device)
    return lat._replace(
        center=lat.center * neg_x,
        wave=lat.wave * neg_x,
        blob_center=lat.blob_center * neg_x,
        distract_wave=lat.distract_wave * neg_x,
        noise=torch.flip(lat.noise, dims=(3,)),
    )


def shift_latents(lat: Latents, dy: int, dx: int) -> Latents:
    """Latents whose rendering is the image shifted by (dy, dx) pixels (valid away from the border)."""
    step = pixel(lat.noise.shape[-1])
    offset = torch.tensor([dx * step, dy * step], device=lat.center.device)
    phase = lat.distract_phase - (lat.distract_wave * offset).sum(dim=-1)
    return lat._replace(
        center=lat.center + offset,
        blob_center=lat.blob_center + offset,
        distract_phase=phase,
        noise=torch.roll(lat.noise, shifts=(dy, dx), dims=(2, 3)),
    )


SMALL = dict(n_train=600, n_test=200)


def _digest(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def small():
    return shapes10.generate(**SMALL, data_seed=0)


def test_shapes_dtypes_and_label_range(small):
    x_tr, y_tr, x_te, y_te = small
    assert x_tr.shape == (600, 3, 32, 32) and x_te.shape == (200, 3, 32, 32)
    assert x_tr.dtype == x_te.dtype == torch.float32
    assert y_tr.dtype == y_te.dtype == torch.int64
    assert int(y_tr.min()) >= 0 and int(y_tr.max()) < 10


def test_classes_are_exactly_balanced_and_shuffled(small):
    _, y_tr, _, y_te = small
    assert torch.bincount(y_tr, minlength=10).tolist() == [60] * 10
    assert torch.bincount(y_te, minlength=10).tolist() == [20] * 10
    assert not torch.equal(y_tr, torch.sort(y_tr).values)
    assert not torch.equal(y_tr[:10], torch.arange(10))


def test_training_split_is_normalised_per_channel(small):
    x_tr = small[0]
    mean = x_tr.mean(dim=(0, 2, 3))
    std = x_tr.std(dim=(0, 2, 3))
    assert torch.all(mean.abs() < 0.1) and torch.all((std > 0.8) & (std < 1.2))


def test_test_split_has_similar_statistics_from_independent_draws(small):
    x_tr, _, x_te, _ = small
    assert torch.all(x_te.mean(dim=(0, 2, 3)).abs() < 0.15)
    assert not torch.equal(x_tr[: x_te.shape[0]], x_te)


def test_generation_is_identical_across_calls_and_ignores_the_global_rng(small):
    torch.manual_seed(12345)
    again = shapes10.generate(**SMALL, data_seed=0)
    assert all(torch.equal(a, b) for a, b in zip(small, again))


def test_generation_is_identical_in_a_fresh_process(small):
    code = (
        "import hashlib, torch; from hosts.data import shapes10; torch.manual_seed(7);"
        "h = hashlib.sha256();"
        "[h.update(t.contiguous().numpy().tobytes()) for t in shapes10.generate(n_train=600, n_test=200, data_seed=0)];"
        "print(h.hexdigest())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == _digest(*small)


def test_data_seed_changes_the_data(small):
    other = shapes10.generate(**SMALL, data_seed=1)
    assert not torch.equal(other[0], small[0])


def test_test_split_does_not_depend_on_the_training_size(small):
    bigger = shapes10.generate(n_train=700, n_test=200, data_seed=0)
    raw_small = shapes10.raw_split(200, 0, shapes10.TEST_STREAM, "cpu")
    raw_again = shapes10.raw_split(200, 0, shapes10.TEST_STREAM, "cpu")
    assert torch.equal(raw_small[0], raw_again[0])
    assert torch.equal(bigger[3], small[3])  # labels of the test split are the same draw


def test_load_task_data_gives_zero_padding_for_shapes10():
    data = load_task_data(get_task("shapes10"), "cpu", synthetic_train_samples=100, synthetic_test_samples=20)
    assert data.kind == "classification" and data.n_train == 100 and data.n_test == 20
    assert torch.equal(data.pad_value, torch.zeros(3))


# ------------------------------------------------------------------------------------------
# invariance to the training augmentation: the renderer is equivariant under the latent flip and
# shift, which keep every class attribute (so the augmented image is an image of the same class)
# ------------------------------------------------------------------------------------------


def _latents(n=16, seed=0, decoys=2):
    labels = torch.arange(n) % 10
    return shapes10.sample_latents(labels, make_generator("cpu", seed, 99), shapes10.DEFAULT_KNOBS._replace(decoys=decoys))


@settings(max_examples=8)
@given(st.integers(0, 1000), st.sampled_from([0, 2]))
def test_rendering_the_flipped_latents_gives_the_mirrored_image(seed, decoys):
    lat = _latents(seed=seed, decoys=decoys)
    image = shapes10.render(lat)
    flipped = shapes10.render(flip_latents(lat))
    torch.testing.assert_close(flipped, torch.flip(image, dims=(3,)), atol=2e-4, rtol=0)


@settings(max_examples=12)
@given(st.integers(0, 1000), st.integers(-4, 4), st.integers(-4, 4), st.sampled_from([0, 2]))
def test_rendering_the_shifted_latents_gives_the_shifted_image(seed, dy, dx, decoys):
    lat = _latents(seed=seed, decoys=decoys)
    image = shapes10.render(lat)
    shifted = shapes10.render(shift_latents(lat, dy, dx))
    inner = (slice(None), slice(None), slice(4, 28), slice(4, 28))
    expected = torch.roll(image, shifts=(dy, dx), dims=(2, 3))
    torch.testing.assert_close(shifted[inner], expected[inner], atol=5e-4, rtol=0)


def test_flip_and_shift_keep_the_class_and_its_attributes():
    lat = _latents()
    for moved in (flip_latents(lat), shift_latents(lat, 4, -4)):
        assert torch.equal(moved.labels, lat.labels) and torch.equal(moved.shape, lat.shape)
        assert torch.equal(moved.wave.norm(dim=-1), lat.wave.norm(dim=-1))  # stripe frequency
        assert torch.equal(moved.color_a, lat.color_a) and torch.equal(moved.color_b, lat.color_b)


def test_every_class_orientation_set_is_closed_under_the_mirror():
    # vertical (angle 0) and horizontal (pi/2) stripes map to themselves; diagonals (±pi/4) to each other.
    gen = make_generator("cpu", 0, 5)
    knobs = shapes10.DEFAULT_KNOBS._replace(angle_jitter=0.0, freq_jitter=0.0)
    for orient in range(len(shapes10.ORIENTATIONS)):
        waves = shapes10._wave_vectors(torch.full((400,), orient), torch.zeros(400, dtype=torch.long), gen, knobs)
        lines = {round(float(torch.atan2(w[1], w[0]).remainder(torch.pi)), 4) for w in waves}
        mirrored = {round(float(torch.atan2(w[1], -w[0]).remainder(torch.pi)), 4) for w in waves}
        assert lines == mirrored


def test_objects_stay_inside_the_frame_after_a_four_pixel_shift():
    k = shapes10.DEFAULT_KNOBS
    assert k.center + 4 * shapes10.pixel(shapes10.IMAGE_SIZE) <= 0.5  # object centres stay in the inner half of the image


def test_class_modes_need_conjunctions_of_attributes():
    modes = torch.tensor(shapes10.CLASS_MODES)  # [10, 3, 4]
    assert modes.shape == (10, shapes10.MODES_PER_CLASS, 4)
    for c in range(10):
        assert sorted(modes[c, :, 1].tolist()) == [0, 1, 2]  # every orientation ...
        assert sorted(modes[c, :, 3].tolist()) == [0, 1, 2]  # ... and every palette in every class
    flat = [tuple(m) for m in modes.reshape(-1, 4).tolist()]
    assert len(set(flat)) == len(flat)  # no two classes share a mode
    for column, size in enumerate(shapes10.ATTRIBUTE_SIZES):
        assert torch.bincount(modes[..., column].reshape(-1), minlength=size).min() >= 5


def test_without_confusion_the_class_object_shows_one_of_its_class_modes():
    labels = torch.arange(200) % 10
    knobs = shapes10.DEFAULT_KNOBS._replace(confusion=0.0, decoys=1)
    attrs = shapes10._object_attributes(labels, make_generator("cpu", 0, 1), knobs)
    assert attrs.shape == (200, 2, 4)
    modes = torch.tensor(shapes10.CLASS_MODES)
    for label, attr in zip(labels.tolist(), attrs[:, 0].tolist()):
        assert attr in modes[label].tolist()


def test_the_default_sizes_are_cifar10s_balanced_and_normalised_across_chunks():
    """The default sizes (50,000 + 10,000, as CIFAR-10) with exactly balanced labels, and the normalisation
    accumulated over several chunks. How long the default sizes take to generate is a benchmark's figure
    (`python -m esper_fx.bench --only data`, docs/PERFORMANCE.md), never a test's."""
    defaults = inspect.signature(shapes10.generate).parameters
    assert (defaults["n_train"].default, defaults["n_test"].default) == (50_000, 10_000)
    gen = make_generator("cpu", 0, 0)
    assert torch.bincount(shapes10.balanced_labels(50_000, gen, "cpu")).tolist() == [5000] * 10
    assert torch.bincount(shapes10.balanced_labels(10_000, gen, "cpu")).tolist() == [1000] * 10
    x_tr = shapes10.generate(n_train=shapes10.CHUNK + 100, n_test=10, data_seed=0)[0]
    mean, std = x_tr.mean(dim=(0, 2, 3)), x_tr.std(dim=(0, 2, 3))
    assert torch.all(mean.abs() < 0.1) and torch.all((std > 0.8) & (std < 1.2))


def test_generation_draws_on_the_cpu_whatever_the_target_device(monkeypatch):
    """The images are drawn and rendered on the CPU and moved (meta here): a CUDA generator would draw
    other numbers, so a GPU run would train on other data than a CPU run."""
    made = []
    real = shapes10.make_generator
    monkeypatch.setattr(shapes10, "make_generator", lambda device, *v: made.append(torch.device(device)) or real(device, *v))
    out = shapes10.generate(40, 20, 3, device="meta", knobs=shapes10.SHAPES16_KNOBS)
    assert made and all(d.type == "cpu" for d in made)
    assert all(t.device.type == "meta" for t in out)
    assert out[0].shape == (40, 3, 16, 16) and out[1].dtype == torch.int64


@pytest.mark.gpu
def test_cuda_data_are_the_cpu_data_and_deterministic():
    first = shapes10.generate(device="cuda:0")
    second = shapes10.generate(device="cuda:0")
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert first[0].device.type == "cuda"
    cpu = shapes10.generate(4096, 1024, 0, "cpu")
    small = shapes10.generate(4096, 1024, 0, "cuda:0")
    assert all(torch.equal(a, b.cpu()) for a, b in zip(cpu, small))
    std = first[0].std(dim=(0, 2, 3))
    assert torch.all(first[0].mean(dim=(0, 2, 3)).abs() < 0.1) and torch.all((std > 0.8) & (std < 1.2))


@pytest.mark.gpu
@pytest.mark.parametrize("task", ["shapes10", "shapes16"])
def test_task_data_on_cuda_equal_the_cpu_task_data(task):
    cpu = load_task_data(get_task(task), "cpu", synthetic_train_samples=512, synthetic_test_samples=128)
    gpu = load_task_data(get_task(task), "cuda:0", synthetic_train_samples=512, synthetic_test_samples=128)
    assert gpu.device.type == "cuda"
    for name in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(cpu, name), getattr(gpu, name).cpu()), name


# ------------------------------------------------------------------------------------------
# shapes16: the same classes at 16x16 (the quickstart's data)
# ------------------------------------------------------------------------------------------


def test_shapes16_renders_16_pixel_images_of_every_class():
    x_train, y_train, x_test, y_test = shapes10.generate(200, 50, 0, "cpu", knobs=shapes10.SHAPES16_KNOBS)
    assert x_train.shape == (200, 3, 16, 16) and x_test.shape == (50, 3, 16, 16)
    assert sorted(set(y_train.tolist())) == list(range(10))
    assert torch.isfinite(x_train).all() and abs(float(x_train.mean())) < 0.05


@settings(max_examples=6)
@given(st.integers(0, 1000))
def test_shapes16_rendering_is_flip_equivariant(seed):
    labels = torch.arange(12) % 10
    lat = shapes10.sample_latents(labels, make_generator("cpu", seed, 99), shapes10.SHAPES16_KNOBS)
    assert lat.noise.shape[-1] == 16
    torch.testing.assert_close(shapes10.render(flip_latents(lat)), torch.flip(shapes10.render(lat), dims=(3,)), atol=2e-4, rtol=0)


def test_the_default_knobs_still_render_32_pixels():
    assert shapes10.DEFAULT_KNOBS.size == 32 and shapes10.DEFAULT_KNOBS.periods == (8.0, 4.0)
    assert shapes10.pixel(16) == 2 * shapes10.pixel(32)
