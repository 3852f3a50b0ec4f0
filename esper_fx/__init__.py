"""esper_fx: a host network grows seed modules while it trains, steered by a jitted JAX controller.

`esper_fx.TrainingConfig`, `esper_fx.HeuristicConfig`, `esper_fx.run` and `esper_fx.compare` load on first
use: importing the package itself loads nothing else, so `hosts` and `rl` can import
`esper_fx.contracts` alone. The configuration imports neither torch nor jax; `run` and `compare` do.

Importing the package sets the process defaults that must precede the native libraries (`ensure_jax_env`):
every module of esper_fx, and `bridge`, `hosts` and `rl` through `esper_fx.contracts`, pass here first.
"""

import os
import sys
import warnings

__all__ = ["TrainingConfig", "HeuristicConfig", "run", "compare"]
__version__ = "0.1.0"

PREALLOCATE_VAR = "XLA_PYTHON_CLIENT_PREALLOCATE"


def ensure_jax_env(warn: bool = True) -> None:
    """Stop JAX from preallocating 75% of GPU memory, and keep OpenBLAS to one thread; before JAX is used.

    Sets ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` unless the variable is already set (an explicit choice is
    kept). The variable is read when JAX creates its GPU client, so setting it after ``import jax`` only
    works if no JAX backend has been used yet: in that case this warns (unless `warn` is false). Importing
    the package calls it without the warning.

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
            "backend has been initialised yet. Call esper_fx.ensure_jax_env() (or import esper_fx) first.",
            RuntimeWarning,
            stacklevel=2,
        )


ensure_jax_env(warn=False)


def __getattr__(name: str):
    if name in ("TrainingConfig", "HeuristicConfig"):
        from esper_fx import config

        return getattr(config, name)
    if name == "run":
        from esper_fx.training.run import run

        return run
    if name == "compare":
        from esper_fx.evaluation.comparison import compare

        return compare
    raise AttributeError(f"module 'esper_fx' has no attribute {name!r}")
