"""The PyTorch side of esper_fx: host networks, blueprints, seed slots, governor, data and envs.

Nothing under `hosts/` imports jax (the import rule; a test enforces it).
"""
