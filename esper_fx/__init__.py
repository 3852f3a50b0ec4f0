"""esper_fx: a host network grows seed modules while it trains, steered by a jitted JAX controller.

`esper_fx.TrainingConfig`, `esper_fx.HeuristicConfig`, `esper_fx.run` and `esper_fx.compare` are imported on
first use: importing the package itself imports nothing and sets nothing, so `hosts` and `rl` can import the
`esper_fx.contracts` package alone. The configuration imports neither torch nor jax; `run` and `compare` do
(and call `bridge.jax_env.ensure_jax_env` first).
"""

__all__ = ["TrainingConfig", "HeuristicConfig", "run", "compare"]
__version__ = "0.1.0"


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
