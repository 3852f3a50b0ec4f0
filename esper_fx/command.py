"""What the commands (train, prove, report, bench, doctor) say besides their errors: the advice after a
mistyped name or flag (`did_you_mean`, `unknown_flag_hint`) and help written in markdown (`with_markdown_help`:
plain in `--help`, kept for docs/CLI.md's table). Imports nothing of the project."""

from __future__ import annotations

import argparse
from typing import Any, Iterable, Sequence

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
