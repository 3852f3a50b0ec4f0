"""The shared vocabulary of hosts (PyTorch) and rl (JAX), by topic; it imports neither torch nor jax."""
