"""What one env records once its epoch is read back (BEHAVIOUR §7.3 phases 3–7): the governor's check (and a
rollback now), each seed's accuracy and counterfactual contribution, the gradient-ratio EMA and the
tracker, into the env's `EpochMetrics`.

Plain functions over an `EnvState` and its `EpochReadback` (`hosts.env.epoch_compute`); `EnvPool.validate`
calls `after_validation` for every env after the epoch's one readback.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from esper_fx.contracts.events import EventType
from hosts.env.epoch_compute import EpochReadback
from hosts.env.state import EnvState, EpochMetrics
from hosts.seeds.gradient_ratio import ratio_ema
from hosts.signals.slots import count_available_slots, count_seeds


def after_validation(env: EnvState, rb: EpochReadback, *, epoch: int, enabled: Sequence[str],
                     steps_per_epoch: int) -> None:
    """Phases 3–7 of epoch `epoch` for one env, in order; its `EpochMetrics` replace the epoch's work."""
    counters = env.counters
    counters.host_max_acc = max(counters.host_max_acc, rb.val_acc)
    counters.val_accs.append(rb.val_acc)
    panic = governor_phase(env, rb.val_loss, epoch, enabled)
    for slot_id in enabled:
        if env.holds_seed(slot_id):
            env.slot(slot_id).record_accuracy(rb.val_acc)
    contributions = record_contributions(env, rb)
    update_gradient_ratios(env, rb)
    reports = env.model.slot_reports()
    active, _ = count_seeds(reports, enabled)
    tracker = env.tracker.update(epoch, epoch * steps_per_epoch, rb.train_loss, rb.train_acc, rb.val_loss,
                                 rb.val_acc, active, count_available_slots(reports, enabled))
    env.metrics = EpochMetrics(epoch=epoch, steps=steps_per_epoch, train_loss=rb.train_loss, train_acc=rb.train_acc,
                               val_loss=rb.val_loss, val_acc=rb.val_acc, baseline_acc=dict(rb.baseline_acc),
                               cf_slots=env.epoch_work.cf_slots, contributions=contributions, panic=panic,
                               tracker=tracker)
    env.epoch_work = None


def record_contributions(env: EnvState, rb: EpochReadback) -> dict[str, tuple[str, float]]:
    """BEHAVIOUR §7.3 phase 6: c = val_acc − baseline_acc[s] for each cf slot that still holds a seed."""
    contributions = {}
    for slot_id in env.epoch_work.cf_slots:
        if env.holds_seed(slot_id):
            c = rb.val_acc - rb.baseline_acc[slot_id]
            env.slot(slot_id).set_contribution(c)
            contributions[slot_id] = (env.seed_id(slot_id), c)
    return contributions


def governor_phase(env: EnvState, val_loss: float, epoch: int, enabled: Sequence[str]) -> bool:
    """BEHAVIOUR §7.3 phase 4: check; on a panic roll back now; else snapshot after a passing check at
    t % 5 == 0. Returns whether the governor panicked."""
    panic = bool(env.governor.check(val_loss))
    if panic:
        rollback(env, val_loss, epoch, enabled)
    elif env.governor.maybe_snapshot(epoch):
        env.event(EventType.GOVERNOR_SNAPSHOT, epoch, message="snapshot after a passing check")
    return panic


def rollback(env: EnvState, val_loss: float, epoch: int, enabled: Sequence[str]) -> None:
    """The governor's rollback: the host back to its last snapshot, every seed it empties culled, with events."""
    seeded = {s: env.seed_id(s) for s in enabled if env.holds_seed(s)}
    env.event(EventType.GOVERNOR_PANIC, epoch, message=f"governor panic at val_loss {val_loss}", loss=val_loss)
    report = env.governor.rollback(optimizer=env.host_optimizer)
    env.counters.rollbacks += 1
    for slot_id in env.forget_emptied(enabled):
        if slot_id in seeded:
            env.event(EventType.SEED_CULLED, epoch, slot_id, seeded[slot_id], "culled by the governor rollback",
                      reason="governor_rollback", auto=False)
    env.event(EventType.GOVERNOR_ROLLBACK, epoch, message="rolled back to the last snapshot", loss=val_loss,
              report=_report_dict(report))


def update_gradient_ratios(env: EnvState, rb: EpochReadback) -> None:
    """BEHAVIOUR §2.13 steps 2–4 for the slots measured this epoch that still hold the same seed."""
    ema_table = env.counters.ratio_ema
    for slot_id, (seed_id, ratio, norm) in rb.seeds.items():
        if env.seed_id(slot_id) != seed_id:
            continue  # emptied by a rollback
        if not (math.isfinite(ratio) and math.isfinite(norm)):
            continue  # an overflowed fp16 step (skipped by the scaler) measures nothing
        ema_table[slot_id] = ema = ratio_ema(ema_table.get(slot_id), ratio)
        slot = env.slot(slot_id)
        slot.set_gradient_ratio(ema)
        slot.record_gradient_norm(norm)


def _report_dict(report) -> dict:
    """A RollbackReport as plain values for the event's data."""
    return dataclasses.asdict(report) if dataclasses.is_dataclass(report) else {}
