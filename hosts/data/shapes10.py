"""shapes10: an offline, procedurally generated stand-in for CIFAR-10 (BEHAVIOUR §6.6).

Every image is rendered from per-sample *latents* (a NamedTuple of tensors): a striped object
(shape, stripe wave vector and phase, two palette colours) over a cluttered background (a random
colour, Gaussian blobs, a faint grating), optional smaller decoy objects, and pixel noise. An
object has four attributes:

    shape (disk, square, triangle, ring, cross), stripe orientation (vertical, horizontal,
    diagonal with a random sign), stripe frequency (low, high) and palette (warm, cool, green).

Each class has three *modes* (CLASS_MODES), each a full attribute tuple; a sample shows one mode
chosen uniformly, and each attribute is then redrawn uniformly with a small probability (class
overlap, which caps the attainable accuracy). Every class shows all orientations and palettes,
so only conjunctions of attributes identify it: this is what makes width pay (a wider host can
hold more conjunction detectors), leaving seeds room to help. Everything else is nuisance.
Every nuisance distribution and every class's attribute set is symmetric under a horizontal
flip, and object centres stay in the inner half of the frame under a shift of an eighth of the image
(4 px at 32), so the training augmentation never changes a class (the tests check the renderer's flip and
shift equivariance). `Knobs.size` and `Knobs.periods` render the same classes at another size
(`SHAPES16_KNOBS`: the 16x16 data of the `shapes16` task).

The data is a pure function of (data_seed, sizes): `generate` draws and renders on the CPU and then
moves the result to the target device, so every device (and both data paths of a GPU machine) trains
on the same images. Latents are drawn in fixed-size chunks from a CPU torch.Generator seeded by
`mix_seed(data_seed, split)`, so the test split is independent of the training split and of its size,
and the global RNG is never touched. Images are normalised per channel with the training split's statistics (accumulated
in float64 and rounded to 1e-4, so they are bit-stable).

`python -m hosts.data.difficulty shapes10 ...` reproduces the difficulty numbers of BEHAVIOUR §6.6.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from hosts.data.batching import make_generator

NUM_CLASSES = 10
IMAGE_SIZE = 32
CHUNK = 2048  # latents are drawn CHUNK samples at a time: part of the definition of the data
TRAIN_STREAM, TEST_STREAM, LABEL_STREAM = 0, 1, 2

SHAPES = ("disk", "square", "triangle", "ring", "cross")
ORIENTATIONS = ("vertical", "horizontal", "diagonal")
FREQUENCIES = ("low", "high")
PALETTES = ("warm", "cool", "green")
MODES_PER_CLASS = 3


def _class_modes(modes: int = MODES_PER_CLASS) -> tuple[tuple[tuple[int, int, int, int], ...], ...]:
    """CLASS_MODES[c][m] = (shape, orientation, frequency, palette) of mode m of class c.

    Mode m of every class has orientation m, and its palette is (m + c) mod 3: each class shows all
    three orientations and all three palettes, so neither says anything about the class alone; only
    the orientation-palette pairing, the frequency ((c + m) mod 2) and the shape ((c + 2m) mod 5)
    do, in conjunction. No two classes share a mode. (More than three modes, a tuning experiment,
    repeat the orientations and shift palette and frequency by m // 3.)
    """
    return tuple(
        tuple(
            ((c + 2 * m) % 5, m % 3, (c + m + m // 3) % 2, (m + c + m // 3) % 3) for m in range(modes)
        )
        for c in range(10)
    )


CLASS_MODES = _class_modes()


class Knobs(NamedTuple):
    """Difficulty knobs of the generator. The defaults are the task definition, tuned so that the
    difficulty targets of BEHAVIOUR §6.6 hold (hosts/data/difficulty.py); the other values exist for tuning
    experiments."""

    confusion: float = 0.05  # probability that each class attribute is redrawn uniformly
    radius: tuple[float, float] = (0.35, 0.60)  # object size, in units of the half image width
    center: float = 0.25  # |object centre| <= this, per axis (image spans [-1, 1])
    modes: int = MODES_PER_CLASS  # attribute tuples per class (CLASS_MODES for the default)
    decoys: int = 0  # smaller objects with random attributes, drawn under the class object
    decoy_radius: tuple[float, float] = (0.15, 0.30)
    angle_jitter: float = 0.20  # std of the stripe orientation, radians
    freq_jitter: float = 0.15  # relative spread of the stripe frequency
    hue_jitter: float = 0.06  # std of the palette hue (hue in [0, 1))
    second_hue: float = 0.07  # hue offset of the second stripe colour
    second_value: tuple[float, float] = (0.15, 0.45)  # brightness factor of the second stripe colour
    blobs: int = 2  # background clutter blobs
    blob_strength: float = 0.6
    distractor: float = 0.15  # max amplitude of the background grating
    noise: float = 0.05  # pixel noise std (before normalisation)
    size: int = IMAGE_SIZE  # image side in pixels
    periods: tuple[float, float] = (8.0, 4.0)  # stripe period in pixels of the low and high frequency


DEFAULT_KNOBS = Knobs()

# shapes16 (the quickstart's data): the same classes rendered at 16x16 on a plain background (no blobs,
# no grating, no attribute redraws, less pixel noise), stripe periods 6 and 3 px. Every attribute stays
# visible at this size; what the quickstart host lacks is a spatial receptive field to see them with.
SHAPES16_KNOBS = Knobs(size=16, periods=(6.0, 3.0), confusion=0.0, blobs=0, distractor=0.0, noise=0.02)

PALETTE_HUES = {"warm": 0.03, "cool": 0.60, "green": 0.33}


def pixel(size: int) -> float:
    """One pixel in image coordinates (the image spans [-1, 1])."""
    return 2.0 / size


EDGE = 0.04  # soft edge width of the object mask, image units
ATTRIBUTE_SIZES = (len(SHAPES), len(ORIENTATIONS), len(FREQUENCIES), len(PALETTES))


class Latents(NamedTuple):
    """Per-sample render parameters. Objects [n, M, ...]: object 0 carries the class, 1.. are decoys."""

    labels: torch.Tensor  # [n] int64
    shape: torch.Tensor  # [n, M] int64 index into SHAPES
    center: torch.Tensor  # [n, M, 2] (x, y)
    radius: torch.Tensor  # [n, M]
    wave: torch.Tensor  # [n, M, 2] stripe wave vector (kx, ky), radians per unit
    phase: torch.Tensor  # [n, M]
    color_a: torch.Tensor  # [n, M, 3] stripe colours
    color_b: torch.Tensor  # [n, M, 3]
    background: torch.Tensor  # [n, 3]
    blob_center: torch.Tensor  # [n, K, 2]
    blob_sigma: torch.Tensor  # [n, K]
    blob_color: torch.Tensor  # [n, K, 3]
    distract_wave: torch.Tensor  # [n, 2], anchored at the image origin
    distract_phase: torch.Tensor  # [n]
    distract_amp: torch.Tensor  # [n]
    noise: torch.Tensor  # [n, 3, H, W]


# ------------------------------------------------------------------------------------------
# sampling latents
# ------------------------------------------------------------------------------------------


def _uniform(gen: torch.Generator, shape, low: float, high: float, device) -> torch.Tensor:
    return torch.rand(shape, generator=gen, device=device) * (high - low) + low


def _hsv_to_rgb(h: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """HSV in [0,1] -> RGB [..., 3], vectorised."""
    k = torch.tensor([5.0, 3.0, 1.0], device=h.device)
    kk = torch.remainder(k + h.unsqueeze(-1) * 6.0, 6.0)
    ramp = torch.clamp(torch.minimum(kk, 4.0 - kk), 0.0, 1.0)
    return v.unsqueeze(-1) - (v * s).unsqueeze(-1) * ramp


def _random_attributes(lead: tuple[int, ...], gen: torch.Generator, device) -> torch.Tensor:
    sizes = torch.tensor(ATTRIBUTE_SIZES, device=device)
    return (torch.rand((*lead, 4), generator=gen, device=device) * sizes).long()


def _object_attributes(labels: torch.Tensor, gen: torch.Generator, knobs: Knobs) -> torch.Tensor:
    """[n, M, 4] attribute indices. Object 0: a uniformly chosen mode of its class, each attribute
    redrawn with probability `confusion`; decoys: uniform."""
    n, device = labels.shape[0], labels.device
    table = CLASS_MODES if knobs.modes == MODES_PER_CLASS else _class_modes(knobs.modes)
    mode = torch.randint(0, knobs.modes, (n,), generator=gen, device=device)
    attrs = torch.tensor(table, device=device)[labels, mode]
    redraw = torch.rand((n, 4), generator=gen, device=device) < knobs.confusion
    attrs = torch.where(redraw, _random_attributes((n,), gen, device), attrs)
    decoys = _random_attributes((n, knobs.decoys), gen, device)
    return torch.cat([attrs.unsqueeze(1), decoys], dim=1)


def _wave_vectors(orient: torch.Tensor, freq: torch.Tensor, gen, knobs: Knobs) -> torch.Tensor:
    lead, device = orient.shape, orient.device
    base = torch.tensor([0.0, math.pi / 2, math.pi / 4], device=device)[orient]
    sign = torch.where(torch.rand(lead, generator=gen, device=device) < 0.5, -1.0, 1.0)
    angle = torch.where(orient == 2, base * sign, base)
    angle = angle + torch.randn(lead, generator=gen, device=device) * knobs.angle_jitter
    periods = torch.tensor(knobs.periods, device=device)[freq]
    spread = _uniform(gen, lead, 1.0 - knobs.freq_jitter, 1.0 + knobs.freq_jitter, device)
    k = 2.0 * math.pi / (periods * pixel(knobs.size)) * spread
    return torch.stack([k * torch.cos(angle), k * torch.sin(angle)], dim=-1)


def _palette_colors(palette: torch.Tensor, gen, knobs: Knobs) -> tuple[torch.Tensor, torch.Tensor]:
    lead, device = palette.shape, palette.device
    hue = torch.tensor([PALETTE_HUES[p] for p in PALETTES], device=device)[palette]
    hue = hue + torch.randn(lead, generator=gen, device=device) * knobs.hue_jitter
    sat = _uniform(gen, lead, 0.55, 1.0, device)
    val = _uniform(gen, lead, 0.65, 1.0, device)
    color_a = _hsv_to_rgb(hue, sat, val)
    color_b = _hsv_to_rgb(hue + knobs.second_hue, sat, val * _uniform(gen, lead, *knobs.second_value, device))
    return color_a, color_b


def _background(n: int, gen, knobs: Knobs, device) -> tuple[torch.Tensor, ...]:
    bg = _hsv_to_rgb(
        torch.rand(n, generator=gen, device=device),
        _uniform(gen, n, 0.0, 0.5, device),
        _uniform(gen, n, 0.2, 0.8, device),
    )
    k = knobs.blobs
    blob_center = _uniform(gen, (n, k, 2), -1.0, 1.0, device)
    blob_sigma = _uniform(gen, (n, k), 0.10, 0.35, device)
    blob_color = _hsv_to_rgb(
        torch.rand((n, k), generator=gen, device=device),
        _uniform(gen, (n, k), 0.3, 1.0, device),
        _uniform(gen, (n, k), 0.3, 1.0, device),
    ) - bg.unsqueeze(1)
    blob_color = blob_color * knobs.blob_strength
    angle = torch.rand(n, generator=gen, device=device) * math.pi
    k_d = 2.0 * math.pi / (_uniform(gen, n, 3.0, 10.0, device) * pixel(knobs.size))
    distract_wave = torch.stack([k_d * torch.cos(angle), k_d * torch.sin(angle)], dim=-1)
    distract_phase = torch.rand(n, generator=gen, device=device) * 2.0 * math.pi
    distract_amp = torch.rand(n, generator=gen, device=device) * knobs.distractor
    return bg, blob_center, blob_sigma, blob_color, distract_wave, distract_phase, distract_amp


def _radii(n: int, gen, knobs: Knobs, device) -> torch.Tensor:
    main = _uniform(gen, (n, 1), *knobs.radius, device)
    decoys = _uniform(gen, (n, knobs.decoys), *knobs.decoy_radius, device)
    return torch.cat([main, decoys], dim=1)


def _centers(n: int, gen, knobs: Knobs, device) -> torch.Tensor:
    main = _uniform(gen, (n, 1, 2), -knobs.center, knobs.center, device)
    decoys = _uniform(gen, (n, knobs.decoys, 2), -0.8, 0.8, device)
    return torch.cat([main, decoys], dim=1)


def sample_latents(labels: torch.Tensor, gen: torch.Generator, knobs: Knobs = DEFAULT_KNOBS) -> Latents:
    """Latents for the given labels, drawn from `gen` (on the labels' device)."""
    n, device = labels.shape[0], labels.device
    m = 1 + knobs.decoys
    shape, orient, freq, palette = _object_attributes(labels, gen, knobs).unbind(dim=-1)
    center = _centers(n, gen, knobs, device)
    radius = _radii(n, gen, knobs, device)
    wave = _wave_vectors(orient, freq, gen, knobs)
    phase = torch.rand((n, m), generator=gen, device=device) * 2.0 * math.pi
    color_a, color_b = _palette_colors(palette, gen, knobs)
    background = _background(n, gen, knobs, device)
    noise = torch.randn((n, 3, knobs.size, knobs.size), generator=gen, device=device) * knobs.noise
    return Latents(labels, shape, center, radius, wave, phase, color_a, color_b, *background, noise)


# ------------------------------------------------------------------------------------------
# rendering (a pure function of the latents)
# ------------------------------------------------------------------------------------------


def _grid(size: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    coords = (torch.arange(size, device=device, dtype=torch.float32) + 0.5) * pixel(size) - 1.0
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    return xx, yy


def _shape_sdf(shape: torch.Tensor, px: torch.Tensor, py: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Signed distance (negative inside) of each sample's shape; every shape is mirror-symmetric in x."""
    ax, ay = px.abs(), py.abs()
    dist = torch.sqrt(px * px + py * py)
    disk = dist - r
    square = torch.maximum(ax, ay) - 0.85 * r
    triangle = torch.maximum(py - 0.6 * r, 0.866 * ax - 0.5 * py - 0.6 * r)
    ring = (dist - 0.8 * r).abs() - 0.3 * r
    cross = torch.minimum(torch.maximum(ax - 0.3 * r, ay - r), torch.maximum(ax - r, ay - 0.3 * r))
    sdf = cross
    for index, candidate in ((3, ring), (2, triangle), (1, square), (0, disk)):
        sdf = torch.where(shape.view(-1, 1, 1) == index, candidate, sdf)
    return sdf


def _object_layer(lat: Latents, j: int, xx: torch.Tensor, yy: torch.Tensor):
    """(mask [n,1,H,W], striped colour [n,3,H,W]) of object j."""
    px = xx - lat.center[:, j, 0, None, None]
    py = yy - lat.center[:, j, 1, None, None]
    sdf = _shape_sdf(lat.shape[:, j], px, py, lat.radius[:, j, None, None])
    mask = torch.sigmoid(-sdf / EDGE).unsqueeze(1)
    wave = lat.wave[:, j]
    stripes = torch.sin(wave[:, 0, None, None] * px + wave[:, 1, None, None] * py + lat.phase[:, j, None, None])
    t = (0.5 + 0.5 * stripes).unsqueeze(1)
    fg = lat.color_a[:, j, :, None, None] * t + lat.color_b[:, j, :, None, None] * (1.0 - t)
    return mask, fg


def _background_image(lat: Latents, xx: torch.Tensor, yy: torch.Tensor) -> torch.Tensor:
    bg = lat.background[:, :, None, None].expand(-1, -1, *xx.shape)
    dx = xx - lat.blob_center[..., 0, None, None]  # [n, K, H, W]
    dy = yy - lat.blob_center[..., 1, None, None]
    weight = torch.exp(-(dx * dx + dy * dy) / (2.0 * lat.blob_sigma[..., None, None] ** 2))
    bg = bg + (weight.unsqueeze(2) * lat.blob_color[..., None, None]).sum(dim=1)  # elementwise: deterministic
    grating = torch.sin(
        lat.distract_wave[:, 0, None, None] * xx + lat.distract_wave[:, 1, None, None] * yy
        + lat.distract_phase[:, None, None]
    )
    return bg + (lat.distract_amp[:, None, None] * grating).unsqueeze(1)


def render(lat: Latents) -> torch.Tensor:
    """Raw (un-normalised) float32 images [n, 3, H, W]: background, decoys, then the class object.

    The image size is the noise's (`Knobs.size` when the latents were drawn)."""
    xx, yy = _grid(lat.noise.shape[-1], lat.center.device)
    image = _background_image(lat, xx, yy)
    for j in list(range(1, lat.shape.shape[1])) + [0]:
        mask, fg = _object_layer(lat, j, xx, yy)
        image = mask * fg + (1.0 - mask) * image
    return image + lat.noise


# ------------------------------------------------------------------------------------------
# the dataset
# ------------------------------------------------------------------------------------------


def balanced_labels(n: int, gen: torch.Generator, device) -> torch.Tensor:
    """int64 [n]: class c appears n // 10 (+1 for the first n % 10 classes) times, in shuffled order."""
    labels = torch.arange(n, device=device) % NUM_CLASSES
    return labels[torch.randperm(n, generator=gen, device=device)]


def raw_split(n: int, data_seed: int, stream: int, device, knobs: Knobs = DEFAULT_KNOBS):
    """(raw images [n,3,S,S] float32 with S = knobs.size, labels [n] int64), rendered chunk by chunk."""
    device = torch.device(device)
    labels = balanced_labels(n, make_generator(device, data_seed, stream, LABEL_STREAM), device)
    gen = make_generator(device, data_seed, stream)
    images = torch.empty((n, 3, knobs.size, knobs.size), device=device)
    for start in range(0, n, CHUNK):
        stop = min(start + CHUNK, n)
        images[start:stop] = render(sample_latents(labels[start:stop], gen, knobs))
    return images, labels


def channel_stats(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and std, accumulated chunk by chunk in float64 and rounded to 1e-4, so they
    are bit-stable across thread counts and runs."""
    total = torch.zeros(3, dtype=torch.float64, device=images.device)
    squares = torch.zeros(3, dtype=torch.float64, device=images.device)
    for start in range(0, images.shape[0], CHUNK):
        chunk = images[start : start + CHUNK].double()
        total += chunk.sum(dim=(0, 2, 3))
        squares += (chunk * chunk).sum(dim=(0, 2, 3))
    count = images.shape[0] * images.shape[2] * images.shape[3]
    mean = total / count
    std = torch.sqrt((squares - count * mean * mean) / (count - 1))
    return torch.round(mean * 1e4) / 1e4, torch.round(std * 1e4) / 1e4


def generate(
    n_train: int = 50_000,
    n_test: int = 10_000,
    data_seed: int = 0,
    device: torch.device | str = "cpu",
    knobs: Knobs = DEFAULT_KNOBS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x_train, y_train, x_test, y_test): normalised float32 images and int64 labels on `device`, drawn
    and rendered on the CPU (a CUDA generator draws other numbers), so they are the same on every device."""
    device = torch.device(device)
    x_train, y_train = raw_split(n_train, data_seed, TRAIN_STREAM, "cpu", knobs)
    x_test, y_test = raw_split(n_test, data_seed, TEST_STREAM, "cpu", knobs)
    mean, std = channel_stats(x_train)
    mean = mean.float().view(1, 3, 1, 1)
    std = std.float().view(1, 3, 1, 1)
    x_train.sub_(mean).div_(std)
    x_test.sub_(mean).div_(std)
    return tuple(t.to(device) for t in (x_train, y_train, x_test, y_test))
