"""The raw (un-normalised) observation of one env, BEHAVIOUR §8.1–§8.4.

Layout: 23 base features, then one (4 + B + 3)-block per slot in canonical order (every host injection
point, enabled or not), then, with telemetry, one 10-block per slot in canonical order. A slot that
is not enabled, has no report, or whose report is DORMANT gives zero blocks.

`build_observation` returns a list of python floats of length D; `hosts.signals.assembly.stack_observations`
turns E of them into one [E, D] tensor.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, NamedTuple, Sequence


from esper_fx.contracts.actions import NUM_TEMPOS
from esper_fx.contracts.observation import (NUM_BASE_FEATURES, OBS_CURVES, TELEMETRY_BLOCK, WITHHOLDABLE, obs_dim,
                                            slot_block_size)
from esper_fx.contracts.stages import SeedStage

from hosts.seeds.slot_report import SlotReport
from hosts.signals.slots import active_seed_params, check_slot_ids, count_seeds, seeded_slots
from hosts.signals.tracker import HISTORY_FEATURES, TrackerSignals

SAFE_CLIP = 100.0  # safe(v, d) clips to [-100, 100] (BEHAVIOUR §8.1)
# safe(v, d) defaults of BEHAVIOUR §8.2
LOSS_DEFAULT = 10.0
DELTA_DEFAULT = 0.0
HISTORY_PAD = 0.0

# Telemetry constants of BEHAVIOUR §8.4
GRAD_NORM_CAP = 10.0
GRAD_HEALTH = 1.0
VANISHING_GRAD = 1e-7
EXPLODING_GRAD = 100.0
EIS_CAP = 50.0
ACCURACY_SCALE = 100.0
STAGE_IMPROVEMENT_SCALE = 10.0
STAGE_SPAN = 6.0


def safe(value: float | None, default: float) -> float:
    """None, NaN or ±inf -> `default`; then clip to [−100, 100] (BEHAVIOUR §8.1)."""
    if value is None or not math.isfinite(value):
        value = default
    return min(max(float(value), -SAFE_CLIP), SAFE_CLIP)


def _left_pad(history: Sequence[float], size: int = HISTORY_FEATURES) -> list[float]:
    """The last `size` entries, oldest first, left-padded with 0.0."""
    values = [float(v) for v in history][-size:]
    return [HISTORY_PAD] * (size - len(values)) + values


def seed_utilization(total_seeds: int, max_seeds: int | None) -> float:
    """total_seeds / max_seeds if max_seeds > 0, else 0 (None = unlimited)."""
    if max_seeds is None or max_seeds <= 0:
        return 0.0
    return total_seeds / max_seeds


def base_features(signals: TrackerSignals, total_params: int, utilization: float,
                  log_params: bool = False) -> list[float]:
    """Features 0..22 (BEHAVIOUR §8.2); `log_params`: feature 21 is ln(1 + total_params)."""
    features = [
        float(signals.epoch),
        float(signals.global_step),
        safe(signals.train_loss, LOSS_DEFAULT),
        safe(signals.val_loss, LOSS_DEFAULT),
        safe(signals.loss_delta, DELTA_DEFAULT),
        float(signals.train_acc),
        float(signals.val_acc),
        safe(signals.accuracy_delta, DELTA_DEFAULT),
        float(signals.plateau_epochs),
        float(signals.best_val_accuracy),
        safe(signals.best_val_loss, LOSS_DEFAULT),
        *(safe(v, LOSS_DEFAULT) for v in _left_pad(signals.loss_history_5)),
        *_left_pad(signals.accuracy_history_5),
        math.log1p(total_params) if log_params else float(total_params),
        float(utilization),
    ]
    assert len(features) == NUM_BASE_FEATURES
    return features


def blueprint_one_hot(blueprint_id: str, menu: Sequence[str]) -> list[float]:
    """One-hot over the menu; all zeros if the blueprint is not in the menu."""
    return [1.0 if name == blueprint_id else 0.0 for name in menu]


def slot_improvement(report: SlotReport) -> float:
    """c if a contribution was ever measured, else improvement_since_stage_start (raw pp)."""
    if report.contribution is not None:
        return float(report.contribution)
    return float(report.improvement_since_stage_start)


def tempo_one_hot(tempo: int) -> list[float]:
    """One-hot over the tempos (fast, standard, slow)."""
    return [1.0 if k == tempo else 0.0 for k in range(NUM_TEMPOS)]


def slot_block(report: SlotReport | None, menu: Sequence[str]) -> list[float]:
    """BEHAVIOUR §8.3: is_active, stage, alpha, improvement, blueprint one-hot, tempo one-hot; zeros for an
    empty slot."""
    if report is None:
        return [0.0] * slot_block_size(len(menu))
    return [
        1.0,
        float(int(report.stage)),
        float(report.alpha),
        slot_improvement(report),
        *blueprint_one_hot(report.blueprint_id, menu),
        *tempo_one_hot(report.tempo),
    ]


def stage_feature(stage: SeedStage) -> float:
    """min((stage − 1)/6, 1): TRAINING 1/3, BLENDING 0.5, PROBATIONARY 5/6, FOSSILIZED 1."""
    return min((int(stage) - 1) / STAGE_SPAN, 1.0)


def telemetry_block(report: SlotReport | None, epoch: int, max_epochs: int) -> list[float]:
    """BEHAVIOUR §8.4: the 10 per-seed telemetry features; zeros for an empty slot."""
    if report is None:
        return [0.0] * TELEMETRY_BLOCK
    grad = float(report.gradient_norm)
    return [
        min(grad, GRAD_NORM_CAP) / GRAD_NORM_CAP,
        GRAD_HEALTH,
        1.0 if report.gradient_measured and grad < VANISHING_GRAD else 0.0,
        1.0 if grad > EXPLODING_GRAD else 0.0,
        min(report.epochs_in_stage, EIS_CAP) / EIS_CAP,
        float(report.current_val_accuracy) / ACCURACY_SCALE,
        min(max(float(report.improvement_since_stage_start) / STAGE_IMPROVEMENT_SCALE, -1.0), 1.0),
        stage_feature(report.stage),
        float(report.alpha),
        epoch / max(max_epochs, 1),
    ]


class ObservationOptions(NamedTuple):
    """What a run's observation shows (the config's use_telemetry and observe_*): the telemetry blocks,
    the parameter count as ln(1 + count) (`log_params`), what it withholds (`withheld`: names of
    `WITHHOLDABLE`, a control: `host_params` leaves the host out of feature 21, `curves` zeroes features
    2..20) and the fit gap (`fit_gap`: one more feature at the end, `fit_gap(signals)`, BEHAVIOUR §8.7)."""

    use_telemetry: bool
    log_params: bool = False
    withheld: tuple[str, ...] = ()
    fit_gap: bool = False


def build_observation(
    signals: TrackerSignals,
    max_epochs: int,
    host_params: int,
    reports: Mapping[str, SlotReport],
    enabled_slot_ids: Iterable[str],
    slot_ids: Sequence[str],
    menu: Sequence[str],
    max_seeds: int | None,
    options: ObservationOptions,
) -> list[float]:
    """The raw observation of one env, a list of D floats (BEHAVIOUR §8.1), as `options` say."""
    use_telemetry, log_params, fit_gap = options.use_telemetry, options.log_params, options.fit_gap
    withheld = frozenset(options.withheld)
    if not withheld <= set(WITHHOLDABLE):
        raise ValueError(f"cannot withhold {sorted(withheld - set(WITHHOLDABLE))}: only {list(WITHHOLDABLE)}")
    enabled = tuple(enabled_slot_ids)
    check_slot_ids(slot_ids, enabled, reports)
    if not menu:
        raise ValueError("the blueprint menu is empty")
    seeds = seeded_slots(reports, enabled)
    total_params = (0 if "host_params" in withheld else host_params) + active_seed_params(reports, enabled)
    utilization = seed_utilization(sum(count_seeds(reports, enabled)), max_seeds)
    obs = base_features(signals, total_params, utilization, log_params)
    if "curves" in withheld:
        obs[OBS_CURVES] = [0.0] * (OBS_CURVES.stop - OBS_CURVES.start)
    for sid in slot_ids:
        obs.extend(slot_block(seeds.get(sid), menu))
    if use_telemetry:
        for sid in slot_ids:
            obs.extend(telemetry_block(seeds.get(sid), signals.epoch, max_epochs))
    if fit_gap:
        obs.append(0.0 if "curves" in withheld else fit_gap_feature(signals))
    assert len(obs) == obs_dim(len(slot_ids), use_telemetry, len(menu), fit_gap)
    return obs


def fit_gap_feature(signals: TrackerSignals) -> float:
    """train_acc − val_acc of the epoch, pp (BEHAVIOUR §8.7), clipped like every feature."""
    return safe(float(signals.train_acc) - float(signals.val_acc), DELTA_DEFAULT)

