"""Distributed: the envs as Ray actors (the pool, its worker and the Ray runtime)."""
