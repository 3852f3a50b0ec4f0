"""The command line: the train and prove commands (argument parsing, the run from the command line)."""
