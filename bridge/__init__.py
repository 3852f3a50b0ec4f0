"""The bridge between PyTorch and JAX: zero-copy hand-off (`dlpack`) and the process settings JAX reads (`jax_env`)."""
