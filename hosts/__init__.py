"""The PyTorch side of esper_fx: host networks, blueprints, seed slots, governor, data and envs.

Nothing under `hosts/` imports jax (the import rule; a test enforces it).
"""

from hosts import blueprints, gradients
from hosts.blending import GatedBlend, LinearBlend, SigmoidBlend
from hosts.cnn import CNNHost
from hosts.governor import Governor, RollbackReport
from hosts.injection import InjectionSpec
from hosts.lifecycle import GateResult, SeedMetrics, SeedState, SeedTelemetry
from hosts.model import MorphogeneticModel
from hosts.reports import SlotReport
from hosts.slot import SeedSlot
from hosts.transformer import TransformerHost

__all__ = [
    "CNNHost", "TransformerHost", "InjectionSpec", "MorphogeneticModel", "SeedSlot", "Governor",
    "RollbackReport", "GateResult", "SeedState", "SeedMetrics", "SeedTelemetry", "SlotReport",
    "LinearBlend", "SigmoidBlend", "GatedBlend", "blueprints", "gradients",
]
