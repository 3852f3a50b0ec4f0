"""The command line: the train and prove commands, the flags and `--set` built from the config, the run from the command line."""
