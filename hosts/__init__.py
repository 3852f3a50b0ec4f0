"""The PyTorch side of esper_fx: host networks, seeds, data, the signals and the env pool.

Nothing under `hosts/` imports jax (the import rule; a test enforces it), and nothing from `esper_fx`
but `esper_fx.contracts`.

    layout.py  how a host is laid out: injection points, memory layout, the LayerNorm epsilon
    models/    host networks, their injection points, MorphogeneticModel
    seeds/     seed slots, lifecycle and gates, blending, blueprints, gradient ratio, governor
    data/      task data, the data feed, batch plans, random streams, datasets
    signals/   the signals pytree: observation, masks, tracker, per-slot fields, assembly
    env/       the env pool: E envs in lock-step, one RL step per host epoch
    tasks.py   the task table (host, batch size, learning rates)
    settings.py  PoolSettings: what the env pool and its data read of a run
"""

from hosts.models.cnn import CNNHost
from hosts.layout import InjectionSpec
from hosts.models.morphogenetic import MorphogeneticModel
from hosts.models.transformer import TransformerHost
from hosts.seeds import blueprints
from hosts.seeds import gradient_ratio as gradients
from hosts.seeds.blending import GatedBlend, LinearBlend, SigmoidBlend
from hosts.seeds.governor import Governor, RollbackReport
from hosts.seeds.lifecycle import GateResult, SeedMetrics, SeedState, SeedTelemetry
from hosts.seeds.slot import SeedSlot
from hosts.seeds.slot_report import SlotReport

__all__ = [
    "CNNHost", "TransformerHost", "InjectionSpec", "MorphogeneticModel", "SeedSlot", "Governor",
    "RollbackReport", "GateResult", "SeedState", "SeedMetrics", "SeedTelemetry", "SlotReport",
    "LinearBlend", "SigmoidBlend", "GatedBlend", "blueprints", "gradients",
]
