"""Training batch plans and device augmentation (SPEC §6.3, §6.4, §7.2 item 6).

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
with p = 0.5; one vectorised gather per batch. The padding p is an eighth of the image side: 4 on
32×32 images (SPEC §6.4), 2 on the 16×16 images of shapes16.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from hosts.data.random_streams import make_generator

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
    augment: bool = True,
    pad: int = PAD,
) -> EpochPlan:
    """The plan of one epoch for envs 0..envs_running−1 (default: all n_envs), on the CPU; crop offsets
    are drawn for images padded by `pad` (`pad_for(image side)`)."""
    envs_running = n_envs if envs_running is None else envs_running
    if not 1 <= envs_running <= n_envs:
        raise ValueError(f"envs_running must be in [1, n_envs={n_envs}] (got {envs_running})")
    k = steps_per_epoch(n_train, n_envs, batch_per_env, split, max_batches)
    if split == "shared":
        return _shared_plan(n_train, n_envs, batch_per_env, k, envs_running, augment, pad, (seed, batch_idx, epoch))
    plans = [
        _shared_plan(n_train, 1, batch_per_env, k, 1, augment, pad, (seed, batch_idx, epoch, env))
        for env in range(envs_running)
    ]
    cat = lambda ts: None if ts[0] is None else torch.cat(ts)  # noqa: E731
    return EpochPlan(*(cat([getattr(p, f) for p in plans]) for f in EpochPlan._fields))


def _shared_plan(n_train, n_envs, bpe, k, envs_running, augment, pad, seed_values) -> EpochPlan:
    """One permutation; step-major [K, n_envs, Bpe] slices, keeping the first envs_running envs."""
    gen = make_generator("cpu", *seed_values)
    used = k * n_envs * bpe
    perm = torch.randperm(n_train, generator=gen)[:used]
    indices = perm.view(k, n_envs, bpe).transpose(0, 1)[:envs_running].contiguous()
    if not augment:
        return EpochPlan(indices, None, None)
    crops, flips = _augment_draws(gen, used, pad)
    crops = crops.view(k, n_envs, bpe, 2).transpose(0, 1)[:envs_running].contiguous()
    flips = flips.view(k, n_envs, bpe).transpose(0, 1)[:envs_running].contiguous()
    return EpochPlan(indices, crops, flips)


# ------------------------------------------------------------------------------------------
# device augmentation
# ------------------------------------------------------------------------------------------


def augment_batch(
    images: torch.Tensor, crops: torch.Tensor, flips: torch.Tensor, pad_value: torch.Tensor
) -> torch.Tensor:
    """Pad by p = pad_for(W) with `pad_value` [C], crop HxW at (dy, dx) per sample, then mirror where `flips`.

    images [B, C, H, W]; crops [B, 2] int64 in 0..2p; flips [B] bool; all on one device. Equivalent to
    padding first, but done as one gather from the unpadded images plus a select of the padding value.
    """
    b, c, h, w = images.shape
    ar_h = torch.arange(h, device=images.device)
    ar_w = torch.arange(w, device=images.device)
    pad = pad_for(w)
    rows = crops[:, 0:1] - pad + ar_h  # [B, H] source rows, out of range inside the padding
    cols = crops[:, 1:2] - pad + torch.where(flips.view(b, 1), (w - 1) - ar_w, ar_w)  # [B, W]
    inside = ((rows >= 0) & (rows < h)).unsqueeze(2) & ((cols >= 0) & (cols < w)).unsqueeze(1)
    flat = rows.clamp(0, h - 1).unsqueeze(2) * w + cols.clamp(0, w - 1).unsqueeze(1)
    index = flat.view(b, 1, h * w).expand(b, c, h * w)
    out = torch.gather(images.reshape(b, c, h * w), 2, index).view(b, c, h, w)
    return torch.where(inside.unsqueeze(1), out, pad_value.to(images.dtype).view(1, c, 1, 1))
