"""The errors a user can fix, the exit codes every command (train, prove, report, bench, doctor) ends with, and
the parser base they share, which turns a bad command line into a `ConfigError` (the advice it adds and its
markdown help come from `esper_fx.command`).

The command line prints any `SetupError` as `esper_fx.train: error: <message>` and exits with code 2, and a
`RunFailure` the same way with exit code 1 (`esper_fx.cli.run`). Subclasses also derive from the builtin a
Python caller would expect.
"""

from __future__ import annotations

import argparse
import sys
import typing
from typing import Any

from esper_fx.command import unknown_flag_hint, with_markdown_help

# The exit codes, one table for every command.
EXIT_OK = 0  # done
EXIT_RUN_FAILED = 1  # the work cannot go on (e.g. the controller produced no valid action); one line on stderr
EXIT_SETUP_ERROR = 2  # a configuration or environment problem, found before anything is written; one line
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, after saving what is finished
EXIT_TERMINATED = 143  # SIGTERM: 128 + SIGTERM, likewise


class SetupError(Exception):
    """A configuration or environment problem: the message names the field, file or device."""


class ConfigError(SetupError, ValueError):
    """A bad command line or configuration value: one line naming the flag or field, exit code 2."""


class RunDirectoryError(SetupError, ValueError):
    """The run directory cannot be used: it holds another run, is locked, or cannot be written."""


class ResumeMismatchError(SetupError, ValueError):
    """A resumed run differs from its checkpoint in a field that fixes the controller's shapes."""


class DeviceUnavailableError(SetupError, RuntimeError):
    """A device named in the configuration does not exist on this machine."""


class DataError(SetupError, ValueError):
    """The task's data cannot be loaded, or does not fit the configuration."""


class OutputError(SetupError, OSError):
    """Writing the run's outputs failed (a full disk, a vanished directory): the message names the file."""


class RunFailure(Exception):
    """The run cannot go on (not a setup problem): the command line prints one line and exits 1; the run
    directory stays resumable from its last checkpoint."""


class ControllerError(RunFailure, RuntimeError):
    """The controller produced no valid action; the message names the batch, the epoch, the envs and the cause."""


class CommandParser(argparse.ArgumentParser):
    """The parser of every `python -m esper_fx.<name>` command: a usage error raises `ConfigError`, which the
    command's `main` turns into one line on stderr and exit code 2 (`fail`) — never a usage dump."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        self.name = name
        kwargs.setdefault("allow_abbrev", False)  # `--episode 8` is not `--episodes 8`: a typo is refused
        super().__init__(prog=f"python -m {name}", **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        """As argparse's, with `help` written in markdown: plain in `--help`, kept for docs/CLI.md's table."""
        return with_markdown_help(super().add_argument, args, kwargs)

    def error(self, message: str) -> typing.NoReturn:
        if message.startswith("unrecognized arguments:"):
            message += unknown_flag_hint(message.split(":", 1)[1].split(), self._option_string_actions)
        raise ConfigError(message)

    def fail(self, exc: BaseException) -> int:
        """One line `<name>: error: <message>` on stderr; returns the exit code of a configuration problem."""
        text = " ".join(str(exc).split()) or type(exc).__name__
        print(f"{self.name}: error: {text}", file=sys.stderr)
        return EXIT_SETUP_ERROR
