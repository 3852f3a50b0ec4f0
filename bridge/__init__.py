"""The DLPack bridge: the only package besides `esper_fx` that imports both torch and jax.

Importing it, like importing any module of `esper_fx`, sets ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` before jax
loads (`esper_fx.ensure_jax_env`, re-exported here).
"""

from bridge.dlpack import (
    ALIGNMENT,
    ALLOWED_DTYPES,
    Handoff,
    check_jax_tree,
    check_torch_tree,
    ensure_jax_env,
    exportable,
    to_jax,
    to_torch,
)

__all__ = [
    "ALIGNMENT",
    "ALLOWED_DTYPES",
    "Handoff",
    "check_jax_tree",
    "check_torch_tree",
    "ensure_jax_env",
    "exportable",
    "to_jax",
    "to_torch",
]
