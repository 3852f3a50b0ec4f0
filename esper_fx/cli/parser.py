"""The command line built from the config: the flags generated from `TrainingConfig`'s fields,
`--set KEY=VALUE` (train and prove), and README's flag table. The parser base is `esper_fx.errors.CommandParser`.

Each configuration field a user sets from the command line is declared once, in `esper_fx.config`, with
`option(default, help, flag=..., metavar=..., resume=...)`; `add_field_flags` turns those declarations
into argparse flags (the type, the number of values and the switch direction read from the field's
annotation and default), `field_values` reads them back, and `flag_table` renders README's table from the
same parser. We generate the flags ourselves rather than with a library such as tyro: none is installed,
the project adds no dependency for a few dozen lines, and today's flag spellings (`--episodes`,
`--data-dir`, `--no-tensorboard`) are a contract that a generic tool would rename.

    python -m esper_fx.cli.flag_table      # print README's flag table for `python -m esper_fx.train`

Imports neither torch nor jax: a bad command line is rejected before either loads.
"""

from __future__ import annotations

import argparse
import json
import types
import typing
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, Iterable, Mapping, Sequence

from esper_fx.config import FLAT_GROUPS, GROUP_OF_KEY, HeuristicConfig, OracleConfig, TrainingConfig
from esper_fx.errors import ConfigError, with_markdown_help
from rl.config import field_names

# The nested sections set key by key with `--set section.key=VALUE`, merged onto the base config's section.
SECTIONS: Mapping[str, type] = {"heuristic": HeuristicConfig, "oracle": OracleConfig}


# ----------------------------------------------------------------------------------------------
# flags generated from the fields
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldFlag:
    """One field's flag, as declared on the field (`esper_fx.config.option`)."""

    field: str
    flag: str
    help: str
    metavar: str | None
    kind: str  # "value" (one value), "list" (one or more), "switch_on" / "switch_off" (no value)
    type: type
    resume: bool


def field_flags(cls: type = TrainingConfig) -> tuple[FieldFlag, ...]:
    """Every field of `cls` declared with a help text, in declaration order."""
    hints = typing.get_type_hints(cls)
    return tuple(_field_flag(f, hints[f.name]) for f in fields(cls) if f.metadata.get("help"))


def _field_flag(f: Any, hint: Any) -> FieldFlag:
    meta = f.metadata
    base = _without_none(hint)
    if base is bool:
        kind = "switch_off" if f.default else "switch_on"
        default_flag = ("--no-" if f.default else "--") + f.name.replace("_", "-")
        metavar = None
    else:
        kind = "list" if typing.get_origin(base) is tuple else "value"
        default_flag = "--" + f.name.replace("_", "-")
        metavar = meta.get("metavar") or _default_metavar(base)
    return FieldFlag(field=f.name, flag=meta.get("flag") or default_flag, help=meta["help"], metavar=metavar,
                     kind=kind, type=int if base is int else str, resume=bool(meta.get("resume")))


def _without_none(hint: Any) -> Any:
    """`X | None` -> X; anything else unchanged."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else hint
    return hint


def _default_metavar(base: Any) -> str:
    if isinstance(base, type) and issubclass(base, Enum):
        return "|".join(str(member.value) for member in base)
    return "N" if base is int else "VALUE"


def add_field_flags(parser: argparse.ArgumentParser, names: Iterable[str] | None = None) -> None:
    """Add the flags of the declared fields (all, or those in `names`); an unset flag parses as None."""
    wanted = None if names is None else set(names)
    for ff in field_flags():
        if wanted is not None and ff.field not in wanted:
            continue
        if ff.kind.startswith("switch"):
            kwargs = {"action": "store_true" if ff.kind == "switch_on" else "store_false"}
        else:
            kwargs = {"type": ff.type, "metavar": ff.metavar, "nargs": "+" if ff.kind == "list" else None}
        with_markdown_help(parser.add_argument, (ff.flag,), {"dest": ff.field, "default": None, "help": ff.help,
                                                               **kwargs})


def field_values(args: argparse.Namespace) -> dict[str, Any]:
    """The fields whose flags were given, as {field: value}."""
    return {ff.field: getattr(args, ff.field) for ff in field_flags()
            if getattr(args, ff.field, None) is not None}


# ----------------------------------------------------------------------------------------------
# --set KEY=VALUE
# ----------------------------------------------------------------------------------------------

SET_HELP = ("set any config field: a flat key (`lr=1e-3`, `reward_family=accuracy`, `max_train_batches=8`), "
            "a PPO or reward key under its group (`ppo.gamma=0.9`), or a key of a nested section "
            "(`oracle.slot=r0c1`, `heuristic.blend=linear`); VALUE is read as JSON, else as a string; repeatable")


def add_set_option(parser: argparse.ArgumentParser) -> None:
    with_markdown_help(parser.add_argument, ("--set",), {"action": "append", "default": [], "metavar": "KEY=VALUE",
                                                          "dest": "sets", "help": SET_HELP})


def parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """`--set` items as config changes: a VALUE that parses as JSON is taken as JSON, else as a string; a
    `section.key` sets one field of a nested section ({section: {key: value}}), a `ppo.key` / `reward.key`
    its flat key. Raises ConfigError naming an item that is not KEY=VALUE or a key that is no config field."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects KEY=VALUE (got {_shown(item)})")
        value = _set_value(key, raw)
        section, dot, name = key.partition(".")
        if not dot:
            _check_key(key, item)
            out[key] = value
        elif section in SECTIONS and name in field_names(SECTIONS[section]):
            out.setdefault(section, {})[name] = value
        elif section in FLAT_GROUPS and GROUP_OF_KEY.get(name) == section:
            out[name] = value
        else:
            raise ConfigError(f"--set {item}: unknown config key {key!r}")
    return out


def _set_value(key: str, raw: str) -> Any:
    """A `--set` VALUE read as JSON, else kept as a string. JSON that Python cannot hold (an integer of more
    than `sys.get_int_max_str_digits()` digits, arrays nested past the recursion limit) is a ConfigError
    naming the key."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw
    except (ValueError, RecursionError) as exc:
        what = "is nested too deeply" if isinstance(exc, RecursionError) else "is a number too long to read"
        raise ConfigError(f"--set {key}: the value {_shown(raw)} {what} ({len(raw)} characters); give a "
                          f"value of the field's type") from None


def _shown(text: str, limit: int = 40) -> str:
    """`text` quoted, cut to `limit` characters (a line must stay a line whatever was passed)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def _check_key(key: str, item: str) -> None:
    if key in GROUP_OF_KEY or (key in field_names(TrainingConfig) and key not in FLAT_GROUPS):
        return
    raise ConfigError(f"--set {item}: unknown config key {key!r} (a field of TrainingConfig, a PPO or reward "
                      f"key such as 'lr', or section.key for {', '.join(SECTIONS)})")


def with_sections(base: TrainingConfig, changes: Mapping[str, Any]) -> dict[str, Any]:
    """`changes` with each nested section's keys merged onto `base`'s section (the other keys keep theirs)."""
    out = dict(changes)
    for name in SECTIONS:
        if name in out:
            if not isinstance(out[name], Mapping):
                raise ConfigError(f"{name} must be a JSON object of its keys, or set field by field as "
                                  f"{name}.FIELD=VALUE (fields: {', '.join(field_names(SECTIONS[name]))}; "
                                  f"got {out[name]!r})")
            out[name] = {**getattr(base, name).to_dict(), **out[name]}
    return out


# ----------------------------------------------------------------------------------------------
# README's flag table
# ----------------------------------------------------------------------------------------------


def flag_table(parser: argparse.ArgumentParser) -> str:
    """The parser's options as README's markdown table: flag, the config field it sets (— for options of the
    command itself), whether it may change on `--resume`, and its help."""
    by_field = {ff.field: ff for ff in field_flags()}
    rows = ["| flag | field | on `--resume` | meaning |", "|---|---|---|---|"]
    for action in parser._actions:  # argparse keeps no public list of its actions
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        ff = by_field.get(action.dest)
        resume = "may change" if ff is not None and ff.resume else ""
        meaning = getattr(action, "markdown_help", None) or action.help or ""
        rows.append(f"| {_flag_cell(action)} | {ff.field if ff else '—'} | {resume} | {_escape(meaning)} |")
    return "\n".join(rows)


def _flag_cell(action: argparse.Action) -> str:
    flag = action.option_strings[0]
    if action.nargs == 0:
        return f"`{flag}`"
    metavar = action.metavar or action.dest.upper()
    more = " …" if action.nargs == "+" else ""
    return f"`{flag} {metavar}{more}`".replace("|", "\\|")


def _escape(text: str) -> str:
    return text.replace("|", "\\|")

