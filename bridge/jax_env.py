"""The process settings JAX and OpenBLAS read when they start, set before either does (`ensure_jax_env`).

This module imports neither torch nor jax, so an entry point can call it before anything loads them: the
`python -m esper_fx.*` commands, `esper_fx.run` and `esper_fx.compare`, the Ray env worker and `bridge.dlpack`
call it first. A program of your own that imports jax before esper_fx calls it itself, before any JAX
computation.
"""

import os
import sys
import warnings

PREALLOCATE_VAR = "XLA_PYTHON_CLIENT_PREALLOCATE"


def ensure_jax_env(warn: bool = True) -> None:
    """Stop JAX from preallocating 75% of GPU memory, and keep OpenBLAS to one thread; before JAX is used.

    Sets ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` unless the variable is already set (an explicit choice is
    kept). The variable is read when JAX creates its GPU client, so setting it after ``import jax`` only
    works if no JAX backend has been used yet: in that case this warns (unless `warn` is false; the project's
    own entry points pass false, as they run before any JAX computation).

    ``OPENBLAS_NUM_THREADS=1`` (unless set): JAX's CPU LAPACK kernels (the QR of the controller's orthogonal
    initialisation) run on scipy's OpenBLAS, whose spinning worker threads stalled that initialisation for
    3-8 s instead of 10 ms whenever other processes kept the cores busy. The parameters are bit-identical.
    It takes effect if set before that library loads, which happens at the first LAPACK call.
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if PREALLOCATE_VAR in os.environ:
        return
    os.environ[PREALLOCATE_VAR] = "false"
    if warn and "jax" in sys.modules:
        warnings.warn(
            f"jax was imported before {PREALLOCATE_VAR}=false was set; it takes effect only if no JAX "
            "backend has been initialised yet. Call bridge.jax_env.ensure_jax_env() before importing jax.",
            RuntimeWarning,
            stacklevel=2,
        )
