"""The JAX side of esper_fx: the PPO/LSTM controller, REINFORCE, GAE, normalisers, rewards and the heuristic.

Nothing under `rl/` imports torch (the import rule; a test enforces it).
"""
