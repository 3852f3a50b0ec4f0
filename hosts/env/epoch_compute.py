"""The device work of one env epoch: training steps, the fused validation pass and the readback.

Everything here runs on the env's device and stream and never reads a value back to the host: the
losses and correct counts accumulate in device tensors held by an `EpochWork`, and
`EpochWork.readback_tensor` packs them into one vector that the pool copies to the host once per
epoch (BEHAVIOUR §7.3 phases 1–2, §2.13 step 1, §7.9).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from esper_fx.contracts import EventType, SeedStage
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


# ------------------------------------------------------------------------------------------
# one training step of one env (BEHAVIOUR §7.3 phase 1)
# ------------------------------------------------------------------------------------------


def advance_germinated(env, slot_ids, epoch: int) -> None:
    """The safety advance GERMINATED -> TRAINING at the start of every training step (BEHAVIOUR §7.3 phase 1.1)."""
    for slot_id in slot_ids:
        slot = env.slot(slot_id)
        if slot.stage == SeedStage.GERMINATED:
            result = slot.advance_stage(SeedStage.TRAINING)
            if not result.passed:
                raise RuntimeError(f"env {env.index} slot {slot_id}: G1 failed ({result.message})")
            env.event(EventType.SEED_STAGE_CHANGED, epoch, slot_id, slot.state.seed_id, "safety advance",
                      from_stage="GERMINATED", to_stage="TRAINING")


def _optimizers(env, slot_ids) -> list[torch.optim.Optimizer]:
    """Host optimizer first, then the seed optimizers in canonical slot order (BEHAVIOUR §7.3 phase 1.5)."""
    return [env.host_optimizer] + env.seed_optimizers_in_order(slot_ids)


def train_step(env, x: torch.Tensor, y: torch.Tensor, *, slot_ids, amp: AmpSettings, measure: bool,
               epoch: int) -> None:
    """One training step of one env; nothing is read back to the host."""
    advance_germinated(env, slot_ids, epoch)
    for slot_id in slot_ids:
        if env.holds_seed(slot_id):
            env.ensure_seed_optimizer(slot_id)
    optimizers = _optimizers(env, slot_ids)
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
    with torch.inference_mode(), amp.autocast(env.device):
        outputs, counterfactual = env.model.forward_with_counterfactuals(x, work.cf_slots)
        loss, correct = loss_and_correct(outputs, y)
        work.val_loss_sum += loss.double() * y.numel()
        work.val_correct += correct
        for slot_id in work.cf_slots:
            work.cf_correct[slot_id] += correct_count(counterfactual[slot_id], y)
    work.val_count += y.numel()
