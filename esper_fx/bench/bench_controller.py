"""`act` and `update`: the jitted JAX controller (`rl.ppo`) vs the PyTorch eager reference.

- act: one policy step (network step, four masked categorical samples with per-head log-probs, value,
  new carry) for E envs. JAX: `rl.ppo.act` (jitted). Torch: `torch_reference.act` under
  `torch.inference_mode`. Ratio = torch / jax.
- update: one PPO update on an E×25 rollout (GAE, advantage normalisation, full-sequence re-run, the
  BEHAVIOUR §11.6 loss, KL check, grad-norm clip, one Adam step: 1 epoch × 1 minibatch). JAX: `rl.ppo.update`
  (jitted, pure: the same input state every repetition). Torch: `TorchPPO.update`, whose parameters and
  optimiser state are restored before every repetition, outside the timed region. Ratio = torch / jax.

Both sides start from the same parameters and see the same inputs; every run records the equivalence
differences (`equivalence.py`) and the number of gradient steps each side took.
"""

from __future__ import annotations

import copy
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch

from esper_fx.bench import equivalence
from esper_fx.bench import fixtures as F
from esper_fx.bench import torch_reference as T
from esper_fx.bench.settings import BenchSettings, Reps
from esper_fx.bench.timing import Candidate, measure_interleaved, ratio
from rl import ppo

ACT_ENVS = (1, 4, 16, 64)
ACT_ENVS_QUICK = (4,)
UPDATE_ENVS = (4, 16, 64)
UPDATE_ENVS_QUICK = (4,)
ACT_REPS = Reps(warmup=50, reps=1000)
UPDATE_REPS = Reps(warmup=5, reps=100)
TARGET_RATIO = 3.0  # the architecture's claim: JAX >= 3x faster than eager torch at E = 4 on the CPU
TARGET_ENVS = 4


def _first_call_s(candidate: Candidate) -> float:
    """Wall time of the very first call (for JAX: tracing + XLA compilation)."""
    candidate.prepare()
    start = time.perf_counter()
    candidate.sync(candidate.run())
    return time.perf_counter() - start


def _timed_pair(settings: BenchSettings, jax_c: Candidate, torch_c: Candidate, full: Reps) -> dict:
    first = {"jax": _first_call_s(jax_c), "torch": _first_call_s(torch_c)}
    reps = settings.reps(full)
    timings = measure_interleaved({"jax": jax_c, "torch": torch_c}, reps.warmup, reps.reps)
    return {
        "jax": timings["jax"].as_dict(),
        "torch": timings["torch"].as_dict(),
        "ratio": ratio(timings["torch"], timings["jax"]),
        "ratio_of_minima": timings["torch"].min_s / timings["jax"].min_s,  # the least-disturbed calls
        "first_call_s": first,
    }


def _headline(cases: list[dict], what: str, key: str) -> tuple[str, dict]:
    target = next((c for c in cases if c["n_envs"] == TARGET_ENVS), None)
    met = target is not None and target["ratio"] >= TARGET_RATIO
    ratios = ", ".join(f"E={c['n_envs']}: {c['ratio']:.2f}×" for c in cases)
    text = f"{what} torch/jax {ratios} (target ≥ {TARGET_RATIO}× at {key}={TARGET_ENVS}: {'met' if met else 'not met'})"
    return text, {"case": f"n_envs={TARGET_ENVS}", "min_ratio": TARGET_RATIO, "met": met}


# ------------------------------------------------------------------------------------------
# act
# ------------------------------------------------------------------------------------------


def _act_case(settings: BenchSettings, pair: F.ControllerPair, n_envs: int) -> dict:
    device = settings.device
    rng = np.random.default_rng(settings.seed + n_envs)
    obs = F.random_obs(rng, n_envs)
    masks = F.default_masks(n_envs)
    obs_j, masks_j, carry_j = jnp.asarray(obs), F.jax_masks(masks), pair.network.initial_carry(n_envs)
    key = jax.random.PRNGKey(settings.seed)
    obs_t, = F.torch_tensors([obs], device.torch_device)
    masks_t = F.torch_tensors(masks, device.torch_device)
    carry_t = pair.torch_net.initial_carry(n_envs, device.torch_device)
    gen = torch.Generator(device.torch_device).manual_seed(settings.seed)
    jax_c = Candidate(lambda: ppo.act(pair.state, obs_j, masks_j, carry_j, key), device.jax_sync)
    torch_c = Candidate(lambda: T.act(pair.torch_net, obs_t, masks_t, carry_t, gen), device.torch_sync)
    return {"n_envs": n_envs, **_timed_pair(settings, jax_c, torch_c, ACT_REPS)}


def _act_equivalence(pair: F.ControllerPair, settings: BenchSettings) -> dict:
    """The acting step always; the full-sequence logits too in a full run (one more XLA compile)."""
    out = {f"step_{k}": v for k, v in equivalence.act_differences(pair, settings.seed).items()}
    if not settings.quick:
        out.update({f"sequence_{k}": v for k, v in equivalence.forward_differences(pair, settings.seed).items()})
    return out


def run_act(settings: BenchSettings) -> dict:
    pair = F.make_pair(settings.seed, settings.device.torch_device)
    cases = [_act_case(settings, pair, e) for e in settings.sizes(ACT_ENVS, ACT_ENVS_QUICK)]
    headline, target = _headline(cases, "one policy step:", "E")
    return {
        "what": "one policy step (network, 4 masked categorical samples + log-probs, value, carry) for E envs",
        "measured": "rl.ppo.act (jitted JAX)",
        "reference": "esper_fx.bench.torch_reference.act (PyTorch eager, inference_mode)",
        "ratio_definition": "torch median / jax median",
        "columns": {"case": "n_envs", "measured": "jax", "reference": "torch"},
        "cases": cases,
        "equivalence_max_abs_diff": _act_equivalence(pair, settings),
        "target": target,
        "headline": headline,
    }


# ------------------------------------------------------------------------------------------
# update
# ------------------------------------------------------------------------------------------


class _Restorer:
    """Puts the reference's parameters and Adam state back to a snapshot (untimed `prepare`)."""

    def __init__(self, reference: T.TorchPPO):
        self.reference = reference
        self.params = [p.detach().clone() for p in reference.params]
        self.optimizer_state = copy.deepcopy(reference.optimizer.state_dict())

    def __call__(self) -> None:
        with torch.no_grad():
            for p, saved in zip(self.reference.params, self.params):
                p.copy_(saved)
        self.reference.optimizer.load_state_dict(copy.deepcopy(self.optimizer_state))


def _update_case(settings: BenchSettings, pair: F.ControllerPair, n_envs: int) -> dict:
    device = settings.device
    data = F.collect_rollout(pair, n_envs, settings.seed + n_envs)
    rollout_j = F.jax_rollout(data)
    rollout_t = F.torch_rollout(data, device.torch_device)
    key = jax.random.PRNGKey(settings.seed)
    reference = T.TorchPPO(copy.deepcopy(pair.torch_net), F.torch_config(pair.cfg))
    gen = torch.Generator().manual_seed(settings.seed)
    last = {}

    def jax_update():
        last["jax"] = ppo.update(pair.state, rollout_j, key, pair.cfg, pair.n_envs)
        return last["jax"]

    def torch_update():
        last["torch"] = reference.update(rollout_t, gen)
        return last["torch"]

    jax_c = Candidate(jax_update, device.jax_sync)
    torch_c = Candidate(torch_update, device.torch_sync, prepare=_Restorer(reference))
    timed = _timed_pair(settings, jax_c, torch_c, UPDATE_REPS)
    steps = {"jax": int(last["jax"][1]["n_steps_taken"]), "torch": int(last["torch"]["n_steps_taken"])}
    if steps["jax"] != steps["torch"]:
        raise RuntimeError(f"the two updates took different numbers of gradient steps: {steps}")
    return {"n_envs": n_envs, "episode_length": F.EPISODE_LENGTH, **timed, "gradient_steps": steps}


def run_update(settings: BenchSettings) -> dict:
    pair = F.make_pair(settings.seed, settings.device.torch_device)
    cases = [_update_case(settings, pair, e) for e in settings.sizes(UPDATE_ENVS, UPDATE_ENVS_QUICK)]
    headline, target = _headline(cases, f"one PPO update on E×{F.EPISODE_LENGTH}:", "E")
    return {
        "what": f"one PPO update (1 epoch x 1 minibatch = 1 gradient step) on an E x {F.EPISODE_LENGTH} rollout",
        "measured": "rl.ppo.update (jitted JAX)",
        "reference": "esper_fx.bench.torch_reference.TorchPPO.update (PyTorch eager, Adam eps 1e-5, clip 0.5)",
        "ratio_definition": "torch median / jax median",
        "columns": {"case": "n_envs", "measured": "jax", "reference": "torch"},
        "cases": cases,
        "equivalence": equivalence.update_differences(pair, settings.seed),
        "target": target,
        "headline": headline,
    }
