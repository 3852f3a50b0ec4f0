"""BASELINE ONLY: a PyTorch eager implementation of the esper_fx controller, for the benchmarks.

This is *not* part of the system (the controller is the JAX code in `rl/`). It is the implementation a
PyTorch-only project would write, kept here so `python -m esper_fx.bench` can measure the JAX controller
against it in the same run. It computes the same function as `rl`:

- network (BEHAVIOUR §10.1): Linear(D→128) + LayerNorm(eps 1e-5) + ReLU → single-layer `nn.LSTM` 128 →
  LayerNorm → six heads Linear(128→64) → ReLU → Linear(64→n) (slot S, blueprint B, blend 3, op 4, tempo 3,
  value 1). PyTorch's LSTM has two bias vectors; `bias_hh` is zeroed and frozen so `bias_ih` is the one
  fused bias of BEHAVIOUR §10.1 (forget slice 2.0), and the trainable parameters match the JAX ones one to one.
  Orthogonal init with the gains of BEHAVIOUR §10.1 (√2 hidden, 0.01 policy outputs, 1.0 value output, 1.0 LSTM).
- masked categorical heads (BEHAVIOUR §9.2–9.4): masked logits −1e4, per-head sampling and log-probs, normalised
  entropy, causal head masks from the taken op.
- GAE (BEHAVIOUR §11.3), advantage normalisation (§11.4), the PPO loss (§11.6: per-head clipped surrogate with
  causal masks summed over heads, value clipping ±10 with the 0.5 factor, normalised entropy bonus),
  approx_kl checked before the step (BEHAVIOUR §11.7), Adam(eps 1e-5) after a global grad-norm clip of 0.5, with
  update_epochs × num_minibatches gradient steps over env groups (BEHAVIOUR §11.5).

The code is idiomatic eager PyTorch: no torch.compile, no CUDA graphs, no hand fusion. Only torch,
numpy, `esper_fx.contracts` and the framework-free `rl.config` are imported; `load_flax_params` takes the JAX parameter pytree as
anything `numpy.asarray` accepts.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from esper_fx.contracts.actions import ACTION_HEADS, HEAD_OP, NUM_HEADS, LifecycleOp, head_sizes
from esper_fx.contracts.blueprints import DEFAULT_NUM_BLUEPRINTS
from rl.config import (
    ADAM_B1,
    ADAM_B2,
    ADV_EPS,
    ENTROPY_LOG_FLOOR,
    EV_MIN_VAR,
    FEATURE_DIM,
    HEAD_HIDDEN,
    KL_STOP_FACTOR,
    LAYER_NORM_EPS,
    LSTM_FORGET_BIAS,
    MASKED_LOGIT,
    POLICY_OUT_GAIN,
    VALUE_OUT_GAIN,
    LearnerConfig,
    PPOConfig,
)

SQRT2 = math.sqrt(2.0)
HEAD_NAMES = tuple(f"{head}_head" for head in ACTION_HEADS)

Carry = tuple  # (h [E, H], c [E, H])


# ------------------------------------------------------------------------------------------
# network (BEHAVIOUR §10.1)
# ------------------------------------------------------------------------------------------


def _orthogonal_linear(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain=gain)
    nn.init.zeros_(layer.bias)
    return layer


class TorchHead(nn.Module):
    """Linear(→64) → ReLU → Linear(→n); orthogonal √2 then `out_gain`, zero biases."""

    def __init__(self, in_dim: int, n: int, out_gain: float, hidden: int = HEAD_HIDDEN):
        super().__init__()
        self.hidden = _orthogonal_linear(nn.Linear(in_dim, hidden), SQRT2)
        self.out = _orthogonal_linear(nn.Linear(hidden, n), out_gain)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.out(F.relu(self.hidden(z)))


class TorchActorCritic(nn.Module):
    """The factored recurrent actor-critic of BEHAVIOUR §10.1 in PyTorch (baseline for the benchmarks)."""

    def __init__(
        self,
        obs_dim: int,
        num_slots: int,
        num_blueprints: int = DEFAULT_NUM_BLUEPRINTS,
        hidden_dim: int = PPOConfig.lstm_hidden_dim,
    ):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.feature = _orthogonal_linear(nn.Linear(obs_dim, FEATURE_DIM), SQRT2)
        self.feature_norm = nn.LayerNorm(FEATURE_DIM, eps=LAYER_NORM_EPS)
        self.lstm = nn.LSTM(FEATURE_DIM, hidden_dim, num_layers=1, batch_first=True)
        self.core_norm = nn.LayerNorm(hidden_dim, eps=LAYER_NORM_EPS)
        sizes = head_sizes(num_slots, num_blueprints)
        self.policy_heads = nn.ModuleList(TorchHead(hidden_dim, n, POLICY_OUT_GAIN) for n in sizes)
        self.value_head = TorchHead(hidden_dim, 1, VALUE_OUT_GAIN)
        self._init_lstm()

    def _init_lstm(self) -> None:
        hd = self.hidden_dim
        nn.init.orthogonal_(self.lstm.weight_ih_l0, gain=1.0)
        nn.init.orthogonal_(self.lstm.weight_hh_l0, gain=1.0)
        with torch.no_grad():
            self.lstm.bias_ih_l0.zero_()
            self.lstm.bias_ih_l0[hd:2 * hd] = LSTM_FORGET_BIAS
            self.lstm.bias_hh_l0.zero_()
        self.lstm.bias_hh_l0.requires_grad_(False)  # one fused bias, as in BEHAVIOUR §10.1

    def initial_carry(self, n_envs: int, device: torch.device | str = "cpu") -> Carry:
        zeros = torch.zeros(n_envs, self.hidden_dim, device=device)
        return (zeros, zeros.clone())

    def forward(
        self, obs: torch.Tensor, carry: Carry | None = None, masks: Sequence[torch.Tensor] | None = None
    ) -> tuple[list[torch.Tensor], torch.Tensor, Carry]:
        """obs `[E, L, D]` → (masked logits per head `[E, L, n]`, value `[E, L]`, new carry)."""
        x = F.relu(self.feature_norm(self.feature(obs)))
        if carry is None:
            carry = self.initial_carry(obs.shape[0], obs.device)
        out, (h, c) = self.lstm(x, (carry[0].unsqueeze(0), carry[1].unsqueeze(0)))
        z = self.core_norm(out)
        logits = [head(z) for head in self.policy_heads]
        if masks is not None:
            logits = [masked_logits(lg, m) for lg, m in zip(logits, masks)]
        value = self.value_head(z).squeeze(-1)
        return logits, value, (h.squeeze(0), c.squeeze(0))

    def step(
        self, obs: torch.Tensor, carry: Carry, masks: Sequence[torch.Tensor] | None = None
    ) -> tuple[list[torch.Tensor], torch.Tensor, Carry]:
        """One step: obs `[E, D]` → (masked logits `[E, n]` per head, value `[E]`, new carry)."""
        step_masks = None if masks is None else [m.unsqueeze(1) for m in masks]
        logits, value, carry = self(obs.unsqueeze(1), carry, step_masks)
        return [lg.squeeze(1) for lg in logits], value.squeeze(1), carry

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]


def param_count(net: TorchActorCritic) -> int:
    """Trainable parameters (194,387 for D = 89, S = 3, B = 5, as BEHAVIOUR §10.1 counts them)."""
    return sum(p.numel() for p in net.trainable_parameters())


# ------------------------------------------------------------------------------------------
# copying the JAX parameters in (for the equivalence checks)
# ------------------------------------------------------------------------------------------


def _copy(dst: torch.Tensor, src: Any, transpose: bool = False) -> None:
    value = torch.from_numpy(np.array(src, dtype=np.float32))
    if transpose:
        value = value.T
    if tuple(value.shape) != tuple(dst.shape):
        raise ValueError(f"shape mismatch: torch {tuple(dst.shape)} vs jax {tuple(value.shape)}")
    with torch.no_grad():
        dst.copy_(value)


def _copy_dense(layer: nn.Linear, dense: Mapping[str, Any]) -> None:
    _copy(layer.weight, dense["kernel"], transpose=True)  # flax kernel [in, out], torch weight [out, in]
    _copy(layer.bias, dense["bias"])


def _copy_norm(norm: nn.LayerNorm, params: Mapping[str, Any]) -> None:
    _copy(norm.weight, params["scale"])
    _copy(norm.bias, params["bias"])


def load_flax_params(net: TorchActorCritic, params: Mapping[str, Any]) -> None:
    """Copy the parameters of `rl.network.ActorCritic` (the Flax pytree) into `net`, in place."""
    _copy_dense(net.feature, params["feature"])
    _copy_norm(net.feature_norm, params["feature_norm"])
    lstm = params["lstm"]
    _copy(net.lstm.weight_ih_l0, lstm["w_x"], transpose=True)  # [D, 4H] -> [4H, D]; gate order i, f, g, o
    _copy(net.lstm.weight_hh_l0, lstm["w_h"], transpose=True)
    _copy(net.lstm.bias_ih_l0, lstm["bias"])
    with torch.no_grad():
        net.lstm.bias_hh_l0.zero_()
    _copy_norm(net.core_norm, params["core_norm"])
    for head, name in zip(list(net.policy_heads) + [net.value_head], HEAD_NAMES + ("value_head",)):
        _copy_dense(head.hidden, params[name]["hidden"])
        _copy_dense(head.out, params[name]["out"])


# ------------------------------------------------------------------------------------------
# masked categorical heads (BEHAVIOUR §9.2–9.4)
# ------------------------------------------------------------------------------------------


def masked_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return logits.masked_fill(~mask, MASKED_LOGIT)


def sample_heads(logits: Sequence[torch.Tensor], generator: torch.Generator | None = None):
    """Sample every head of `[E, n]` masked logits: (actions int64 `[E, 5]`, log-probs `[E, 5]`)."""
    actions, log_probs = [], []
    for lg in logits:
        lp = F.log_softmax(lg, dim=-1)
        a = torch.multinomial(lp.exp(), 1, generator=generator)
        actions.append(a.squeeze(-1))
        log_probs.append(lp.gather(-1, a).squeeze(-1))
    return torch.stack(actions, dim=-1), torch.stack(log_probs, dim=-1)


def heads_log_prob(logits: Sequence[torch.Tensor], actions: torch.Tensor) -> torch.Tensor:
    """Per-head log-probs `[..., 5]` of `actions [..., 5]` under masked logits."""
    out = [F.log_softmax(lg, dim=-1).gather(-1, actions[..., h:h + 1]).squeeze(-1) for h, lg in enumerate(logits)]
    return torch.stack(out, dim=-1)


def normalized_entropy(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """H / max(ln n_valid, 1e-8) over valid entries, clipped to [0, 1]; 0 with one valid action."""
    lp = F.log_softmax(logits, dim=-1)
    entropy = -(lp.exp() * lp).masked_fill(~mask, 0.0).sum(-1)
    n_valid = mask.sum(-1).clamp(min=1)
    denom = torch.log(n_valid.to(lp.dtype)).clamp(min=ENTROPY_LOG_FLOOR)
    h_norm = (entropy / denom).clamp(0.0, 1.0)
    return torch.where(n_valid <= 1, torch.zeros_like(h_norm), h_norm)


def heads_entropy(logits: Sequence[torch.Tensor], masks: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.stack([normalized_entropy(lg, m) for lg, m in zip(logits, masks)], dim=-1)


def causal_masks(op: torch.Tensor) -> torch.Tensor:
    """m_h `[..., 5]`: slot unless WAIT; blueprint, blend, tempo on GERMINATE; op always."""
    slot = op != int(LifecycleOp.WAIT)
    germinate = op == int(LifecycleOp.GERMINATE)
    return torch.stack([slot, germinate, germinate, torch.ones_like(slot), germinate], dim=-1)


@torch.inference_mode()
def act(
    net: TorchActorCritic,
    obs: torch.Tensor,
    masks: Sequence[torch.Tensor],
    carry: Carry,
    generator: torch.Generator | None = None,
):
    """One policy step without gradients: (actions `[E, 5]`, log-probs `[E, 5]`, value `[E]`, new carry)."""
    logits, value, carry = net.step(obs, carry, masks)
    actions, log_probs = sample_heads(logits, generator)
    return actions, log_probs, value, carry


# ------------------------------------------------------------------------------------------
# GAE (BEHAVIOUR §11.3) and advantage statistics (§11.4–11.5)
# ------------------------------------------------------------------------------------------


def gae(rewards, values, dones, truncated, bootstrap, valid, gamma: float, lam: float):
    """(advantages, returns) `[E, T]`, per env over its valid steps, iterating t = T−1 … 0."""
    n_steps = rewards.shape[1]
    valid_next = torch.cat([valid[:, 1:], torch.zeros_like(valid[:, :1])], dim=1)
    is_last = valid & ~valid_next
    terminal = dones & ~truncated
    adv = torch.zeros_like(rewards)
    g = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(n_steps)):
        v_after = values[:, t + 1] if t + 1 < n_steps else torch.zeros_like(g)
        v_last = torch.where(truncated[:, t], bootstrap[:, t], torch.zeros_like(g))
        nnt_last = torch.where(truncated[:, t], torch.ones_like(g), 1.0 - dones[:, t].float())
        v_next = torch.where(is_last[:, t], v_last, v_after)
        nnt = torch.where(is_last[:, t], nnt_last, 1.0 - terminal[:, t].float())
        g = torch.where(terminal[:, t], torch.zeros_like(g), g)
        delta = rewards[:, t] + gamma * v_next * nnt - values[:, t]
        g = torch.where(valid[:, t], delta + gamma * lam * nnt * g, torch.zeros_like(g))
        adv[:, t] = g
    returns = torch.where(valid, adv + values, torch.zeros_like(adv))
    return adv, returns


def _masked_mean_var(x: torch.Tensor, valid: torch.Tensor):
    n = valid.sum()
    mean = torch.where(valid, x, 0.0).sum() / n.clamp(min=1)
    ss = torch.where(valid, (x - mean) ** 2, 0.0).sum()
    var = torch.where(n > 1, ss / (n - 1).clamp(min=1), torch.zeros_like(ss))
    return n, mean, var


def normalize_advantages(adv: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    n, mean, var = _masked_mean_var(adv, valid)
    std = torch.where(n > 1, var.sqrt(), torch.ones_like(var))
    return torch.where(valid, (adv - mean) / (std + ADV_EPS), torch.zeros_like(adv))


def explained_variance(returns, values, valid) -> torch.Tensor:
    n, _, var_r = _masked_mean_var(returns, valid)
    _, _, var_d = _masked_mean_var(returns - values, valid)
    ok = (n >= 2) & (var_r > EV_MIN_VAR)
    return torch.where(ok, 1.0 - var_d / torch.where(ok, var_r, torch.ones_like(var_r)), torch.zeros_like(var_r))


# ------------------------------------------------------------------------------------------
# PPO (BEHAVIOUR §11.5–11.7)
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TorchPPOConfig:
    """The BEHAVIOUR §11.1 hyperparameters the reference uses; built from the JAX side's `rl.config.PPOConfig`."""

    lr: float
    gamma: float
    gae_lambda: float
    clip_ratio: float
    value_clip: float
    value_coef: float
    max_grad_norm: float
    target_kl: float | None
    update_epochs: int
    num_minibatches: int
    adam_eps: float
    entropy_coef: float
    entropy_coef_min: float
    entropy_head_weights: tuple[float, ...] = (1.0,) * NUM_HEADS
    kl_stop_factor: float = KL_STOP_FACTOR

    @classmethod
    def from_ppo_config(cls, cfg: PPOConfig, learner: LearnerConfig = LearnerConfig()) -> "TorchPPOConfig":
        """The fields of `cfg` and of `learner` (γ, λ) this class has."""
        values = {**dataclasses.asdict(learner), **dataclasses.asdict(cfg)}
        return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values})

    @property
    def beta(self) -> float:
        return max(self.entropy_coef, self.entropy_coef_min)


class TorchRollout(NamedTuple):
    """A filled rollout `[E, T, ...]` as torch tensors (actions int64 for `gather`)."""

    obs: torch.Tensor  # [E, T, D] normalised
    actions: torch.Tensor  # [E, T, 5] int64
    log_probs: torch.Tensor  # [E, T, 5]
    values: torch.Tensor  # [E, T]
    rewards: torch.Tensor  # [E, T]
    dones: torch.Tensor  # [E, T] bool
    truncated: torch.Tensor  # [E, T] bool
    bootstrap: torch.Tensor  # [E, T]
    masks: tuple[torch.Tensor, ...]  # [E, T, n] bool per head
    valid: torch.Tensor  # [E, T] bool


class TrainingData(NamedTuple):
    obs: torch.Tensor
    actions: torch.Tensor
    old_log_probs: torch.Tensor
    old_values: torch.Tensor
    advantages: torch.Tensor  # normalised
    returns: torch.Tensor
    masks: tuple[torch.Tensor, ...]
    valid: torch.Tensor

    def rows(self, idx: torch.Tensor) -> "TrainingData":
        return TrainingData(*(tuple(m[idx] for m in x) if isinstance(x, tuple) else x[idx] for x in self))


@torch.no_grad()
def build_training_data(rollout: TorchRollout, cfg: TorchPPOConfig) -> tuple[TrainingData, torch.Tensor]:
    """GAE, normalised advantages and the explained variance of the whole buffer."""
    adv, ret = gae(rollout.rewards, rollout.values, rollout.dones, rollout.truncated, rollout.bootstrap,
                   rollout.valid, cfg.gamma, cfg.gae_lambda)
    data = TrainingData(rollout.obs, rollout.actions, rollout.log_probs, rollout.values,
                        normalize_advantages(adv, rollout.valid), ret, rollout.masks, rollout.valid)
    return data, explained_variance(ret, rollout.values, rollout.valid)


def ppo_loss(net: TorchActorCritic, batch: TrainingData, cfg: TorchPPOConfig) -> tuple[torch.Tensor, dict]:
    """BEHAVIOUR §11.6: L = Σ_h L_h + value_coef·L_V + β·L_ent, and approx_kl / op-ratio diagnostics."""
    logits, values, _ = net(batch.obs, None, batch.masks)
    m = causal_masks(batch.actions[..., HEAD_OP]) & batch.valid.unsqueeze(-1)
    n_h = m.sum(dim=(0, 1)).clamp(min=1).float()
    n = batch.valid.sum().clamp(min=1)
    log_ratio = torch.where(m, heads_log_prob(logits, batch.actions) - batch.old_log_probs, 0.0)
    ratio = log_ratio.exp()
    adv_h = torch.where(m, batch.advantages.unsqueeze(-1), 0.0)
    surr = torch.minimum(ratio * adv_h, ratio.clamp(1.0 - cfg.clip_ratio, 1.0 + cfg.clip_ratio) * adv_h)
    policy_h = -torch.where(m, surr, 0.0).sum(dim=(0, 1)) / n_h
    v_clipped = batch.old_values + (values - batch.old_values).clamp(-cfg.value_clip, cfg.value_clip)
    sq = 0.5 * torch.maximum((values - batch.returns) ** 2, (v_clipped - batch.returns) ** 2)
    value_loss = torch.where(batch.valid, sq, 0.0).sum() / n
    entropy_h = torch.where(m, heads_entropy(logits, batch.masks), 0.0).sum(dim=(0, 1)) / n_h
    # the weights stay Python floats: a tensor built per call would be a host-to-device copy on every step
    weighted = sum(w * e for w, e in zip(cfg.entropy_head_weights, entropy_h.unbind()))
    loss = policy_h.sum() + cfg.value_coef * value_loss - cfg.beta * weighted
    r_op = ratio[..., HEAD_OP]
    aux = {
        "policy_loss": policy_h.sum().detach(),
        "value_loss": value_loss.detach(),
        "entropy": entropy_h.mean().detach(),
        "approx_kl": (torch.where(m, torch.expm1(log_ratio) - log_ratio, 0.0).sum() / n).detach(),
        "clip_fraction": ((batch.valid & ((r_op - 1.0).abs() > cfg.clip_ratio)).sum() / n).detach(),
        "ratio_mean": (torch.where(batch.valid, r_op, 0.0).sum() / n).detach(),
    }
    return loss, aux


def _head_grad_norms(net: TorchActorCritic) -> dict[str, torch.Tensor]:
    modules = list(net.policy_heads) + [net.value_head]
    names = ACTION_HEADS + ("value",)
    return {
        f"grad_norm_{name}": torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in module.parameters()]))
        for name, module in zip(names, modules)
    }


class TorchPPO:
    """The network, its Adam optimiser (eps 1e-5) and the BEHAVIOUR §11.5 update, in eager PyTorch."""

    def __init__(self, net: TorchActorCritic, cfg: TorchPPOConfig):
        self.net = net
        self.cfg = cfg
        self.params = net.trainable_parameters()
        self.optimizer = torch.optim.Adam(self.params, lr=cfg.lr, betas=(ADAM_B1, ADAM_B2), eps=cfg.adam_eps)

    def _groups(self, valid: torch.Tensor, generator: torch.Generator | None) -> list[torch.Tensor]:
        envs = torch.nonzero(valid.any(dim=1)).squeeze(-1)
        perm = envs[torch.randperm(envs.numel(), generator=generator, device="cpu").to(envs.device)]
        return list(torch.tensor_split(perm, min(self.cfg.num_minibatches, max(envs.numel(), 1))))

    def _step(self, batch: TrainingData) -> tuple[bool, dict]:
        """Loss, gradients, clip; one Adam step unless approx_kl is too high or anything is non-finite."""
        loss, aux = ppo_loss(self.net, batch, self.cfg)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        aux.update(_head_grad_norms(self.net))
        total_norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
        aux["grad_norm"] = total_norm
        stop = ~torch.isfinite(loss) | ~torch.isfinite(total_norm)
        if self.cfg.target_kl is not None:
            stop = stop | (aux["approx_kl"] > self.cfg.kl_stop_factor * self.cfg.target_kl)
        if bool(stop):  # the one host sync per gradient step, as any eager PPO needs for early stopping
            return False, aux
        self.optimizer.step()
        aux["loss"] = loss.detach()
        return True, aux

    def update(self, rollout: TorchRollout, generator: torch.Generator | None = None) -> dict[str, Any]:
        """update_epochs × num_minibatches gradient steps over env groups; metrics as tensors."""
        data, ev = build_training_data(rollout, self.cfg)
        metrics: dict[str, Any] = {"explained_variance": ev, "n_steps_taken": 0}
        for _ in range(self.cfg.update_epochs):
            for idx in self._groups(rollout.valid, generator):
                took, aux = self._step(data.rows(idx))
                metrics.update(aux)
                if not took:
                    return metrics
                metrics["n_steps_taken"] += 1
        return metrics
