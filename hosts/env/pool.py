"""`EnvPool`: E environments advancing in lock-step, one RL step per host epoch (BEHAVIOUR §7.2–§7.5).

Per episode every env gets a fresh model, host optimizer, governor, tracker, counters, RNG stream and,
for fp16 AMP, its own GradScaler; on CUDA each env index keeps one stream for the pool's life
(`hosts.env.epoch_compute`: which stream waits for which, and why freeing memory is safe).

The pool's interface to the loop is two calls (ARCHITECTURE §2):

    signals = pool.begin(b, n_active)        # fresh envs for batch b, then epoch 1: its signals
    result, signals = pool.step(actions)      # the epoch's actions -> ApplyResult, and the next epoch's
                                              #   signals (None after the last epoch, when
                                              #   result.bootstrap_signals holds the post-action signals)

`actions` has one form from the controller to the slots: a numpy integer array [E, 5], its columns in
`contracts.actions.ACTION_HEADS` order (slot, blueprint, blend, op, tempo); a list, a torch tensor, another
shape or dtype, or an index outside its head raises (`hosts.env.actions.checked_actions`), and
`ApplyResult.actions` is a read-only int32 copy of it.

Underneath, an epoch runs in phases, each public so tests and benchmarks can drive them one by one:

    pool.build_envs(b)               # fresh envs; the epoch counter back to 0
    pool.train_epoch()               # BEHAVIOUR §7.3 phase 1: training steps interleaved across envs
    pool.validate()                  # phases 2–7: fused validation + counterfactual pass, the one
                                     #   host sync, governor (rollback now), record_accuracy,
                                     #   contributions, ratio EMA + telemetry, tracker.update
    signals = pool.signals()         # phase 8: the SIGNAL_FIELDS dict (post-rollback, pre-action)
                                     #   (the three together: pool.train_and_validate())
    result = pool.apply(actions, bootstrap=(t == T))   # step 10: actions, then step_epoch

A pool may run a contiguous slice of the E envs (`env_ids`, for `esper_fx.distributed.pool`: one slice per Ray
worker): its envs keep their global indices, so their models, RNG streams, data batches and events are
exactly those of the same envs in a whole pool; its signals, actions and results cover its slice only.

`apply` is `execute_actions` + (optionally) `peek_signals` + `finish_epoch`; `peek_signals()` called
between the first and the last gives the same post-action bootstrap signals as `apply(..., bootstrap=True)`
(BEHAVIOUR §7.5). `episode_results()` gives the per-env totals.

This module is the orchestration; the work on each env lives beside it: `build.py` builds an env for an
episode, `epoch_compute.py` runs its training steps, validation and the epoch's one readback on its stream,
`after_validation.py` records what the readback says (governor, contributions, ratios, tracker), and
`actions.py` checks and executes the actions and steps the slots.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from esper_fx.contracts.actions import head_sizes
from esper_fx.contracts.stages import SeedStage
from hosts.data.feed import PoolData, build_pool_data
from hosts.env.actions import checked_actions, execute_action, step_slots
from hosts.env.after_validation import after_validation
from hosts.env.build import build_env
from hosts.env.compute import ComputeMeter, model_costs
from hosts.env.lr_schedule import lr_factor
from hosts.env.epoch_compute import (
    EnvStreams,
    EpochWork,
    amp_settings,
    caller_streams,
    counterfactual_slots,
    read_back,
    record_on,
    train_step,
    validate_batch,
    wait_for_caller,
)
from hosts.env.state import ApplyResult, EnvState, EpisodeResult
from hosts.seeds.lifecycle import SeedClock
from hosts.signals.assembly import EnvView, SignalLayout, assemble_signals
from hosts.signals.slots import count_available_slots, count_seeds
from hosts.settings import PoolSettings
from hosts.tasks import get_task

BATCH_SEED_STRIDE = 10000  # base_seed = seed + 10000·b (BEHAVIOUR §7.2 item 2)
ENV_SEED_STRIDE = 1000  # env i seeds its RNGs with base_seed + 1000·i

# The epoch's phases, in order; each public call checks it runs in the right one.
_RESET, _TRAINED, _VALIDATED, _EXECUTED, _STEPPED = "built", "trained", "validated", "executed", "stepped"


# ------------------------------------------------------------------------------------------
# the pool
# ------------------------------------------------------------------------------------------


class EnvPool:
    """E envs of one task: build once per run, `begin(b)` once per episode batch (`contracts.pool.EpisodePool`).

    Every option comes from `settings`, the run's `hosts.settings.PoolSettings` (esper_fx builds it from
    the run's TrainingConfig, its devices resolved). `data` is the run's pre-built
    `hosts.data.feed.DataFeed` (or a `hosts.data.task_data.TaskData`, wrapped in a feed with the settings;
    None builds a feed from the settings), so datasets are built once per run. `nan_faults` lists (env, epoch)
    pairs at which the env's host is poisoned with NaN after training (fault injection: the governor then
    panics and rolls back); `inject_nan` adds one. `use_streams=False` runs every CUDA env on the default
    stream (for comparisons; streams are the default on CUDA). `env_ids`: the contiguous global env
    indices this pool runs (default: all of 0..E−1); `build_envs(b, n_active)` builds those below n_active.
    """

    def __init__(
        self,
        settings: PoolSettings,
        *,
        data=None,
        nan_faults: Iterable[tuple[int, int]] = (),
        use_streams: bool = True,
        env_ids: Sequence[int] | None = None,
    ) -> None:
        self.settings = settings
        self.task = get_task(settings.task)  # its data and its shared facts serve every task of a mix
        self.slot_ids: tuple[str, ...] = settings.slot_ids
        self.enabled: tuple[str, ...] = settings.enabled_slots
        self.menu: tuple[str, ...] = settings.menu
        self.head_sizes = head_sizes(len(self.slot_ids), len(self.menu))  # each action head's size, heads in order
        self.max_epochs = settings.max_epochs
        self.policy_device = settings.policy_device
        self._amp = {d: amp_settings(settings.amp, settings.amp_dtype, d)
                     for d in dict.fromkeys(settings.env_devices)}
        self.data: PoolData = build_pool_data(settings, self.task, data)
        # the seed clock every slot of every episode runs on (the tasks of a mix share the lifecycle horizon)
        self.clock = SeedClock.for_run(settings.lifecycle_timings, self.episode_steps)
        self.layout = SignalLayout(
            slot_ids=self.slot_ids, enabled=self.enabled, menu=self.menu, max_epochs=settings.max_epochs,
            max_seeds=settings.max_seeds, use_telemetry=settings.use_telemetry, min_cull_age=settings.cull_age,
            one_seed_at_a_time=settings.one_seed_at_a_time, timings=self.clock.timings,
            germination_deadline=settings.germination_deadline, log_params=settings.observe_log_params,
            withheld=settings.observe_withheld, fit_gap=settings.observe_fit_gap)
        self._nan_faults = {(int(e), int(t)) for e, t in nan_faults}
        self.use_streams = bool(use_streams)
        self.streams = EnvStreams(self.use_streams)
        self.env_ids: tuple[int, ...] = _check_env_ids(env_ids, settings.n_envs)
        self.n_running = 0  # envs running this episode batch across the whole pool (all slices)
        self.envs: list[EnvState] = []
        self.batch_index: int | None = None
        self.epoch = 0
        self._phase: str | None = None
        self._last_actions: np.ndarray | None = None  # the epoch's actions as `execute_actions` checked them
        self._host_costs: dict[str, Any] = {}  # task -> its host's hosts.env.compute.ModelCosts; False: not countable
        self._steps_done = 0
        # seconds building envs, in the training and in the validation phase (validate holds the epoch's one
        # host sync), summed over the pool's life: the loop's time breakdown reads them
        # (esper_fx.outputs.time_breakdown)
        self.phase_s = {"build_s": 0.0, "train_s": 0.0, "validate_s": 0.0}

    # ---------------------------------------------------------------- simple views
    @property
    def n_envs(self) -> int:
        return self.settings.n_envs

    @property
    def n_active(self) -> int:
        return len(self.envs)

    @property
    def steps_per_epoch(self) -> int:
        return self.data.steps_per_epoch

    # ---------------------------------------------------------------- the rest of contracts.pool.EpisodePool
    n_workers = 0  # no Ray workers: the envs run in this process

    @property
    def stats(self) -> dict[str, float]:
        """No round trips to count."""
        return {}

    def prefetch(self, batch_index: int, n_active: int | None = None) -> None:
        """Nothing to start ahead: the pool has no other core to build the next batch on."""

    def wait_ready(self) -> None:
        """Ready when built."""

    def close(self) -> None:
        """Nothing to release (the envs' memory goes with the pool)."""

    @property
    def episode_steps(self) -> int:
        """Training steps of a whole episode (every epoch's, under `train_steps_budget` its share)."""
        return sum(self._steps_in_epoch(t) for t in range(1, self.max_epochs + 1))

    def env_device(self, i: int) -> torch.device:
        return self.settings.env_devices[i]

    def inject_nan(self, env: int, epoch: int) -> None:
        """Poison env `env`'s host with NaN after the training phase of `epoch` (every batch)."""
        self._nan_faults.add((int(env), int(epoch)))

    # ---------------------------------------------------------------- BEHAVIOUR §7.2 batch setup
    def build_envs(self, batch_index: int, n_active: int | None = None) -> None:
        """Fresh envs 0..n_active−1 (those of this pool's slice) for episode batch `batch_index`; the epoch
        counter goes back to 0 (the first phase of `begin`)."""
        n = self.n_envs if n_active is None else int(n_active)
        if not 1 <= n <= self.n_envs:
            raise ValueError(f"n_active must be in [1, n_envs={self.n_envs}] (got {n_active})")
        if self.env_ids[0] >= n:
            raise ValueError(f"no env of this pool's slice {list(self.env_ids)} runs with n_active={n}")
        started = time.perf_counter()
        base_seed = self.settings.seed + BATCH_SEED_STRIDE * int(batch_index)
        devices = self.settings.env_devices
        self.envs = [build_env(self.settings, i, base_seed + ENV_SEED_STRIDE * i, task=self.task, clock=self.clock,
                               amp=self._amp[devices[i]], stream=self.streams.for_env(i, devices[i]))
                     for i in self.env_ids if i < n]
        self.n_running = n
        self.batch_index = int(batch_index)
        self.epoch = 0
        self._steps_done = 0  # training steps taken this episode
        self._phase = _RESET
        self.phase_s["build_s"] += time.perf_counter() - started

    # ---------------------------------------------------------------- phase checks
    def _expect(self, allowed: tuple[str, ...], what: str) -> None:
        if self._phase not in allowed:
            raise RuntimeError(f"EnvPool.{what} called out of order (phase {self._phase!r}; "
                               f"expected one of {list(allowed)}); call begin(b) or build_envs(b) first")

    # ---------------------------------------------------------------- BEHAVIOUR §7.3 phase 1
    def train_epoch(self) -> None:
        """One epoch of training steps, step k of env 0, 1, … before step k+1; no host sync."""
        self._expect((_RESET, _STEPPED), "train_epoch")
        if self.epoch >= self.max_epochs:
            raise RuntimeError(f"the episode already ran its {self.max_epochs} epochs; call begin(b)")
        started = time.perf_counter()
        self.epoch += 1
        t = self.epoch
        self.data.begin_epoch(self.batch_index, t, self.n_running)
        steps = self._steps_in_epoch(t)
        callers = caller_streams(self.envs)
        for env in self.envs:
            wait_for_caller(env.stream, callers.get(env.device))
            record_on(env.stream, self.data.plan_tensors(env.device))
            with env.stream_context():
                env.epoch_work = EpochWork.start(env.device)
        for k in range(steps):
            self.data.fetch_step(k)
            for env in self.envs:
                with env.stream_context():
                    x, y = self._consume(env, self.data.train_batch(env.index, k), callers)
                    self._start_meter(env, x)
                    with env.rng.activate():  # outside it the data path may draw (the loader's base seed)
                        train_step(env, x, y, slot_ids=self.enabled, amp=self._amp[env.device],
                                   measure=k == steps - 1, epoch=t, lr_scale=self._lr_scale(self._steps_done + k),
                                   rewarm_steps=self.settings.seed_lr_rewarm_steps)
        self._steps_done += steps
        for env in self.envs:
            if (env.index, t) in self._nan_faults:
                with env.stream_context():
                    _poison_host(env)
        self._phase = _TRAINED
        self.phase_s["train_s"] += time.perf_counter() - started

    def _steps_in_epoch(self, t: int) -> int:
        """Epoch t's training steps: all of them, or under `train_steps_budget` n its even share
        floor(t·n/T) − floor((t−1)·n/T) (capped by the data's steps per epoch)."""
        steps, budget = self.data.steps_per_epoch, self.settings.train_steps_budget
        if budget is None:
            return steps
        share = t * budget // self.max_epochs - (t - 1) * budget // self.max_epochs
        return min(steps, share)

    def _lr_scale(self, step: int) -> float | None:
        """The lr multiplier at the episode's training step `step` (None under a constant schedule)."""
        settings = self.settings
        if settings.lr_schedule == "constant":
            return None
        total = settings.lr_schedule_steps or self.episode_steps
        return lr_factor(settings.lr_schedule, step, total, settings.lr_warmup_fraction, settings.lr_decay_fraction)

    def _start_meter(self, env: EnvState, x: torch.Tensor) -> None:
        """The env's FLOP meter, from its first training batch (the host's costs measured once per pool)."""
        if env.compute is not None or self._host_costs.get(env.task) is False:
            return
        if env.task not in self._host_costs:
            self._host_costs[env.task] = model_costs(env.model, x) or False
        if self._host_costs[env.task]:
            env.compute = ComputeMeter.fresh(self._host_costs[env.task])

    def _consume(self, env: EnvState, batch, callers: dict):
        """Loader-path batches were copied on the caller's stream (`callers`, looked up outside the env's
        context): the env stream waits for the copies and records the batch."""
        if env.stream is not None and self.data.on_default_stream:
            wait_for_caller(env.stream, callers[env.device])
            record_on(env.stream, batch)
        return batch

    # ---------------------------------------------------------------- BEHAVIOUR §7.3 phases 2–7
    def validate(self) -> None:
        """Fused validation + counterfactual pass, the epoch's one host sync, then phases 3–7 per env."""
        self._expect((_TRAINED,), "validate")
        started = time.perf_counter()
        for env in self.envs:
            env.model.eval()
            with env.stream_context():
                env.epoch_work.begin_validation(counterfactual_slots(env, self.enabled))
        iterators = [self.data.val_batches(env.index) for env in self.envs]
        callers = caller_streams(self.envs)
        for _ in range(self.data.num_val_batches):
            for env, batches in zip(self.envs, iterators):
                with env.stream_context():
                    x, y = self._consume(env, next(batches), callers)
                    validate_batch(env, x, y, amp=self._amp[env.device])
        for env, readback in zip(self.envs, read_back(self.envs)):
            after_validation(env, readback, epoch=self.epoch, enabled=self.enabled,
                             steps_per_epoch=self.steps_per_epoch)
        self._phase = _VALIDATED
        self.phase_s["validate_s"] += time.perf_counter() - started

    # ---------------------------------------------------------------- BEHAVIOUR §7.3 phase 8
    def signals(self) -> dict[str, torch.Tensor]:
        """The SIGNAL_FIELDS dict of the current state (after validate: post-rollback, pre-action)."""
        self._expect((_VALIDATED, _EXECUTED, _STEPPED), "signals")
        return assemble_signals([self._view(env, peek=False) for env in self.envs], self.layout,
                                self.policy_device)

    def peek_signals(self) -> dict[str, torch.Tensor]:
        """Signals of the current slot states with tracker.peek over this epoch's metrics (no mutation).

        Between `execute_actions` and `finish_epoch` these are the post-action bootstrap signals of BEHAVIOUR §7.5.
        """
        self._expect((_VALIDATED, _EXECUTED, _STEPPED), "peek_signals")
        return assemble_signals([self._view(env, peek=True) for env in self.envs], self.layout,
                                self.policy_device)

    def _view(self, env: EnvState, *, peek: bool) -> EnvView:
        m = env.metrics
        reports = env.model.slot_reports()
        tracker = m.tracker
        if peek:
            active, _ = count_seeds(reports, self.enabled)
            tracker = env.tracker.peek(m.epoch, m.epoch * m.steps, m.train_loss, m.train_acc, m.val_loss,
                                       m.val_acc, active, count_available_slots(reports, self.enabled))
        counters = env.counters
        return EnvView(
            tracker=tracker, reports=reports, host_params=env.model.host_param_count(),
            host_max_acc=counters.host_max_acc, num_contributing_fossilized=counters.contributing_fossilized,
            panic=m.panic, auto_culls=counters.auto_culls,
            contributions={s: c for s, (sid, c) in m.contributions.items() if env.seed_id(s) == sid},
            acc_at_germination=dict(counters.acc_at_germination),
            seed_flop_share=env.compute.seed_share(env.model) if env.compute is not None else 0.0,
        )

    # ---------------------------------------------------------------- BEHAVIOUR §7.3 step 10, §7.4
    def execute_actions(self, actions: np.ndarray) -> tuple[bool, ...]:
        """Run each env's row of `actions` (a numpy integer array [n_active, NUM_HEADS], heads in
        `contracts.actions.ACTION_HEADS` order; anything else raises: `hosts.env.actions.checked_actions`), in
        index order; returns each env's success."""
        self._expect((_VALIDATED,), "execute_actions")
        checked = checked_actions(actions, self.n_active, self.head_sizes, first_env=self.envs[0].index)
        success = []
        for env, row in zip(self.envs, checked):
            success.append(execute_action(env, row, slot_ids=self.slot_ids, enabled=self.enabled,
                                          menu=self.menu, val_acc=env.metrics.val_acc, epoch=self.epoch))
        self._last_actions = checked
        self._phase = _EXECUTED
        return tuple(success)

    def finish_epoch(self) -> None:
        """step_epoch on every enabled slot of every env, each env's auto-culls counted for its next signals.
        A seed that starts blending with a `gated` blend builds its gate here, so the body runs in the env's
        own random stream: drawn from the global generator, the gate's init came from whichever env ran last,
        and an env's episode depended on its neighbours (and on how the envs were split over Ray workers)."""
        self._expect((_EXECUTED,), "finish_epoch")
        for env in self.envs:
            with env.rng.activate():
                env.counters.auto_culls = step_slots(env, self.enabled, self.epoch)
        self._phase = _STEPPED

    def apply(self, actions: np.ndarray, bootstrap: bool = False) -> ApplyResult:
        """Execute the actions, build the post-action bootstrap signals if asked, then step_epoch."""
        success = self.execute_actions(actions)
        boot = self.peek_signals() if bootstrap else None
        self.finish_epoch()
        events = []
        for env in self.envs:
            events.extend(env.events)
            env.events.clear()
        return ApplyResult(self._last_actions, success, tuple(events), boot)

    def train_and_validate(self) -> dict[str, torch.Tensor]:
        """The next epoch's training and validation (phases 1–7), then its signals: train_epoch + validate +
        signals."""
        self.train_epoch()
        self.validate()
        return self.signals()

    # ---------------------------------------------------------------- the loop's interface (ARCHITECTURE §2)
    def begin(self, batch_index: int, n_active: int | None = None) -> dict[str, torch.Tensor]:
        """Start episode batch `batch_index`: build_envs(b), then the first epoch; returns its signals."""
        self.build_envs(batch_index, n_active)
        return self.train_and_validate()

    def step(self, actions: np.ndarray, bootstrap: bool = True) -> tuple[ApplyResult, dict[str, torch.Tensor] | None]:
        """apply(actions), with the post-action bootstrap signals at t == T if `bootstrap`, then the next
        epoch's signals (None at T)."""
        last = self.epoch >= self.max_epochs
        result = self.apply(actions, bootstrap=last and bootstrap)
        return result, None if last else self.train_and_validate()

    # ---------------------------------------------------------------- BEHAVIOUR §7.6 inputs
    def episode_results(self) -> list[EpisodeResult]:
        """Per-env totals of the episode so far (final = the latest validated epoch)."""
        out = []
        for env in self.envs:
            c, m = env.counters, env.metrics
            out.append(EpisodeResult(
                env_id=env.index, epochs=0 if m is None else m.epoch,
                final_val_acc=float("nan") if m is None else m.val_acc,
                final_val_loss=float("nan") if m is None else m.val_loss,
                host_max_acc=c.host_max_acc, seeds_created=c.seeds_created, seeds_fossilized=c.seeds_fossilized,
                contributing_fossilized=c.contributing_fossilized, rollbacks=c.rollbacks,
                action_counts=tuple(c.action_counts), successful_action_counts=tuple(c.successful_action_counts),
                val_accs=tuple(c.val_accs), fossils=_fossils(env, self.enabled),
                flops={} if env.compute is None else env.compute.totals(),
                compute_units={} if env.compute is None else env.compute.units(env.model), task=env.task,
            ))
        return out


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------


def _check_env_ids(env_ids: Sequence[int] | None, n_envs: int) -> tuple[int, ...]:
    """The pool's slice: all envs by default, else a non-empty contiguous run of indices in [0, n_envs)."""
    if env_ids is None:
        return tuple(range(n_envs))
    ids = tuple(int(i) for i in env_ids)
    if not ids or ids != tuple(range(ids[0], ids[0] + len(ids))) or ids[0] < 0 or ids[-1] >= n_envs:
        raise ValueError(f"env_ids must be a non-empty contiguous run of env indices in [0, {n_envs}) "
                         f"(got {list(ids)})")
    return ids


def _fossils(env: EnvState, slot_ids: Sequence[str]) -> tuple[str, ...]:
    """"slot=blueprint" for every enabled slot holding a FOSSILIZED seed, canonical order."""
    return tuple(f"{s}={env.slot(s).state.blueprint_id}" for s in slot_ids
                 if env.slot(s).stage == SeedStage.FOSSILIZED)


@torch.no_grad()
def _poison_host(env: EnvState) -> None:
    """Fault injection: fill the host's first parameter with NaN (the next validation loss is NaN)."""
    first = next(iter(env.model.host_parameters()))
    first.fill_(float("nan"))
