"""The errors a user can fix: `SetupError` and its kinds (exit code 2) and `RunFailure` (exit code 1). The exit
codes themselves and the parser base every command shares live in `esper_fx.command`.

The command line prints any `SetupError` as `esper_fx.train: error: <message>` and exits with code 2, and a
`RunFailure` the same way with exit code 1 (`esper_fx.cli.run`). Subclasses also derive from the builtin a
Python caller would expect.
"""

from __future__ import annotations


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

