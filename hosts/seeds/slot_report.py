"""The per-slot report a seed slot hands to the observation builder, the masks and the signals.

A plain snapshot of python values (no tensors), produced by `SeedSlot.report()` and
`MorphogeneticModel.slot_reports()` for every slot whose state is not None.
"""

from __future__ import annotations

from dataclasses import dataclass

from esper_fx.contracts.actions import DEFAULT_TEMPO
from esper_fx.contracts.stages import SeedStage


@dataclass(frozen=True)
class SlotReport:
    slot_id: str
    seed_id: str
    blueprint_id: str
    stage: SeedStage
    previous_stage: SeedStage
    epochs_in_stage: int  # eis
    epochs_total: int  # age
    alpha: float  # state.alpha (the gated blend's progress value)
    current_val_accuracy: float  # pp
    total_improvement: float  # I = current - initial, pp
    improvement_since_stage_start: float  # pp
    contribution: float | None  # counterfactual_contribution (persists; None until first measured)
    seed_params: int  # trainable seed-module parameters, gate excluded
    gradient_norm: float  # g of BEHAVIOUR §8.4: seed grad L2 norm from the latest TRAINING/BLENDING epoch
    gradient_measured: bool  # whether g has ever been measured for this seed
    gradient_ratio: float  # seed_gradient_norm_ratio (its EMA, BEHAVIOUR §2.13)
    auto_culled: bool = False
    auto_cull_reason: str = ""
    tempo: int = DEFAULT_TEMPO  # the blend's tempo (contracts.actions.TEMPO_NAMES index)
