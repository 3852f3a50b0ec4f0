"""Controllers: the protocol a controller bundle follows, the registry of names, the baselines and controls,
PPO, the heuristic and `reinforce`."""
