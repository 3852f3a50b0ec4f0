"""The DLPack bridge: the only package besides `esper_fx` that imports both torch and jax.

Importing it first sets ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` (see `ensure_jax_env`) before jax loads.
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
