"""The PyTorch side of esper_fx: host networks, blueprints, seed slots, governor, data and envs.

Nothing under `hosts/` imports jax (the import rule; a test enforces it).
"""

from hosts import blueprints
from hosts.cnn import CNNHost
from hosts.injection import InjectionSpec
from hosts.transformer import TransformerHost

__all__ = ["CNNHost", "TransformerHost", "InjectionSpec", "blueprints"]
