"""Controllers: the protocol, the registry of names, the baselines and controls, PPO, the heuristic and reinforce."""
