"""`host`: the env-epoch against bare eager training loops and the FLOP floor; time to first action.

For each preset (`--preset`, default quickstart and shapes10 at the sizes of `presets.py`) at E = 4:

- **env_epoch**: `EnvPool.train_and_validate()`, everything the pool does in an epoch for E envs: batch building
  (gather + augmentation on the device), the training steps interleaved across envs with their
  accumulators and gradient statistics, the fused validation + counterfactual pass, the single read-back,
  the governor, the tracker and the signals.
- **bare_cl / bare_nchw**: the loop a plain PyTorch script would run over the *same* models (the very
  modules and SGD optimisers the pool just built) and the *same* batches (the epoch's augmented batches
  and the validation set, built beforehand and untimed): per env, forward, cross-entropy, backward, step
  for every training batch, then a validation pass in inference mode, loss and correct counts kept on the
  device. `bare_cl` keeps the models and batches channels_last, `bare_nchw` converts both to NCHW first.
- **batches**: building the epoch's training batches alone (part of env_epoch, not of the bare loops).
- **floor**: the epoch's multiply-adds counted per layer of the model (`floor.py`) at the single-thread
  matmul rate measured in the same run.

Every timed epoch starts from freshly built models (`pool.reset`, untimed). The candidates are timed
interleaved. Ratios: env_epoch / bare_cl (target ≤ 1.1), env-epoch / floor (target ≤ 3), where an
env-epoch is one env's share (the E-env epoch / E). Time to first action (cold and warm persistent JAX
compilation cache, fresh processes) comes from `first_action.py`; `torch_compile_case` times the bare
loop of the first preset under `torch.compile` against eager, with its compile time (both skipped with
--quick).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from esper_fx.bench import first_action
from esper_fx.bench.floor import epoch_macs, layer_macs, matmul_rate
from esper_fx.bench.presets import DEFAULT_PRESETS, N_ENVS, bench_config
from esper_fx.bench.settings import BenchSettings, Reps
from esper_fx.bench.timing import Candidate, measure_interleaved
from esper_fx.training.pools import pool_settings
from hosts.data.task_data import train_batch
from hosts.env import EnvPool

REPS = Reps(warmup=2, reps=9)
TARGET_OVER_BARE = 1.10  # env-epoch at most 1.1× the bare channels_last loop
TARGET_OVER_FLOOR = 3.0  # and at most 3× the FLOP floor
TARGET_FIRST_ACTION_WARM_S = 7.0  # time to first action at E = 4 with a warm compilation cache


# ------------------------------------------------------------------------------------------
# the bare loops
# ------------------------------------------------------------------------------------------


def epoch_batches(pool: EnvPool) -> tuple[list[list[tuple]], list[list[tuple]]]:
    """The training batches of epoch 1 (per env, per step) and the validation batches (per env), exactly
    as the pool builds them after `reset`: the same plan, gather and augmentation."""
    feed = pool.data.feed
    plan = feed.plan(pool.batch_index, 1, pool.n_active)
    train, val = [], []
    for env in pool.envs:
        data = feed.data_for_env(env.index)
        on_device = plan.to(env.device)
        train.append([train_batch(data, on_device, env.index, k) for k in range(plan.num_steps)])
        val.append(list(feed.val_batches(env.index)))
    return train, val


def build_batches(pool: EnvPool) -> list:
    """Only the training batches of an epoch (the `batches` figure)."""
    feed = pool.data.feed
    plan = feed.plan(pool.batch_index, 1, pool.n_active)
    on_device = plan.to(pool.envs[0].device)
    return [train_batch(feed.data_for_env(env.index), on_device, env.index, k)
            for k in range(plan.num_steps) for env in pool.envs]


def _nchw(batches: list[tuple]) -> list[tuple]:
    return [(x.contiguous() if x.dim() == 4 else x, y) for x, y in batches]


class BareLoop:
    """The pool's freshly built models and the epoch's batches, in one layout, for a plain loop."""

    def __init__(self, pool: EnvPool, channels_last: bool) -> None:
        self.pool, self.channels_last = pool, channels_last
        self.items: list = []

    def prepare(self) -> None:
        self.pool.build_envs(0)
        train, val = epoch_batches(self.pool)
        if not self.channels_last:
            train, val = [_nchw(b) for b in train], [_nchw(b) for b in val]
            for env in self.pool.envs:
                env.model.to(memory_format=torch.contiguous_format)
        self.items = [(env.model, env.host_optimizer, t, v) for env, t, v in zip(self.pool.envs, train, val)]

    def run(self) -> list[torch.Tensor]:
        sums = []
        for model, optimizer, train, val in self.items:
            sums += bare_epoch(model, optimizer, train, val)
        return sums


def bare_epoch(model, optimizer, train: list[tuple], val: list[tuple]) -> list[torch.Tensor]:
    """One env's plain epoch: SGD steps over `train`, then validation in inference mode; device sums."""
    device = next(model.parameters()).device
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    model.train()
    for x, y in train:
        optimizer.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
        loss_sum += loss.detach()
        correct += (logits.detach().argmax(dim=1) == y).sum()
    model.eval()
    val_loss = torch.zeros((), device=device)
    val_correct = torch.zeros((), dtype=torch.int64, device=device)
    with torch.inference_mode():
        for x, y in val:
            logits = model(x)
            val_loss += F.cross_entropy(logits, y, reduction="sum")
            val_correct += (logits.argmax(dim=1) == y).sum()
    return [loss_sum, correct, val_loss, val_correct]


# ------------------------------------------------------------------------------------------
# one preset
# ------------------------------------------------------------------------------------------


def _floor(pool: EnvPool, rate: float) -> dict:
    """Per env-epoch: multiply-adds, FLOPs and the time at `rate` FLOP/s."""
    pool.build_envs(0)
    feed = pool.data.feed
    model = pool.envs[0].model
    x, _ = next(iter(feed.val_batches(0)))
    layers = layer_macs(model, x[:1])
    train_samples = feed.steps_per_epoch * feed.batch_per_env
    macs = epoch_macs(layers, train_samples, feed.n_val)
    return {"layers": [{"name": m.name, "macs_per_sample": m.macs, "input_grad": m.input_grad} for m in layers],
            "train_samples": train_samples, "val_samples": feed.n_val, "macs": macs, "flops": 2 * macs,
            "floor_s": 2 * macs / rate}


def _case(settings: BenchSettings, preset: str, rate: float) -> dict:
    device = str(settings.device.torch_device)
    config = bench_config(preset, n_envs=N_ENVS, device=device, seed=settings.seed, quick=settings.quick)
    pool = EnvPool(pool_settings(config))
    sync = settings.device.torch_sync
    reset = lambda: pool.build_envs(0)  # noqa: E731  (fresh models for each timed epoch, untimed)
    cl, nchw = BareLoop(pool, channels_last=True), BareLoop(pool, channels_last=False)
    candidates = {
        "env_epoch": Candidate(pool.train_and_validate, sync, prepare=reset),
        "bare_cl": Candidate(cl.run, sync, prepare=cl.prepare),
        "bare_nchw": Candidate(nchw.run, sync, prepare=nchw.prepare),
        "batches": Candidate(lambda: build_batches(pool), sync, prepare=reset),
    }
    reps = settings.reps(REPS)
    timings = measure_interleaved(candidates, reps.warmup, reps.reps)
    floor = _floor(pool, rate)
    n = pool.n_active
    env_epoch, bare_cl = timings["env_epoch"], timings["bare_cl"]
    return {
        "preset": preset,
        "n_envs": n,
        "task": config.task.value,
        "steps_per_env": pool.steps_per_epoch,
        "batch_per_env": pool.data.feed.batch_per_env,
        "val_samples": pool.data.feed.n_val,
        **{name: t.as_dict() for name, t in timings.items()},
        "ratio": env_epoch.median_s / bare_cl.median_s,
        "ratio_of_minima": env_epoch.min_s / bare_cl.min_s,
        "env_epoch_over_bare_nchw": env_epoch.median_s / timings["bare_nchw"].median_s,
        "bare_nchw_over_bare_cl": timings["bare_nchw"].median_s / bare_cl.median_s,
        "env_epochs_per_s": n / env_epoch.median_s,
        "env_epoch_s": env_epoch.median_s / n,
        "floor": floor,
        "env_epoch_over_floor": env_epoch.median_s / n / floor["floor_s"],
        "env_epoch_over_floor_minimum": env_epoch.min_s / n / floor["floor_s"],
        "bare_cl_over_floor": bare_cl.median_s / n / floor["floor_s"],
        "batches_share": timings["batches"].median_s / env_epoch.median_s,
    }


def torch_compile_case(settings: BenchSettings, preset: str) -> dict:
    """The bare channels_last loop of one env with its model under `torch.compile` (inductor), against
    the same loop eager: the compile time (first step and first validation batch) and the epoch times.
    The env pool does not compile its hosts: on this CPU it lost (see docs/PERFORMANCE.md)."""
    device = str(settings.device.torch_device)
    pool = EnvPool(pool_settings(bench_config(preset, n_envs=N_ENVS, device=device, seed=settings.seed,
                                              quick=settings.quick)))
    pool.build_envs(0)
    train, val = epoch_batches(pool)
    env = pool.envs[0]
    compiled = torch.compile(env.model)
    started = time.perf_counter()
    bare_epoch(compiled, env.host_optimizer, train[0][:1], val[0][:1])
    settings.device.torch_sync()
    compile_s = time.perf_counter() - started
    run = lambda model: lambda: bare_epoch(model, env.host_optimizer, train[0], val[0])  # noqa: E731
    reps = settings.reps(REPS)
    timings = measure_interleaved({"eager": Candidate(run(env.model), settings.device.torch_sync),
                                   "compiled": Candidate(run(compiled), settings.device.torch_sync)},
                                  reps.warmup, reps.reps)
    return {"preset": preset, "compile_s": compile_s, "eager": timings["eager"].as_dict(),
            "compiled": timings["compiled"].as_dict(),
            "compiled_over_eager": timings["compiled"].median_s / timings["eager"].median_s}


def _first_action(settings: BenchSettings, preset: str) -> dict:
    device = str(settings.device.torch_device)
    return first_action.measure(preset, n_envs=N_ENVS, device=device, seed=settings.seed, quick=settings.quick)


def _headline(cases: list[dict], starts: list[dict], compiled) -> str:
    parts = [f"{c['preset']} E={c['n_envs']}: {c['env_epochs_per_s']:.2f} env-epochs/s, "
             f"{c['ratio']:.2f}× bare channels_last (NCHW {c['bare_nchw_over_bare_cl']:.2f}×), "
             f"{c['env_epoch_over_floor']:.2f}× the FLOP floor" for c in cases]
    parts += [f"first action {s['preset']}: cold {s['cold']['total_s']:.1f} s, warm {s['warm']['total_s']:.1f} s"
              for s in starts]
    if isinstance(compiled, dict):
        parts.append(f"torch.compile ({compiled['preset']}, one env): {compiled['compile_s']:.0f} s to compile, "
                     f"{compiled['compiled_over_eager']:.2f}× the eager epoch")
    return "; ".join(parts)


def run(settings: BenchSettings) -> dict:
    rate = matmul_rate(settings.device.torch_device, settings.device.torch_sync)
    presets = settings.presets or DEFAULT_PRESETS
    cases = [_case(settings, preset, rate) for preset in presets]
    starts = [] if settings.quick else [_first_action(settings, preset) for preset in presets]
    compiled = "skipped with --quick" if settings.quick else torch_compile_case(settings, presets[0])
    met = {
        "over_bare": all(c["ratio"] <= TARGET_OVER_BARE for c in cases),
        "over_floor": all(c["env_epoch_over_floor"] <= TARGET_OVER_FLOOR for c in cases),
        "first_action_warm": all(s["warm"]["total_s"] <= TARGET_FIRST_ACTION_WARM_S for s in starts) if starts
        else None,
    }
    return {
        "what": f"one epoch of E={N_ENVS} envs through EnvPool.train_and_validate vs bare eager loops and the FLOP floor; "
                "time to first action",
        "measured": "hosts.env.EnvPool.train_and_validate (E envs)",
        "reference": "bare channels_last eager loop over the same models and batches (bench_host.bare_epoch)",
        "ratio_definition": "env_epoch median / bare_cl median",
        "columns": {"case": "preset", "measured": "env_epoch", "reference": "bare_cl"},
        "matmul_flops_per_s": rate,
        "cases": cases,
        "first_action": starts if starts else "skipped with --quick",
        "torch_compile": compiled,
        "target": {"max_over_bare": TARGET_OVER_BARE, "max_over_floor": TARGET_OVER_FLOOR,
                   "max_first_action_warm_s": TARGET_FIRST_ACTION_WARM_S, "met": all(v is not False for v in met.values()),
                   "met_by_target": met},
        "headline": _headline(cases, starts, compiled),
    }
