"""Checks that the PyTorch reference computes the same function as the JAX controller.

A benchmark ratio only means something if both sides do the same work, so every `act` / `update`
benchmark run records these differences next to its timings, and tests/esper_fx/test_bench.py asserts
them: with the JAX parameters copied into the torch network, logits, values and carries agree on random
inputs (full-sequence scan and single step), and one PPO update from the same rollout gives the same
loss terms and the same parameters afterwards.
"""

from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import numpy as np
import torch

from esper_fx.bench import fixtures as F
from esper_fx.bench import torch_reference as T
from rl import ppo

LOSS_TERMS = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl")


def _max_abs(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def forward_differences(pair: F.ControllerPair, seed: int, n_envs: int = 4,
                        seq_len: int = F.EPISODE_LENGTH) -> dict[str, float]:
    """Max |JAX − torch| of masked logits, values and final carries: a full-sequence scan and one step."""
    rng = np.random.default_rng(seed)
    obs = F.random_obs(rng, n_envs, seq_len)
    masks = F.default_masks(n_envs, (seq_len,))
    params = {"params": pair.state.params}
    carry0 = pair.network.initial_carry(n_envs)
    out, carry = pair.network.apply(params, jnp.asarray(obs), carry0, F.jax_masks(masks))
    step_masks = tuple(m[:, 0] for m in masks)
    step_out, step_carry = pair.network.apply(params, jnp.asarray(obs[:, 0]), carry0, F.jax_masks(step_masks),
                                              method=pair.network.step)
    device = next(pair.torch_net.parameters()).device
    with torch.no_grad():
        t_logits, t_value, t_carry = pair.torch_net(F.torch_tensors([obs], device)[0], None,
                                                    F.torch_tensors(masks, device))
        s_logits, s_value, s_carry = pair.torch_net.step(F.torch_tensors([obs[:, 0]], device)[0],
                                                         pair.torch_net.initial_carry(n_envs, device),
                                                         F.torch_tensors(step_masks, device))
    cpu = lambda t: t.detach().cpu().numpy()  # noqa: E731
    return {
        "logits": max(_max_abs(a, cpu(b)) for a, b in zip(out.logits, t_logits)),
        "value": _max_abs(out.value, cpu(t_value)),
        "carry": max(_max_abs(a, cpu(b)) for a, b in zip(carry, t_carry)),
        "step_logits": max(_max_abs(a, cpu(b)) for a, b in zip(step_out.logits, s_logits)),
        "step_value": _max_abs(step_out.value, cpu(s_value)),
        "step_carry": max(_max_abs(a, cpu(b)) for a, b in zip(step_carry, s_carry)),
    }


def _param_difference(jax_params, torch_net: T.TorchActorCritic) -> float:
    """Max |Δ| between updated JAX params (copied into a fresh torch net) and the updated torch net."""
    mirror = T.TorchActorCritic(F.OBS_DIM, F.NUM_SLOTS, F.NUM_BLUEPRINTS)
    T.load_flax_params(mirror, jax.device_get(jax_params))
    theirs = dict(torch_net.named_parameters())
    return max(_max_abs(p.detach().numpy(), theirs[name].detach().cpu().numpy())
               for name, p in mirror.named_parameters())


def update_differences(pair: F.ControllerPair, seed: int, n_envs: int = 4) -> dict[str, float]:
    """One PPO update on both sides from the same rollout: loss terms, steps taken, parameter drift."""
    data = F.collect_rollout(pair, n_envs, seed)
    device = next(pair.torch_net.parameters()).device
    new_state, metrics = ppo.update(pair.state, F.jax_rollout(data), jax.random.PRNGKey(seed), pair.cfg)
    reference = T.TorchPPO(copy.deepcopy(pair.torch_net), F.torch_config(pair.cfg))
    t_metrics = reference.update(F.torch_rollout(data, device), torch.Generator().manual_seed(seed))
    out = {f"{term}_jax": float(metrics[term]) for term in LOSS_TERMS}
    out.update({f"{term}_torch": float(t_metrics[term]) for term in LOSS_TERMS})
    out.update({f"{term}_abs_diff": abs(out[f"{term}_jax"] - out[f"{term}_torch"]) for term in LOSS_TERMS})
    out["steps_jax"] = int(metrics["n_steps_taken"])
    out["steps_torch"] = int(t_metrics["n_steps_taken"])
    out["params_before_abs_diff"] = _param_difference(pair.state.params, pair.torch_net)
    out["params_after_abs_diff"] = _param_difference(new_state.params, reference.net)
    out["params_step_max"] = _param_difference(new_state.params, pair.torch_net)  # how far one step moved them
    return out
