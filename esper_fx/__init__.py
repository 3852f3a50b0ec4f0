"""esper_fx: a host network grows seed modules while it trains, steered by a jitted JAX controller.

Importing `esper_fx` (or `esper_fx.contracts` / `esper_fx.config`) loads neither torch nor jax;
`esper_fx.run` and `esper_fx.compare` import them on first use.
"""

from esper_fx.config import HeuristicConfig, TrainingConfig

__all__ = ["TrainingConfig", "HeuristicConfig", "run", "compare"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "run":
        from esper_fx.loop import run

        return run
    if name == "compare":
        from esper_fx.compare import compare

        return compare
    raise AttributeError(f"module 'esper_fx' has no attribute {name!r}")
