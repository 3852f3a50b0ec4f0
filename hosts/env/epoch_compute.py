"""The device work of one env epoch: training steps, the fused validation pass and the readback; and the
CUDA streams that work runs on.

Everything here runs on the env's device and stream and never reads a value back to the host: the
losses and correct counts accumulate in device tensors held by an `EpochWork`, and
`EpochWork.readback_tensor` packs them into one vector that `read_back` copies to the host once per
epoch for every env (BEHAVIOUR §7.3 phases 1–2, §2.13 step 1, §7.9).

The CUDA streams of an env pool, and the rules that order work between them. Every CUDA env runs its
training and validation on its own stream, so the envs of one device overlap. Everything else the pool does
runs on the *caller's stream* of each device: whatever stream is current outside every env's context (the
default stream, unless the caller made another current). That is where the epoch plan is moved to the
device, the loader path's batches are copied, seeds are germinated or culled, the governor rolls back and
the signals are assembled.

The orderings (each is one call in this file's last section, and each has a CPU test with fake
streams in tests/hosts/env/test_streams.py):

- before an env's training and before it uses a loader batch, its stream waits for the caller's stream
  (`wait_for_caller`), which must be looked up *outside* the env's context: inside it,
  `torch.cuda.current_stream` is the env's own stream, and a stream waiting on itself orders nothing;
- a tensor made on the caller's stream and read on an env stream (the plan, a loader batch) is
  recorded on that env stream (`record_on`), so the caching allocator cannot hand its memory to
  another kernel before the env stream is done with it;
- the epoch's readback: the caller's stream waits for every env stream, and the host then waits for the
  caller's stream (`epoch_barrier`). After it, no env stream has work queued until the next epoch's
  `wait_for_caller`, so what the pool frees in between (the epoch's work tensors, culled seeds, a
  finished episode's models and optimizers) is not in use on any stream. It is the epoch's one host
  synchronisation; the per-step work never synchronises.

Streams live as long as the pool: `EnvStreams` gives env i the same stream in every episode.
`torch.cuda.Stream()` hands out streams from a small per-device pool in turn, and the caching allocator
keeps freed blocks per stream, so a fresh stream per env per episode would spread cached blocks over
ever more streams and let reserved memory grow episode after episode.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import torch
import torch.nn.functional as F

from esper_fx.contracts.events import EventType
from esper_fx.contracts.stages import SeedStage
from hosts.env.lr_schedule import apply_lr, rewarm_factor
from hosts.seeds.gradient_ratio import gradient_ratio, gradient_stats, seed_gradient_norm


# ------------------------------------------------------------------------------------------
# mixed precision (BEHAVIOUR §7.9)
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AmpSettings:
    """Autocast for one env device: enabled only on CUDA; a GradScaler only for float16."""

    enabled: bool
    dtype: torch.dtype

    @property
    def use_scaler(self) -> bool:
        return self.enabled and self.dtype == torch.float16

    def autocast(self, device: torch.device):
        if not self.enabled:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=self.dtype)


_AMP_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def amp_settings(amp: bool, amp_dtype: str, device: torch.device) -> AmpSettings:
    """AMP applies only to CUDA env devices; on any other device it is disabled with a warning."""
    dtype = _AMP_DTYPES[str(amp_dtype)]
    if amp and device.type != "cuda":
        warnings.warn(f"AMP requested on {device}: mixed precision applies only to CUDA devices; disabled",
                      RuntimeWarning, stacklevel=3)
        return AmpSettings(False, dtype)
    return AmpSettings(bool(amp), dtype)


# ------------------------------------------------------------------------------------------
# loss and metrics (BEHAVIOUR §6.8)
# ------------------------------------------------------------------------------------------


def loss_and_correct(outputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean CE over (N, C) logits, or over the flattened (B·T, V) logits of an LM; and the top-1 count."""
    logits = outputs.reshape(-1, outputs.shape[-1])
    flat = targets.reshape(-1).long()
    loss = F.cross_entropy(logits, flat)
    with torch.no_grad():
        correct = (logits.argmax(dim=-1) == flat).sum()
    return loss, correct


def correct_count(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The top-1 count of `loss_and_correct` alone (the counterfactual passes need no loss)."""
    return (outputs.reshape(-1, outputs.shape[-1]).argmax(dim=-1) == targets.reshape(-1)).sum()


# ------------------------------------------------------------------------------------------
# gradient statistics (BEHAVIOUR §2.13 steps 1–2 and 4), device tensors only
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeedGradients:
    """One measured slot of the last training step: the seed it belongs to, the ratio and ‖g_seed‖."""

    seed_id: str
    ratio: torch.Tensor  # 0-dim, on the env device
    norm: torch.Tensor  # 0-dim, on the env device


def measure_gradients(env, slot_ids) -> dict[str, SeedGradients]:
    """BEHAVIOUR §2.13 on the (unscaled) gradients of the last step, for enabled slots in TRAINING or BLENDING."""
    stats = gradient_stats(env.model, slot_ids)
    return {
        slot_id: SeedGradients(env.slot(slot_id).state.seed_id, gradient_ratio(stats.host, seed),
                               seed_gradient_norm(seed))
        for slot_id, seed in stats.seeds.items()
    }


# ------------------------------------------------------------------------------------------
# per-epoch device accumulators
# ------------------------------------------------------------------------------------------


@dataclass
class EpochWork:
    """One env's device-side accumulators for one epoch; read back once, in `readback_tensor` order."""

    device: torch.device
    train_loss_sum: torch.Tensor
    train_correct: torch.Tensor
    train_steps: int = 0
    train_count: int = 0
    val_loss_sum: torch.Tensor | None = None
    val_correct: torch.Tensor | None = None
    val_count: int = 0
    cf_slots: tuple[str, ...] = ()
    cf_correct: dict[str, torch.Tensor] = field(default_factory=dict)
    grads: dict[str, SeedGradients] = field(default_factory=dict)

    @classmethod
    def start(cls, device: torch.device) -> "EpochWork":
        return cls(device, torch.zeros((), dtype=torch.float32, device=device),
                   torch.zeros((), dtype=torch.int64, device=device))

    def begin_validation(self, cf_slots: tuple[str, ...]) -> None:
        self.val_loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.val_correct = torch.zeros((), dtype=torch.int64, device=self.device)
        self.cf_slots = cf_slots
        self.cf_correct = {s: torch.zeros((), dtype=torch.int64, device=self.device) for s in cf_slots}

    def readback_tensor(self) -> torch.Tensor:
        """[train_loss_sum, train_correct, val_loss_sum, val_correct, cf_correct..., (ratio, norm)...]."""
        parts = [self.train_loss_sum, self.train_correct, self.val_loss_sum, self.val_correct]
        parts += [self.cf_correct[s] for s in self.cf_slots]
        for g in self.grads.values():
            parts += [g.ratio, g.norm]
        return torch.stack([p.to(torch.float64) for p in parts])


@dataclass(frozen=True)
class EpochReadback:
    """The host-side values of one env's `EpochWork` after the epoch's single sync."""

    train_loss: float
    train_acc: float
    val_loss: float
    val_acc: float
    baseline_acc: dict[str, float]
    seeds: dict[str, tuple[str, float, float]]  # measured slot -> (seed_id, gradient ratio, ‖g_seed‖)


def _pct(correct: float, total: int) -> float:
    return 100.0 * correct / total if total > 0 else 0.0


def unpack_readback(work: EpochWork, values: list[float]) -> EpochReadback:
    """Inverse of `readback_tensor`: accuracies in pp, train_loss = mean of the per-step losses."""
    train_loss_sum, train_correct, val_loss_sum, val_correct = values[:4]
    n_cf = len(work.cf_slots)
    cf = values[4 : 4 + n_cf]
    grads = values[4 + n_cf :]
    seeds = {slot_id: (g.seed_id, grads[2 * j], grads[2 * j + 1]) for j, (slot_id, g) in enumerate(work.grads.items())}
    return EpochReadback(
        train_loss=train_loss_sum / max(work.train_steps, 1),
        train_acc=_pct(train_correct, work.train_count),
        val_loss=val_loss_sum / work.val_count if work.val_count > 0 else float("nan"),
        val_acc=_pct(val_correct, work.val_count),
        baseline_acc={s: _pct(c, work.val_count) for s, c in zip(work.cf_slots, cf)},
        seeds=seeds,
    )


def read_back(envs: Sequence) -> list[EpochReadback]:
    """Every env's accumulators to the host: one copy per device after the epoch barrier, the epoch's one
    synchronisation (what the pool frees after it is no longer in use: this module's docstring)."""
    by_device: dict[torch.device, list[tuple[Any, torch.Tensor]]] = {}
    callers = caller_streams(envs)
    for env in envs:
        with env.stream_context():
            vec = env.epoch_work.readback_tensor()
        hand_to_caller(env.stream, callers.get(env.device), vec)
        by_device.setdefault(env.device, []).append((env, vec))
    epoch_barrier(callers.values())
    out: dict[int, EpochReadback] = {}
    for items in by_device.values():
        values = torch.cat([vec for _, vec in items]).tolist()  # the one copy to the host
        start = 0
        for env, vec in items:
            out[env.index] = unpack_readback(env.epoch_work, values[start : start + vec.numel()])
            start += vec.numel()
    return [out[env.index] for env in envs]


# ------------------------------------------------------------------------------------------
# one training step of one env (BEHAVIOUR §7.3 phase 1)
# ------------------------------------------------------------------------------------------


def advance_germinated(env, slot_ids, epoch: int) -> None:
    """The safety advance GERMINATED -> TRAINING at the start of every training step (BEHAVIOUR §7.3 phase 1.1),
    and on to BLENDING under a clock without an isolated phase (`SeedSlot.start_training`)."""
    for slot_id in slot_ids:
        slot = env.slot(slot_id)
        if slot.stage == SeedStage.GERMINATED:
            try:
                moves = slot.start_training()
            except RuntimeError as exc:
                raise RuntimeError(f"env {env.index} {exc}") from None
            for before, after in moves:
                env.event(EventType.SEED_STAGE_CHANGED, epoch, slot_id, slot.state.seed_id, "safety advance",
                          from_stage=before.name, to_stage=after.name)


def _optimizers(env, slot_ids) -> list[torch.optim.Optimizer]:
    """Host optimizer first, then the seed optimizers in canonical slot order (BEHAVIOUR §7.3 phase 1.5)."""
    return [env.host_optimizer] + env.seed_optimizers_in_order(slot_ids)


def set_rates(env, slot_ids, lr_scale: float | None, rewarm_steps: int = 0) -> None:
    """Every optimizer's lr for the coming step (`hosts.env.lr_schedule`): the host's at `lr_scale` × its base
    lr, each seed's at that times its re-warm factor; nothing changes under a constant schedule without
    re-warming. Counts the step of every seed optimizer."""
    if lr_scale is not None:
        apply_lr([env.host_optimizer], lr_scale)
    for slot_id in slot_ids:
        entry = env.seed_optimizers.get(slot_id)
        if entry is None or entry.optimizer is None:
            continue
        if lr_scale is not None or rewarm_steps > 0:
            apply_lr([entry.optimizer], (1.0 if lr_scale is None else lr_scale)
                     * rewarm_factor(entry.steps, rewarm_steps))
        entry.steps += 1


def train_step(env, x: torch.Tensor, y: torch.Tensor, *, slot_ids, amp: AmpSettings, measure: bool,
               epoch: int, lr_scale: float | None = None, rewarm_steps: int = 0) -> None:
    """One training step of one env; nothing is read back to the host. `lr_scale` (a scheduled run) and
    `rewarm_steps` (a seed's own warmup) set the optimizers' rates first (`set_rates`)."""
    advance_germinated(env, slot_ids, epoch)
    for slot_id in slot_ids:
        if env.holds_seed(slot_id):
            env.slot(slot_id).tick_step()  # a ramp that ticks per training step (BEHAVIOUR §2.14)
            env.ensure_seed_optimizer(slot_id)
    if env.compute is not None:
        env.compute.train_step(env.model, x.shape[0])
    optimizers = _optimizers(env, slot_ids)
    set_rates(env, slot_ids, lr_scale, rewarm_steps)
    for opt in optimizers:
        opt.zero_grad(set_to_none=True)
    env.model.train()
    with amp.autocast(env.device):
        loss, correct = loss_and_correct(env.model(x), y)
    scaler = env.scaler
    (scaler.scale(loss) if scaler is not None else loss).backward()
    if measure:
        if scaler is not None:
            for opt in optimizers:
                if _has_grad(opt):
                    scaler.unscale_(opt)
        env.epoch_work.grads = measure_gradients(env, slot_ids)
    _step(optimizers, scaler)
    work = env.epoch_work
    work.train_loss_sum += loss.detach().float()
    work.train_correct += correct
    work.train_steps += 1
    work.train_count += y.numel()


def _has_grad(opt: torch.optim.Optimizer) -> bool:
    return any(p.grad is not None for group in opt.param_groups for p in group["params"])


def _step(optimizers, scaler) -> None:
    """Host first, then seeds; with a scaler, scaler.step on each (skipping any without a gradient,
    which the scaler cannot inf-check) and one scaler.update()."""
    if scaler is None:
        for opt in optimizers:
            opt.step()
        return
    for opt in optimizers:
        if _has_grad(opt):
            scaler.step(opt)
    scaler.update()


# ------------------------------------------------------------------------------------------
# fused validation + counterfactual pass (BEHAVIOUR §7.3 phase 2)
# ------------------------------------------------------------------------------------------


def counterfactual_slots(env, slot_ids) -> tuple[str, ...]:
    """Enabled slots holding a seed with state.alpha > 0, in canonical order."""
    return tuple(s for s in slot_ids if env.holds_seed(s) and env.slot(s).alpha > 0.0)


def validate_batch(env, x: torch.Tensor, y: torch.Tensor, *, amp: AmpSettings) -> None:
    """The real forward and, per cf slot, the forward with only that slot's alpha forced to 0, in one
    inference-mode pass that shares the host before each cf slot (`forward_with_counterfactuals`)."""
    work = env.epoch_work
    if env.compute is not None:
        env.compute.validation(env.model, work.cf_slots, x.shape[0])
    with torch.inference_mode(), amp.autocast(env.device):
        outputs, counterfactual = env.model.forward_with_counterfactuals(x, work.cf_slots)
        loss, correct = loss_and_correct(outputs, y)
        work.val_loss_sum += loss.double() * y.numel()
        work.val_correct += correct
        for slot_id in work.cf_slots:
            work.cf_correct[slot_id] += correct_count(counterfactual[slot_id], y)
    work.val_count += y.numel()


# ------------------------------------------------------------------------------------------
# CUDA streams: one per env, and the orderings between them and the caller's stream
# ------------------------------------------------------------------------------------------


class EnvStreams:
    """One CUDA stream per env index for the pool's whole life (None on the CPU or with streams off)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = bool(enabled)
        self._streams: dict[int, Any] = {}

    def for_env(self, index: int, device: torch.device) -> Any:
        if not self.enabled or device.type != "cuda":
            return None
        stream = self._streams.get(index)
        if stream is None or torch.device(stream.device) != device:
            stream = self._streams[index] = torch.cuda.Stream(device)
        return stream

    def __len__(self) -> int:
        return len(self._streams)


def caller_streams(envs: Iterable) -> dict[torch.device, Any]:
    """The current stream of each device of the envs that run on a stream; call it outside every env's
    stream context."""
    devices = dict.fromkeys(env.device for env in envs if env.stream is not None)
    return {device: torch.cuda.current_stream(device) for device in devices}


def wait_for_caller(stream: Any, caller: Any) -> None:
    """The env stream waits for the work queued so far on the caller's stream (no host sync)."""
    if stream is not None and caller is not None:
        stream.wait_stream(caller)


def record_on(stream: Any, tensors: Iterable[torch.Tensor | None]) -> None:
    """Mark tensors made on another stream as used on `stream` (their memory waits for it when freed)."""
    if stream is None:
        return
    for tensor in tensors:
        if tensor is not None:
            tensor.record_stream(stream)


def hand_to_caller(stream: Any, caller: Any, tensor: torch.Tensor) -> None:
    """The caller's stream waits for the env stream, and `tensor` (made there) is marked as used there."""
    if stream is not None:
        caller.wait_stream(stream)
        tensor.record_stream(caller)


def epoch_barrier(callers: Iterable[Any]) -> None:
    """The host waits for each caller stream, which has waited for every env stream (`hand_to_caller`)."""
    for caller in callers:
        caller.synchronize()
