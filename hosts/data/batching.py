"""Training batch plans, device augmentation and the random streams they draw from (BEHAVIOUR §6.3, §6.4,
§7.2 item 6).

An *epoch plan* says, for every running env and training step, which training samples the env
sees and (for images) how each is augmented. Plans are drawn on the CPU from a torch.Generator
seeded by `mix_seed(seed, batch_idx, epoch)` ("shared") or `mix_seed(seed, batch_idx, epoch, env)`
("full"), so they are the same on every device type, and moved to the env device once per epoch.

- shared: one permutation of the whole training split; step k draws n_envs·Bpe samples and env i
  takes the slice [i·Bpe, (i+1)·Bpe); K = floor(N / (n_envs·Bpe)). Envs that do not run this batch
  simply drop their slices.
- full: each env has its own permutation, K = floor(N / Bpe).
Both are capped by max_train_batches (None -> task default, 0 -> unlimited).

Augmentation (images only): a crop offset (dy, dx) uniform in {0..2p}² on the image padded by p with
the per-channel value `pad_value` (the normalised black, −mean_c/std_c), then a horizontal flip
with p = 0.5. The padding p is an eighth of the image side: 4 on 32×32 images (BEHAVIOUR §6.4), 2 on the
16×16 images of shapes16. The whole batch (sample choice, crop, flip and padding) is one row gather from
a *pixel table*: the images' pixels in channels_last order followed by one padding pixel, so the batch
comes out channels_last (`hosts.layout`) without a separate padding or layout pass.

Random streams (BEHAVIOUR §7.2 item 6): `mix_seed(a, b, ...)` folds a tuple of integers into one 63-bit
seed with SplitMix64 steps, so a stream seeded from (seed, batch_idx, epoch[, env]) is reproducible from
those numbers alone: no generator runs on across batches, and resuming at batch k reproduces batch k
exactly. The plans and augmentation here and the generated shapes datasets all draw from `make_generator`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _splitmix64(z: int) -> int:
    z = (z + _GOLDEN) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def mix_seed(*values: int) -> int:
    """A pure 63-bit seed from any number of integers (order matters; negative values are allowed)."""
    state = 0x243F6A8885A308D3  # pi's fraction bits: a fixed, arbitrary start
    for value in values:
        state = _splitmix64(state ^ (int(value) & _MASK64))
    return state & ((1 << 63) - 1)


def make_generator(device: torch.device | str, *values: int) -> torch.Generator:
    """A torch.Generator on `device`'s type, seeded with mix_seed(*values). Never the global RNG."""
    device = torch.device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(mix_seed(*values))
    return gen


PAD_DIVISOR = 8  # images are padded by an eighth of their side


def pad_for(size: int) -> int:
    """The augmentation padding of images `size` pixels wide: 4 at 32."""
    return size // PAD_DIVISOR


PAD = pad_for(32)
SPLIT_MODES = ("shared", "full")


class EpochPlan(NamedTuple):
    """Sample indices [E_run, K, Bpe] int64 and augmentation draws for one epoch.

    `crops` [E_run, K, Bpe, 2] int64 (dy, dx) and `flips` [E_run, K, Bpe] bool, or None (no augmentation).
    """

    indices: torch.Tensor
    crops: torch.Tensor | None
    flips: torch.Tensor | None

    @property
    def num_envs(self) -> int:
        return self.indices.shape[0]

    @property
    def num_steps(self) -> int:
        return self.indices.shape[1]

    def to(self, device: torch.device) -> "EpochPlan":
        move = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
        return EpochPlan(move(self.indices), move(self.crops), move(self.flips))

    def env(self, i: int) -> "EpochPlan":
        """The plan of env i alone (E_run = 1)."""
        pick = lambda t: None if t is None else t[i : i + 1]  # noqa: E731
        return EpochPlan(pick(self.indices), pick(self.crops), pick(self.flips))


def resolve_max_batches(max_train_batches: int | None, task_default: int | None) -> int | None:
    """None -> the task default; 0 -> unlimited (None); n >= 1 -> n."""
    if max_train_batches is None:
        return task_default
    if max_train_batches < 0:
        raise ValueError(f"max_train_batches must be None or >= 0 (got {max_train_batches})")
    return None if max_train_batches == 0 else max_train_batches


def steps_per_epoch(n_train: int, n_envs: int, batch_per_env: int, split: str, max_batches: int | None) -> int:
    """K: floor(N / (n_envs·Bpe)) shared or floor(N / Bpe) full, capped by max_batches (None = no cap)."""
    if split not in SPLIT_MODES:
        raise ValueError(f"data_split must be one of {list(SPLIT_MODES)} (got {split!r})")
    if n_envs < 1 or batch_per_env < 1:
        raise ValueError(f"n_envs and batch_per_env must be >= 1 (got {n_envs}, {batch_per_env})")
    per_step = n_envs * batch_per_env if split == "shared" else batch_per_env
    k = n_train // per_step
    if k < 1:
        raise ValueError(
            f"the training split has {n_train} samples, fewer than one step of {per_step} "
            f"({split} split, n_envs={n_envs}, batch_size_per_env={batch_per_env})"
        )
    return k if max_batches is None else min(k, max_batches)


def _augment_draws(gen: torch.Generator, count: int, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    crops = torch.randint(0, 2 * pad + 1, (count, 2), generator=gen)
    flips = torch.rand(count, generator=gen) < 0.5
    return crops, flips


def plan_epoch(
    n_train: int,
    *,
    n_envs: int,
    batch_per_env: int,
    split: str,
    max_batches: int | None,
    seed: int,
    batch_idx: int,
    epoch: int,
    envs_running: int | None = None,
    pad: int | None = PAD,
) -> EpochPlan:
    """The plan of one epoch for envs 0..envs_running−1 (default: all n_envs), on the CPU; crop offsets
    are drawn for images padded by `pad` (`pad_for(image side)`), and flips; `pad` None: no augmentation
    (no crops, no flips)."""
    envs_running = n_envs if envs_running is None else envs_running
    if not 1 <= envs_running <= n_envs:
        raise ValueError(f"envs_running must be in [1, n_envs={n_envs}] (got {envs_running})")
    k = steps_per_epoch(n_train, n_envs, batch_per_env, split, max_batches)
    if split == "shared":
        return _shared_plan(n_train, n_envs, batch_per_env, k, envs_running, pad, (seed, batch_idx, epoch))
    plans = [
        _shared_plan(n_train, 1, batch_per_env, k, 1, pad, (seed, batch_idx, epoch, env))
        for env in range(envs_running)
    ]
    cat = lambda ts: None if ts[0] is None else torch.cat(ts)  # noqa: E731
    return EpochPlan(*(cat([getattr(p, f) for p in plans]) for f in EpochPlan._fields))


def _shared_plan(n_train, n_envs, bpe, k, envs_running, pad, seed_values) -> EpochPlan:
    """One permutation; step-major [K, n_envs, Bpe] slices, keeping the first envs_running envs."""
    gen = make_generator("cpu", *seed_values)
    used = k * n_envs * bpe
    perm = torch.randperm(n_train, generator=gen)[:used]
    indices = perm.view(k, n_envs, bpe).transpose(0, 1)[:envs_running].contiguous()
    if pad is None:
        return EpochPlan(indices, None, None)
    crops, flips = _augment_draws(gen, used, pad)
    crops = crops.view(k, n_envs, bpe, 2).transpose(0, 1)[:envs_running].contiguous()
    flips = flips.view(k, n_envs, bpe).transpose(0, 1)[:envs_running].contiguous()
    return EpochPlan(indices, crops, flips)


# ------------------------------------------------------------------------------------------
# device augmentation
# ------------------------------------------------------------------------------------------


def pixel_table(images: torch.Tensor, pad_value: torch.Tensor) -> torch.Tensor:
    """[N, C, H, W] images -> a fresh [N·H·W + 1, C] table: every pixel, channels_last order, then `pad_value`."""
    n, c, h, w = images.shape
    table = images.new_empty((n * h * w + 1, c))
    table[:-1].view(n, h, w, c).copy_(images.permute(0, 2, 3, 1))
    table[-1].copy_(pad_value)
    return table


def table_images(table: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """The [N, C, H, W] images of a pixel table as a channels_last view (no copy)."""
    n, c, h, w = shape
    return table[:-1].view(n, h, w, c).permute(0, 3, 1, 2)


def crop_flip_rows(samples: torch.Tensor, crops: torch.Tensor, flips: torch.Tensor, h: int, w: int,
                   pad_row: int) -> torch.Tensor:
    """[B·H·W] pixel-table rows of the padded, cropped, mirrored samples (out of range -> `pad_row`).

    With p = pad_for(w), row (b, i, j) of the output reads image samples[b] at row dy − p + i and column
    dx − p + j (or W − 1 − j when flipped); outside the image it reads `pad_row`, the padding pixel. Every in-range row
    lies below pad_row, and an out-of-range row or column adds at least pad_row, so one clamp finds them.
    The [B·H·W] sum is formed in int32 when the table is small enough (half the index traffic).
    """
    ar_h = torch.arange(h, device=samples.device)
    ar_w = torch.arange(w, device=samples.device)
    pad = pad_for(w)
    rows = crops[:, 0:1] - pad + ar_h  # [B, H]
    cols = crops[:, 1:2] - pad + torch.where(flips.view(-1, 1), (w - 1) - ar_w, ar_w)  # [B, W]
    row_start = torch.where((rows >= 0) & (rows < h), (samples.view(-1, 1) * h + rows) * w, pad_row)
    col = torch.where((cols >= 0) & (cols < w), cols, pad_row)
    if 2 * pad_row < torch.iinfo(torch.int32).max:
        row_start, col = row_start.int(), col.int()
    return (row_start.unsqueeze(2) + col.unsqueeze(1)).clamp_(max=pad_row).view(-1)


def gather_augmented(table: torch.Tensor, image_shape: tuple[int, int, int], samples: torch.Tensor,
                     crops: torch.Tensor, flips: torch.Tensor) -> torch.Tensor:
    """Samples `samples` [B] of a pixel table, padded by p = pad_for(W), cropped at `crops` [B, 2] (dy, dx in 0..2p) and
    mirrored where `flips` [B]: a [B, C, H, W] channels_last batch from one row gather."""
    c, h, w = image_shape
    rows = crop_flip_rows(samples, crops, flips, h, w, table.shape[0] - 1)
    return table.index_select(0, rows).view(samples.shape[0], h, w, c).permute(0, 3, 1, 2)


def augment_batch(
    images: torch.Tensor, crops: torch.Tensor, flips: torch.Tensor, pad_value: torch.Tensor
) -> torch.Tensor:
    """Pad by p = pad_for(W) with `pad_value` [C], crop HxW at (dy, dx) per sample, then mirror where `flips`.

    images [B, C, H, W] (any layout); crops [B, 2] int64 in 0..2p; flips [B] bool; all on one device.
    Returns a channels_last batch, equal to padding first, cropping and flipping. The loader path uses
    it on each step's stacked samples; the device path gathers from its stored pixel table directly.
    """
    b, c, h, w = images.shape
    samples = torch.arange(b, device=images.device)
    table = pixel_table(images, pad_value.to(images.dtype))
    return gather_augmented(table, (c, h, w), samples, crops, flips)
