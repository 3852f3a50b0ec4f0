"""The command line built from the config: the flags generated from the fields of `TrainingConfig` and of
its nested configs, `--set KEY=VALUE` (train and prove), and the flag table of docs/CLI.md. The parser base is
`esper_fx.command.CommandParser`.

Every setting is declared once, on its field, with `option(default, help, flag=..., metavar=..., resume=...)`
(`esper_fx.contracts.run_settings`, also `rl.config.option`): the run's in `esper_fx.config` (those the hosts read
in `esper_fx.contracts.run_settings.HostSettings`, which it inherits), the nested configs' (`ppo`, `reward`,
`heuristic`, `oracle`, `reinforce`) in `rl.config`. `add_field_flags` turns those declarations into argparse flags, one argument group per config
(the number of values and the switch direction read from the field's annotation and default; a nested one is
`--group.key`, the dashed `--set` key), `field_values` reads them back through the same reading and key
resolution as `--set` (`_set_value`, `_put`), and `flag_table` renders docs/CLI.md's table from the same parser.
We generate the flags ourselves rather than with a library such as tyro: none is installed, the project adds
no dependency for a few dozen lines, and today's flag spellings (`--episodes`, `--data-dir`,
`--no-tensorboard`) are a contract that a generic tool would rename.

    python -m esper_fx.cli.flag_table          # print the flag table of `python -m esper_fx.train`
    python -m esper_fx.cli.flag_table --write  # write it, with its introduction, to docs/CLI.md

Imports neither torch nor jax: a bad command line is rejected before either loads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import types
import typing
from dataclasses import MISSING, dataclass, fields
from enum import Enum
from typing import Any, Iterable, Mapping, Sequence

from esper_fx.command import did_you_mean, with_markdown_help
from esper_fx.configuration.keys import settable_keys
from esper_fx.config import (
    GROUP_FIELDS as KEYS_OF_GROUP, GROUP_OF_KEY, MOVED_KEYS, OLD_KEYS, TrainingConfig, flat_view, old_keys,
    old_spellings_note, refuse_unsettable,
)
from esper_fx.errors import ConfigError
from rl.config import field_names

# Every nested config (a group, `ppo` and `reward`, or a section: `esper_fx.config.GROUPS`, `SECTIONS`) is set key
# by key with `--set name.key=VALUE` (`--name.key VALUE`), merged onto the base config's.
# The config's groups as the command line shows them, in order: the run's own fields ("run"), then each nested
# config (a field of TrainingConfig), each with the dataclass that declares its fields and the fields settable
# from the command line (the reward's: its settings and constants, those the run gives it left out).
RUN = "run"
NESTED: Mapping[str, type] = {f.name: f.default_factory for f in fields(TrainingConfig)
                              if f.default_factory is not MISSING}
GROUP_FIELDS: Mapping[str, tuple[str, ...]] = {
    RUN: tuple(name for name in field_names(TrainingConfig) if name not in NESTED),
    **{name: KEYS_OF_GROUP[name] if name in KEYS_OF_GROUP else field_names(cls) for name, cls in NESTED.items()},
}
GROUP_HELP: Mapping[str, str] = {
    RUN: "the run's own fields",
    **{f.name: f.metadata["help"] for f in fields(TrainingConfig) if f.name in NESTED},
}


# ----------------------------------------------------------------------------------------------
# flags generated from the fields
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldFlag:
    """One setting's flag, as declared on its field (`option`)."""

    group: str  # "run", or the nested config holding the field ("ppo", "reward", ...)
    field: str  # the field's name in its dataclass
    key: str  # its `--set` key and the flag's dest: `field` for the run's, `group.field` for a nested one
    flag: str
    help: str
    metavar: str | None
    kind: str  # "value" (one value), "list" (one or more), "switch_on" / "switch_off" (no value)
    text: bool  # the values are strings, taken as given; any other value is read as JSON, as `--set` reads it
    resume: bool


def field_flags(group: str | None = None) -> tuple[FieldFlag, ...]:
    """The flag of every settable field (of one group, or of all), in the groups' order, then declaration order."""
    return tuple(ff for name in GROUP_FIELDS if group in (None, name) for ff in _group_flags(name))


def _group_flags(group: str) -> tuple[FieldFlag, ...]:
    cls = TrainingConfig if group == RUN else NESTED[group]
    hints = typing.get_type_hints(cls)
    return tuple(_field_flag(group, f, hints[f.name]) for f in fields(cls) if f.name in GROUP_FIELDS[group])


def _field_flag(group: str, f: Any, hint: Any) -> FieldFlag:
    meta = f.metadata
    base = _without_none(hint)
    key = f.name if group == RUN else f"{group}.{f.name}"
    dashed = "--" + key.replace("_", "-")
    kind = "list" if typing.get_origin(base) is tuple else "value"
    each = typing.get_args(base)[0] if kind == "list" else base  # the type of one value
    metavar = meta.get("metavar") or _default_metavar(each)
    default_flag = dashed
    if base is bool and group == RUN:
        kind = "switch_off" if f.default else "switch_on"
        default_flag = "--no-" + dashed[2:] if f.default else dashed
        metavar = None
    text = isinstance(each, type) and issubclass(each, str)
    return FieldFlag(group=group, field=f.name, key=key, flag=meta.get("flag") or default_flag, help=meta["help"],
                     metavar=metavar, kind=kind, text=text, resume=bool(meta.get("resume")))


def _without_none(hint: Any) -> Any:
    """`X | None` -> X; anything else unchanged."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else hint
    return hint


def _default_metavar(base: Any) -> str:
    if isinstance(base, type) and issubclass(base, Enum):
        return "|".join(str(member.value) for member in base)
    if base is bool:
        return "true|false"
    return {int: "N", float: "X"}.get(base, "VALUE")


def add_field_flags(parser: argparse.ArgumentParser, names: Iterable[str] | None = None) -> None:
    """Add the flags of the settable fields, one argument group per config group (all flags, or those whose
    key is in `names`); an unset flag parses as None."""
    wanted = None if names is None else set(names)
    for group in GROUP_FIELDS:
        flags = [ff for ff in field_flags(group) if wanted is None or ff.key in wanted]
        if not flags:
            continue
        section = parser.add_argument_group(group, _group_description(group))
        for ff in flags:
            if ff.kind.startswith("switch"):
                kwargs = {"action": "store_true" if ff.kind == "switch_on" else "store_false"}
            else:
                kwargs = {"metavar": ff.metavar, "nargs": "+" if ff.kind == "list" else None}
            with_markdown_help(section.add_argument, (ff.flag,), {"dest": ff.key, "default": None, "help": ff.help,
                                                                   **kwargs})


def _group_description(group: str) -> str:
    return _group_heading(group).replace("`", "").replace("%", "%%")


def command_line_changes(sets: Mapping[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The command line's changes: the `--set` items (`sets`, from `parse_sets`), then the field flags on top;
    a nested config's keys from both are merged (`--reinforce.lr 3e-3 --set reinforce.hidden_dim=32` sets
    both), a key given both ways takes the flag's value."""
    out = dict(sets)
    for key, value in field_values(args).items():
        both = key in NESTED and isinstance(out.get(key), Mapping) and isinstance(value, Mapping)
        out[key] = {**out[key], **value} if both else value
    return out


def field_values(args: argparse.Namespace) -> dict[str, Any]:
    """The settings whose flags were given, as config changes (the shape `parse_sets` gives): each value read
    as `--set` reads it (a string field's value as given) and put where `--set` puts it."""
    out: dict[str, Any] = {}
    for ff in field_flags():
        raw = getattr(args, ff.key, None)
        if raw is None:
            continue
        if ff.text or ff.kind.startswith("switch"):
            value = raw
        else:
            value = [_set_value(ff.key, w) for w in raw] if ff.kind == "list" else _set_value(ff.key, raw)
        _put(out, ff.key, value, f"{ff.flag} {raw}")
    return out


# ----------------------------------------------------------------------------------------------
# --set KEY=VALUE
# ----------------------------------------------------------------------------------------------

SET_HELP = ("set any config field: a field of the run (`max_train_batches=8`), a key of a nested config as its "
            "path, as a config file nests it (`learner.gamma=0.9`, `reward.reward_family=accuracy`, "
            "`reward.probation_base=4`, `oracle.slot=r0c1`, `heuristic.blend=linear`); VALUE is read as JSON, else "
            "as a string; repeatable")


def add_set_option(parser: argparse.ArgumentParser) -> None:
    with_markdown_help(parser.add_argument, ("--set",), {"action": "append", "default": [], "metavar": "KEY=VALUE",
                                                          "dest": "sets", "help": SET_HELP})


def parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """`--set` items as config changes: a VALUE that parses as JSON is taken as JSON, else as a string; a
    `name.key` sets one field of a nested config ({name: {key: value}}); a key of an earlier version (`lr`,
    `reward_mode`: `esper_fx.config.OLD_KEYS`) is read as today's (`old_set_keys` finds them for the note).
    Raises ConfigError naming an item that is not KEY=VALUE or a key that is no config field."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects KEY=VALUE (got {_shown(item)})")
        _put(out, key, _set_value(key, raw), f"--set {item}")
    return out


def _put(out: dict[str, Any], key: str, value: Any, given: str) -> None:
    """Put one setting into the config changes `out`, where the config's JSON holds it: a nested config's key
    under its name ({name: {key: value}}; an earlier version's key, `lr`, where today's, `ppo.lr`, goes), any
    other field as itself. Raises ConfigError (naming `given`) for an unknown key, and for a field the run
    gives the reward (naming the run's setting)."""
    key = OLD_KEYS.get(key, key) if "." not in key else MOVED_KEYS.get(key, key)
    section, dot, name = key.partition(".")
    if not dot:
        _check_key(key, given)
        out[key] = value
    elif section in GROUP_FIELDS and section != RUN and name in GROUP_FIELDS[section]:
        out.setdefault(section, {})[name] = value
    else:
        try:
            refuse_unsettable([key])
        except ValueError as exc:
            raise ConfigError(f"{given}: {exc}") from None
        raise ConfigError(f"{given}: unknown config key {key!r}{did_you_mean(key, settable_keys(TrainingConfig))}")


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


def old_set_keys(items: Sequence[str]) -> list[str]:
    """The keys of earlier versions (`OLD_KEYS`: `lr`, `reward_mode`) the `--set` items use (`reward.NAME` is
    today's path on the command line, an old key only at the top level of a file)."""
    keys = [item.partition("=")[0] for item in items]
    return old_keys({key: None for key in keys if "." not in key}) + [key for key in keys if key in MOVED_KEYS]


def note_old_spellings(keys: Iterable[str]) -> None:
    """Print the one line naming today's key of each key of an earlier version the command was given (a
    config file's or a `--set` item's; `esper_fx.config.old_spellings_note`), if any, to stderr."""
    note = old_spellings_note(keys)
    if note is not None:
        print(note, file=sys.stderr)


def _check_key(key: str, given: str) -> None:
    if key in GROUP_FIELDS[RUN] or key in NESTED:
        return
    if f"reward.{key}" in GROUP_OF_KEY:
        raise ConfigError(f"{given}: {key!r} is a constant of the reward: its key is 'reward.{key}'")
    raise ConfigError(f"{given}: unknown config key {key!r}{did_you_mean(key, settable_keys(TrainingConfig))} (a "
                      f"field of TrainingConfig, or name.key for {', '.join(NESTED)}, such as 'ppo.lr')")


def with_sections(base: TrainingConfig, changes: Mapping[str, Any]) -> dict[str, Any]:
    """`changes` with each nested config's keys merged onto `base`'s (the other keys keep theirs)."""
    out = dict(changes)
    kept = base.to_dict(every_constant=True)
    for name in NESTED:
        if name in out:
            if not isinstance(out[name], Mapping):
                raise ConfigError(f"{name} must be a JSON object of its keys, or set field by field as "
                                  f"{name}.FIELD=VALUE (fields: {', '.join(GROUP_FIELDS[name])}; "
                                  f"got {out[name]!r})")
            out[name] = {**kept[name], **out[name]}
    return out


def refuse_resume_changes(kept: Mapping[str, Any], wanted: Mapping[str, Any], may_change: Iterable[str],
                          kept_by: str = "the checkpoint") -> None:
    """A resume's command line may change only what `may_change` names (`config.RESUME_OVERRIDABLE` for
    `train --resume`): any other setting in `wanted` that differs from the `kept` one (what `kept_by`
    recorded) is refused by name, one line; a nested config's keys are compared one by one, named by their
    path (`ppo.lr`; `esper_fx.config.flat_view`). Shared by `train --resume` and `prove --resume`."""
    allowed = set(may_change)
    kept = flat_view(kept)
    for name, value in flat_view(wanted).items():
        value = list(value) if isinstance(value, (list, tuple)) else value
        if name not in allowed and value != kept.get(name):
            raise ConfigError(f"--resume: {name} cannot change on resume ({kept_by} has {kept.get(name)!r}, "
                              f"the command line {value!r})")


def typed_path(path: str, first_cwd: str | None, flag: str, command: str) -> str:
    """A path typed on a resume (`train --resume`'s `--data-dir`, prove's `--json`, ...), absolute: an absolute
    one as it is; a relative one against the first start's folder `first_cwd` (None: unknown, this folder),
    which is this one when the resume runs where the first start ran; from another folder a line on stderr
    says so, naming `command` (the run's files are where its first start put them)."""
    if os.path.isabs(path):
        return os.path.normpath(path)
    here = os.getcwd()
    first_cwd = first_cwd or here
    if os.path.realpath(here) != os.path.realpath(first_cwd):
        print(f"{command}: {flag} {path}: a relative path, read from the first start's folder {first_cwd} "
              f"(this resume runs in {here})", file=sys.stderr)
    return os.path.normpath(os.path.join(first_cwd, path))


# ----------------------------------------------------------------------------------------------
# The flag table (docs/CLI.md)
# ----------------------------------------------------------------------------------------------


def flag_table(parser: argparse.ArgumentParser) -> str:
    """The parser's options as docs/CLI.md's markdown table, a row per option and a heading row per config group:
    flag, the config key it sets (its `--set` key; — for options of the command itself), whether it may change
    on `--resume`, and its help."""
    by_key = {ff.key: ff for ff in field_flags()}
    rows = ["| flag | field | on `--resume` | meaning |", "|---|---|---|---|"]
    for group in parser._action_groups:  # argparse keeps no public list of its groups and actions
        if group.title in GROUP_FIELDS:
            rows.append(f"| **{group.title}** | | | {_escape(_group_heading(group.title))} |")
        for action in group._group_actions:
            if isinstance(action, argparse._HelpAction) or not action.option_strings:
                continue
            ff = by_key.get(action.dest)
            resume = "may change" if ff is not None and ff.resume else ""
            meaning = getattr(action, "markdown_help", None) or action.help or ""
            rows.append(f"| {_flag_cell(action)} | {ff.key if ff else '—'} | {resume} | {_escape(meaning)} |")
    return "\n".join(rows)


def _group_heading(group: str) -> str:
    return GROUP_HELP[group] if group == RUN else f"{GROUP_HELP[group]}; also `--set {group}.KEY=VALUE`"


def _flag_cell(action: argparse.Action) -> str:
    flag = action.option_strings[0]
    if action.nargs == 0:
        return f"`{flag}`"
    metavar = action.metavar or action.dest.upper()
    more = " …" if action.nargs == "+" else ""
    return f"`{flag} {metavar}{more}`".replace("|", "\\|")


def _escape(text: str) -> str:
    return text.replace("|", "\\|")

