"""The DLPack bridge: the only package besides `esper_fx` that imports both torch and jax."""
