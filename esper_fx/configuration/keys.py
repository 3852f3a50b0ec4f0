"""The run's keys, on disk and on the command line: which key sets which field, a config from keyword
arguments (`nest`), to and from JSON (`ConfigFile`: `to_dict`, `from_dict`, `from_saved`, `from_json`,
`preset`), and what a saved config of an earlier version reads as today (`upgrade_saved`).

The PPO fields and the reward's settings keep their flat names as keys (`lr`, `reward_mode`); the reward's
constants are the keys `reward.NAME`, saved only when changed from their defaults; the fields the run gives
the reward (`rl.config.REWARD_FROM_RUN`) have no key. Each section (`sections_of`) is one JSON object under its
name, set key by key on the command line (`--set section.key=VALUE`, `--section.key VALUE`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import fields
from enum import StrEnum
from pathlib import Path
from typing import Any, Iterable, Mapping, Self

from esper_fx.command import did_you_mean
from esper_fx.configuration.choices import RETIRED_FIELDS, RETIRED_TELEMETRY_LEVELS, TelemetryLevel
from esper_fx.presets import PRESET_NAMES, PRESETS
from rl.config import PPOConfig, REWARD_CONSTANTS, REWARD_FROM_RUN, REWARD_SETTINGS, RewardConfig, field_names

# The nested groups whose fields are keys of the run (its JSON, `TrainingConfig(...)`, `replace`): group field ->
# its dataclass, and each key of a group -> the field it sets: every PPO field and the reward's settings by their
# own names (flat keys), the reward's constants as `reward.NAME` (saved only when changed from their defaults, so
# a default config's JSON is the one of before they were keys). The fields the run gives the reward
# (`rl.config.REWARD_FROM_RUN`) have no key: each is decided by a setting of the run.
FLAT_GROUPS: Mapping[str, type] = {"ppo": PPOConfig, "reward": RewardConfig}
GROUP_KEYS: Mapping[str, Mapping[str, str]] = {
    "ppo": {name: name for name in field_names(PPOConfig)},
    "reward": {**{name: name for name in REWARD_SETTINGS}, **{f"reward.{name}": name for name in REWARD_CONSTANTS}},
}
GROUP_OF_KEY: Mapping[str, str] = {key: group for group, keys in GROUP_KEYS.items() for key in keys}


def sections_of(cls: type) -> dict[str, type]:
    """The nested sections of the config class `cls` (`esper_fx.config.SECTIONS`), read from its declaration:
    each field holding a nested config (declared with a `factory`) other than a flat group, saved as one JSON
    object under its name and set key by key on the command line (`--set section.key=VALUE`,
    `--section.key VALUE`)."""
    return {f.name: f.default_factory for f in fields(cls)
            if f.default_factory is not dataclasses.MISSING and f.name not in FLAT_GROUPS}


def nest(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """Every field of the config class `cls`: given in `values`, or its default; group keys (`lr`,
    `reward.probation_base`) applied on top of their group."""
    known = set(field_names(cls))
    unknown = sorted(k for k in values if k not in known and k not in GROUP_OF_KEY)
    refuse_unsettable(unknown)
    if unknown:
        raise TypeError(f"{cls.__name__} got unexpected keyword argument(s) {unknown}")
    out: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in values:
            out[f.name] = values[f.name]
        else:
            out[f.name] = f.default_factory() if f.default is dataclasses.MISSING else f.default
    for group, group_cls in FLAT_GROUPS.items():
        given = {name: values[key] for key, name in GROUP_KEYS[group].items() if key in values}
        base = out[group]
        if not isinstance(base, group_cls):
            raise ValueError(f"{group} must be a {group_cls.__name__} (got {base!r})")
        if given:
            out[group] = dataclasses.replace(base, **given)
    return out


def refuse_unsettable(keys: Iterable[str]) -> None:
    """Refuse, in one line saying what to do instead, the first of `keys` (sorted) that is a retired field or
    `reward.NAME` of a field the run gives the reward (`rl.config.REWARD_FROM_RUN`); any other key passes."""
    for key in sorted(keys):
        if key in RETIRED_FIELDS:
            raise ValueError(f"config key {key!r} was removed ({RETIRED_FIELDS[key]}): delete it")
        group, _, name = key.partition(".")
        if group == "reward" and name in REWARD_FROM_RUN:
            raise ValueError(f"{key} is taken from the run: set {REWARD_FROM_RUN[name]} instead")


def upgrade_saved(d: Mapping[str, Any]) -> dict[str, Any]:
    """A saved config of an earlier version in today's keys: retired fields dropped, a retired telemetry
    level read as "normal" ("off" had already set use_telemetry to false in the saved config)."""
    if not isinstance(d, Mapping):
        return d
    out = {k: v for k, v in d.items() if k not in RETIRED_FIELDS}
    if out.get("telemetry_level") in RETIRED_TELEMETRY_LEVELS:
        out["telemetry_level"] = TelemetryLevel.NORMAL.value
    return out


def plain(value: Any) -> Any:
    """A field's value as JSON holds it: an enum as its value, a tuple as a list."""
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


class ConfigFile:
    """The config's JSON: `to_dict` and the ways back (a mixin of `esper_fx.config.TrainingConfig`)."""

    def to_dict(self, every_constant: bool = False) -> dict[str, Any]:
        """Plain JSON values: the nested PPO and reward groups spliced in as their keys (`GROUP_KEYS`), a reward
        constant only when changed from its default (`every_constant`: each one, as a resume compares them)."""
        out: dict[str, Any] = {}
        sections = sections_of(type(self))
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in FLAT_GROUPS:
                default = type(value)()
                out.update({key: plain(getattr(value, name)) for key, name in GROUP_KEYS[f.name].items()
                            if key == name or every_constant or getattr(value, name) != getattr(default, name)})
            elif f.name in sections:
                out[f.name] = value.to_dict()
            else:
                out[f.name] = plain(value)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Self:
        if not isinstance(d, Mapping):
            raise ValueError(f"a config must be a JSON object (got {type(d).__name__})")
        refuse_unsettable(d)
        known = set(field_names(cls)) - set(FLAT_GROUPS) | set(GROUP_OF_KEY)
        unknown = sorted(k for k in d if k not in known)
        for name, section in sections_of(cls).items():
            if isinstance(d.get(name), Mapping):
                unknown += sorted(f"{name}.{k}" for k in d[name] if k not in field_names(section))
        if unknown:
            raise ValueError(f"Unknown config keys: {unknown}")
        return cls(**dict(d))

    @classmethod
    def from_saved(cls, d: Mapping[str, Any]) -> Self:
        """A config this project wrote (a checkpoint's manifest, a run's config.json), from any version."""
        return cls.from_dict(upgrade_saved(d))

    @classmethod
    def from_json(cls, path: str | Path, saved: bool = False) -> Self:
        """A config file; `saved`: one this project wrote (retired fields are dropped, not refused)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ValueError(f"config file not found: {path}") from None
        except OSError as exc:
            raise ValueError(f"cannot read config file {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise ValueError(f"config file {path} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"config file {path} is not valid JSON: {exc.msg} at line {exc.lineno} "
                             f"column {exc.colno}") from None
        if not isinstance(data, dict):
            raise ValueError(f"config file {path} must hold a JSON object at the top level")
        return cls.from_saved(data) if saved else cls.from_dict(data)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> Self:
        """A preset's config (BEHAVIOUR §14.3), `overrides` applied."""
        key = str(name).lower()
        if key not in PRESETS:
            raise ValueError(f"unknown preset {name!r}{did_you_mean(key, PRESET_NAMES)}; available: "
                             f"{list(PRESET_NAMES)}")
        return cls(**{**PRESETS[key], **overrides})
