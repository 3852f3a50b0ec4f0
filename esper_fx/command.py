"""What every command (train, prove, report, bench, doctor) shares besides its errors: the exit codes, one table
for all of them; `CommandParser`, the parser base that turns a bad command line into a `ConfigError`; the advice
after a mistyped name or flag (`did_you_mean`, `unknown_flag_hint`) and help written in markdown
(`with_markdown_help`: plain in `--help`, kept for docs/CLI.md's table). Of the project it imports only
`esper_fx.errors`."""

from __future__ import annotations

import argparse
import sys
import typing
from typing import Any, Iterable, Sequence

from esper_fx.errors import ConfigError

# The exit codes, one table for every command.
EXIT_OK = 0  # done
EXIT_RUN_FAILED = 1  # the work cannot go on (e.g. the controller produced no valid action); one line on stderr
EXIT_SETUP_ERROR = 2  # a configuration or environment problem, found before anything is written; one line
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, after saving what is finished
EXIT_TERMINATED = 143  # SIGTERM: 128 + SIGTERM, likewise

# Flags of other RL tools a newcomer types: (this command line's flag for the same thing, the advice), the
# advice given only where the command has that flag.
FOREIGN_FLAGS = {
    "--total-timesteps": ("--episodes", "--episodes N: esper_fx counts episodes of max_epochs epochs"),
    "--num-envs": ("--n-envs", "--n-envs N"),
    "--env-id": ("--task", "--task NAME"),
    "--learning-rate": ("--set", "--set ppo.lr=VALUE for the controller's rate"),
}


def unknown_flag_hint(words: Sequence[str], known: Iterable[str]) -> str:
    """The advice after "unrecognized arguments": for the first unknown flag (its part before any "="), this
    command's spelling of another tool's flag, else the closest flag, else where to look."""
    known = list(known)
    flag = next((w.split("=", 1)[0] for w in words if w.startswith("-")), None)
    ours, advice = FOREIGN_FLAGS.get(flag, (None, None))
    if ours in known:
        return f" (use {advice})"
    close = closest(flag, known) if flag else None
    return f" (did you mean {close}?)" if close else " (see --help)"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """" (did you mean 'X'?)" for the closest of `choices` to `word`, or ""."""
    close = closest(str(word), choices)
    return f" (did you mean {close!r}?)" if close else ""


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice most like `word` (difflib's ratio of at least 0.6), or None."""
    import difflib

    return next(iter(difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)), None)


def with_markdown_help(add: Any, args: tuple, kwargs: dict[str, Any]) -> argparse.Action:
    """argparse's `add(*args, **kwargs)` with `help` written in markdown: plain (backticks dropped, % escaped:
    help is text, never a format string) in `--help`, kept as `action.markdown_help` for docs/CLI.md's table."""
    text = kwargs.get("help")
    if isinstance(text, str):
        kwargs["help"] = text.replace("`", "").replace("%", "%%")  # argparse formats help with %
    action = add(*args, **kwargs)
    action.markdown_help = text  # type: ignore[attr-defined]
    return action


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
