"""The machine check, `python -m esper_fx.doctor`: the command (`cli.py`) and its checks, a module per family."""
