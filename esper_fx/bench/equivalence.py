"""Checks that the PyTorch reference computes the same function as the JAX controller.

A benchmark ratio only means something if both sides do the same work, so every `act` / `update`
benchmark run records these differences next to its timings, and tests/esper_fx/test_bench.py asserts
them: with the JAX parameters copied into the torch network, logits, values and carries agree on random
inputs (a full-sequence scan, and one acting step through `rl.ppo.act`), and one PPO update from the same rollout gives the same
loss terms and the same parameters afterwards.
"""

from __future__ import annotations

import copy
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import torch

from esper_fx.bench import fixtures as F
from esper_fx.bench import torch_reference as T
from rl import ppo

LOSS_TERMS = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl")


def _cpu(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def _max_abs(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def act_differences(pair: F.ControllerPair, seed: int, n_envs: int = F.N_ENVS) -> dict[str, float]:
    """Max |JAX − torch| over one acting step through `rl.ppo.act` (the jitted path the benchmark times):
    the value, the new carry, and the per-head log-probs of the actions JAX sampled."""
    rng = np.random.default_rng(seed)
    obs = F.random_obs(rng, n_envs)
    masks = F.default_masks(n_envs)
    out = ppo.act(pair.state, jnp.asarray(obs), F.jax_masks(masks), pair.network.initial_carry(n_envs),
                  jax.random.PRNGKey(seed))
    device = next(pair.torch_net.parameters()).device
    obs_t, = F.torch_tensors([obs], device)
    with torch.no_grad():
        logits, value, carry = pair.torch_net.step(obs_t, pair.torch_net.initial_carry(n_envs, device),
                                                   F.torch_tensors(masks, device))
        actions = torch.from_numpy(np.asarray(out.actions, np.int64)).to(device)
        log_probs = T.heads_log_prob(logits, actions)
    return {
        "log_probs": _max_abs(out.log_probs, _cpu(log_probs)),
        "value": _max_abs(out.value, _cpu(value)),
        "carry": max(_max_abs(a, _cpu(b)) for a, b in zip(out.carry, carry)),
    }


@partial(jax.jit, static_argnames=("network",))
def _apply(network, params, obs, carry, masks):
    return network.apply({"params": params}, obs, carry, masks)


def forward_differences(pair: F.ControllerPair, seed: int, n_envs: int = F.N_ENVS,
                        seq_len: int = F.EPISODE_LENGTH) -> dict[str, float]:
    """Max |JAX − torch| of masked logits, values and final carries over a full-sequence scan from zeros."""
    rng = np.random.default_rng(seed)
    obs = F.random_obs(rng, n_envs, seq_len)
    masks = F.default_masks(n_envs, (seq_len,))
    out, carry = _apply(pair.network, pair.state.params, jnp.asarray(obs), pair.network.initial_carry(n_envs),
                        F.jax_masks(masks))
    device = next(pair.torch_net.parameters()).device
    with torch.no_grad():
        t_logits, t_value, t_carry = pair.torch_net(F.torch_tensors([obs], device)[0], None,
                                                    F.torch_tensors(masks, device))
    return {
        "logits": max(_max_abs(a, _cpu(b)) for a, b in zip(out.logits, t_logits)),
        "value": _max_abs(out.value, _cpu(t_value)),
        "carry": max(_max_abs(a, _cpu(b)) for a, b in zip(carry, t_carry)),
    }


def _param_difference(jax_params, torch_net: T.TorchActorCritic) -> float:
    """Max |Δ| between updated JAX params (copied into a fresh torch net) and the updated torch net."""
    mirror = T.TorchActorCritic(F.OBS_DIM, F.NUM_SLOTS, F.NUM_BLUEPRINTS)
    T.load_flax_params(mirror, jax.device_get(jax_params))
    theirs = dict(torch_net.named_parameters())
    return max(_max_abs(p.detach().numpy(), _cpu(theirs[name]))
               for name, p in mirror.named_parameters())


def update_differences(pair: F.ControllerPair, seed: int, n_envs: int = F.N_ENVS) -> dict[str, float]:
    """One PPO update on both sides from the same rollout: loss terms, steps taken, parameter drift."""
    data = F.collect_rollout(pair, n_envs, seed)
    device = next(pair.torch_net.parameters()).device
    new_state, metrics = ppo.update(pair.state, F.jax_rollout(data), jax.random.PRNGKey(seed), pair.cfg,
                                      pair.n_envs)
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
