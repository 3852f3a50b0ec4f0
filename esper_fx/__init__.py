"""esper_fx: a host network grows seed modules while it trains, steered by a jitted JAX controller.

`esper_fx.TrainingConfig`, `esper_fx.HeuristicConfig`, `esper_fx.run` and `esper_fx.compare` load on first
use: importing the package itself loads nothing else, so `hosts` and `rl` can import
`esper_fx.contracts` alone. The configuration imports neither torch nor jax; `run` and `compare` do.
"""

__all__ = ["TrainingConfig", "HeuristicConfig", "run", "compare"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in ("TrainingConfig", "HeuristicConfig"):
        from esper_fx import config

        return getattr(config, name)
    if name == "run":
        from esper_fx.training.loop import run

        return run
    if name == "compare":
        from esper_fx.evaluation.comparison import compare

        return compare
    raise AttributeError(f"module 'esper_fx' has no attribute {name!r}")
