"""The run's keys, on disk and on the command line: which key sets which field, a config from keyword
arguments (`nest`), to and from JSON (`ConfigFile`: `to_dict`, `from_dict`, `from_saved`, `from_json`,
`preset`), and what a saved config of an earlier version reads as today (`upgrade_saved`).

One key style: a field of a nested config is a key of its group, on disk nested under the group's name and on
the command line the same path written with a dot. The groups are `learner` (what every learning controller
reads: γ, GAE's λ, the last epoch's bootstrap), `ppo` (every PPO field), `reward` (the
reward's settings and its constants; a constant is saved only when changed from its default) and the sections
(`sections_of`: `heuristic`, `oracle`, `reinforce`); the run's own fields are top-level keys. So
`{"ppo": {"lr": 0.001}, "reward": {"reward_family": "loss", "probation_base": 4}}` on disk is
`--set ppo.lr=0.001 --set reward.reward_family=loss --set reward.probation_base=4` (or `--ppo.lr 0.001`). The
fields the run gives the reward (`rl.config.REWARD_FROM_RUN`) have no key.

Earlier versions wrote the PPO fields and the reward's settings as top-level keys (`lr`, `reward_mode`) and the
reward's constants as top-level `reward.NAME` keys (`OLD_KEYS`), and the learner's fields in the controllers'
sections (`MOVED_KEYS`: `ppo.gamma`, `reinforce.gamma`). Those spellings still read: silently in a
config this project saved (`upgrade_saved`, `from_saved`), with one line naming today's key when a person wrote
them (`old_spellings_note`, printed by the commands); and as keyword arguments of `TrainingConfig(...)` and
`replace` (`GROUP_KEYS`), which are the Python API, not keys.
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
from rl.config import (
    LearnerConfig, PPOConfig, REWARD_CONSTANTS, REWARD_FROM_RUN, REWARD_SETTINGS, RewardConfig, field_names,
)

# The groups of fields that are not sections: group field -> its dataclass. Each field of a group is a key of
# it: every PPO field, the reward's settings and its constants (a constant saved only when changed from its
# default, so a default config's JSON holds none). The fields the run gives the reward
# (`rl.config.REWARD_FROM_RUN`) have no key: each is decided by a setting of the run.
GROUPS: Mapping[str, type] = {"learner": LearnerConfig, "ppo": PPOConfig, "reward": RewardConfig}
GROUP_FIELDS: Mapping[str, tuple[str, ...]] = {
    "learner": field_names(LearnerConfig), "ppo": field_names(PPOConfig),
    "reward": (*REWARD_SETTINGS, *REWARD_CONSTANTS),
}
# The keyword arguments of `TrainingConfig(...)` and `replace` that set one field of a group (the Python API):
# group -> {keyword: field}; a PPO field or a reward setting by its own name (`lr=...`), a reward constant as
# `**{"reward.NAME": ...}`. They are also the keys earlier versions saved at the top level (`OLD_KEYS`).
GROUP_KEYS: Mapping[str, Mapping[str, str]] = {
    "learner": {name: name for name in field_names(LearnerConfig)},
    "ppo": {name: name for name in field_names(PPOConfig)},
    "reward": {**{name: name for name in REWARD_SETTINGS}, **{f"reward.{name}": name for name in REWARD_CONSTANTS}},
}
GROUP_OF_KEY: Mapping[str, str] = {key: group for group, keys in GROUP_KEYS.items() for key in keys}
# The top-level keys of earlier versions' config files -> today's key, as a path (`lr` -> `ppo.lr`,
# `reward_mode` -> `reward.reward_mode`, a top-level `reward.probation_base` -> `reward.probation_base` nested).
# (`gamma`, a PPO field then, is `learner.gamma` now.)
OLD_KEYS: Mapping[str, str] = {key: f"{group}.{name}" for group, keys in GROUP_KEYS.items()
                               for key, name in keys.items()}
# The learner's fields of earlier versions' nested keys, where a controller's section held them: each its
# controllers' (`ppo.gamma` was read by every learning controller but `reinforce`, which read `reinforce.gamma`).
MOVED_KEYS: Mapping[str, str] = {"ppo.gamma": "learner.gamma", "ppo.gae_lambda": "learner.gae_lambda",
                                 "ppo.horizon_bootstrap": "learner.horizon_bootstrap",
                                 "reinforce.gamma": "learner.gamma"}


def sections_of(cls: type) -> dict[str, type]:
    """The nested sections of the config class `cls` (`esper_fx.config.SECTIONS`), read from its declaration:
    each field holding a nested config (declared with a `factory`) other than a group (`GROUPS`), saved as one
    JSON object under its name and set key by key on the command line (`--set section.key=VALUE`,
    `--section.key VALUE`)."""
    return {f.name: f.default_factory for f in fields(cls)
            if f.default_factory is not dataclasses.MISSING and f.name not in GROUPS}


def nested_keys(cls: type) -> dict[str, tuple[str, ...]]:
    """Every nested config of the config class `cls` (the groups, then the sections) -> its keys."""
    return {**GROUP_FIELDS, **{name: field_names(section) for name, section in sections_of(cls).items()}}


def nest(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """Every field of the config class `cls`: given in `values`, or its default. A group (`ppo`, `reward`) is
    given as its dataclass or as a mapping of its keys (applied over its defaults); a group's keyword (`lr`,
    `reward.probation_base`, `GROUP_KEYS`) is applied on top of its group."""
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
    for group, group_cls in GROUPS.items():
        base = out[group]
        if isinstance(base, Mapping):
            refuse_unknown_group_keys(group, base)
            base = group_cls(**base)
        if not isinstance(base, group_cls):
            raise ValueError(f"{group} must be a {group_cls.__name__} or a mapping of its keys (got {base!r})")
        given = {name: values[key] for key, name in GROUP_KEYS[group].items() if key in values}
        out[group] = dataclasses.replace(base, **given) if given else base
    return out


def refuse_unknown_group_keys(group: str, keys: Iterable[str]) -> None:
    """Refuse a key of the group `group` that it does not have: a field the run gives the reward naming the
    run's setting (`refuse_unsettable`), any other as an unknown `group.key`."""
    wrong = [f"{group}.{key}" for key in keys if key not in GROUP_FIELDS[group]]
    refuse_unsettable(wrong)
    if wrong:
        raise unknown_keys(sorted(wrong), (f"{group}.{key}" for key in GROUP_FIELDS[group]))


def unknown_keys(unknown: list[str], known: Iterable[str]) -> ValueError:
    """'Unknown config keys: [...]', with the known key closest to the first (`did you mean`), if any."""
    return ValueError(f"Unknown config keys: {unknown}{did_you_mean(unknown[0], known)}")


def settable_keys(cls: type) -> list[str]:
    """Every key a config file or `--set` may name: the run's fields and each nested config's `name.key`."""
    nested = nested_keys(cls)
    return [name for name in field_names(cls) if name not in nested] + \
        [f"{name}.{key}" for name, keys in nested.items() for key in keys]


def refuse_unsettable(keys: Iterable[str]) -> None:
    """Refuse, in one line saying what to do instead, the first of `keys` (sorted) that is a retired field or
    `reward.NAME` of a field the run gives the reward (`rl.config.REWARD_FROM_RUN`); any other key passes."""
    for key in sorted(keys):
        if key in RETIRED_FIELDS:
            raise ValueError(f"config key {key!r} was removed ({RETIRED_FIELDS[key]}): delete it")
        if key in MOVED_KEYS:
            raise ValueError(f"{key} is {MOVED_KEYS[key]} now (one γ for every learning controller): set "
                             f"{MOVED_KEYS[key]}")
        group, _, name = key.partition(".")
        if group == "reward" and name in REWARD_FROM_RUN:
            raise ValueError(f"{key} is taken from the run: set {REWARD_FROM_RUN[name]} instead")


def with_old_keys_nested(d: Mapping[str, Any]) -> dict[str, Any]:
    """`d` with each key of an earlier version (`OLD_KEYS`: `lr`, `reward_mode`, a top-level
    `reward.probation_base`) moved into its group's object. A field given both ways is refused, naming both."""
    out = {k: v for k, v in d.items() if k not in OLD_KEYS}
    for key, value in d.items():
        if key not in OLD_KEYS:
            continue
        group, name = OLD_KEYS[key].split(".", 1)
        given = out.get(group, {})
        if not isinstance(given, Mapping):
            raise ValueError(f"{group} must be a JSON object of its keys (got {given!r})")
        if name in given:
            raise ValueError(f"config key {key!r} is an old spelling of {group}.{name}, given as well: keep "
                             f"{group}.{name}")
        out[group] = {**given, name: value}
    return with_learner_keys_moved(out)


def with_learner_keys_moved(d: Mapping[str, Any]) -> dict[str, Any]:
    """`d` with the learner's fields of earlier versions' sections (`MOVED_KEYS`: `ppo.gamma`,
    `reinforce.gamma`) moved into `learner`: the value of the section the run's controller read (`reinforce`'s
    for `reinforce`, `ppo`'s for every other), the other section's dropped (it did nothing). A field given in
    `learner` as well is refused, naming both."""
    moved = moved_keys(d)
    if not moved:
        return dict(d)
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in d.items()}
    learner = out.get("learner", {})
    if not isinstance(learner, Mapping):
        raise ValueError(f"learner must be a JSON object of its keys (got {learner!r})")
    learner, read = dict(learner), read_moved_keys(d)
    for old in moved:
        section, name = old.split(".")
        value = out[section].pop(name)
        if name in d.get("learner", {}):
            raise ValueError(f"config key {old!r} is an old place of {MOVED_KEYS[old]}, given as well: keep "
                             f"{MOVED_KEYS[old]}")
        if old in read:
            learner[name] = value
    out["learner"] = learner
    return out


def moved_keys(d: Mapping[str, Any]) -> list[str]:
    """The learner's keys of earlier versions (`MOVED_KEYS`) the nested config mapping `d` uses."""
    return [old for old in MOVED_KEYS
            if isinstance(d.get(old.split(".")[0]), Mapping) and old.split(".")[1] in d[old.split(".")[0]]]


def read_moved_keys(d: Mapping[str, Any]) -> list[str]:
    """Of `moved_keys(d)`, those the run of `d` read in earlier versions: a `reinforce` run its
    `reinforce.gamma`, every other run `ppo.gamma`; both read `ppo`'s λ and bootstrap."""
    unread = "ppo.gamma" if d.get("controller") == "reinforce" else "reinforce.gamma"
    return [key for key in moved_keys(d) if key != unread]


def old_keys(d: Mapping[str, Any]) -> list[str]:
    """The keys of earlier versions in the config mapping `d`: at its top level (`OLD_KEYS`), in its order, then
    the learner's in a section (`MOVED_KEYS`)."""
    return [key for key in d if key in OLD_KEYS] + moved_keys(d)


def old_spellings_note(keys: Iterable[str]) -> str | None:
    """The one line a command prints when its config file or its `--set` items used keys of earlier versions
    (`OLD_KEYS`), naming today's key of each; None when there was none."""
    keys = list(dict.fromkeys(keys))
    if not keys:
        return None
    today = {**OLD_KEYS, **MOVED_KEYS}
    renamed = ", ".join(f"{key!r} is now {today[key]!r}" if today[key] != key else
                        f"a top-level {key!r} is now {key.split('.', 1)[1]!r} under 'reward'" for key in keys)
    return (f"esper_fx: note: config key {renamed} (a JSON file nests a group's keys under its name, "
            f'{{"ppo": {{"lr": ...}}}}; old spellings still read)')


def upgrade_saved(d: Mapping[str, Any]) -> dict[str, Any]:
    """A saved config of an earlier version in today's keys: retired fields dropped, a retired telemetry
    level read as "normal" ("off" had already set use_telemetry to false in the saved config), the top-level
    keys of the PPO fields and the reward's (`OLD_KEYS`) nested under their group."""
    if not isinstance(d, Mapping):
        return d
    out = {k: v for k, v in d.items() if k not in RETIRED_FIELDS}
    if out.get("telemetry_level") in RETIRED_TELEMETRY_LEVELS:
        out["telemetry_level"] = TelemetryLevel.NORMAL.value
    return with_old_keys_nested(out)


def flat_view(d: Mapping[str, Any]) -> dict[str, Any]:
    """A config's JSON (`to_dict`) with each nested object's keys as paths (`ppo.lr`, `reward.probation_base`,
    `heuristic.blend`) and the run's own keys as they are: the form the resume checks compare key by key and
    name a difference in. A mapping already flat is returned as it is."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, Mapping):
            out.update({f"{key}.{name}": v for name, v in value.items()})
        else:
            out[key] = value
    return out


def legacy_dict(d: Mapping[str, Any]) -> dict[str, Any]:
    """A config's JSON (`to_dict`) in the keys versions before the one key style wrote: the PPO fields and the
    reward's settings at the top level, the reward's constants as top-level `reward.NAME`, the sections nested.
    Only `esper_fx.evaluation.resume.episode_key` reads it: its digest stays the one earlier versions computed,
    so a kept prove folder still finds its episodes (the learner's fields at the top level, as the PPO fields
    they were, and `reinforce.gamma` the learner's γ, its default then as now)."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        if key in GROUPS and isinstance(value, Mapping):
            out.update({(name if name in GROUP_KEYS[key] else f"{key}.{name}"): v for name, v in value.items()})
        else:
            out[key] = value
    if isinstance(out.get("reinforce"), Mapping) and "gamma" in out:
        out["reinforce"] = {**out["reinforce"], "gamma": out["gamma"]}
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
        """Plain JSON values, each nested config one object under its name: a group's keys (`GROUP_FIELDS`; a
        reward constant only when changed from its default, `every_constant`: each one, as a resume compares
        them), a section's `to_dict`."""
        out: dict[str, Any] = {}
        sections = sections_of(type(self))
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in GROUPS:
                default = type(value)()
                out[f.name] = {name: plain(getattr(value, name)) for name in GROUP_FIELDS[f.name]
                               if name not in REWARD_CONSTANTS or every_constant
                               or getattr(value, name) != getattr(default, name)}
            elif f.name in sections:
                out[f.name] = value.to_dict()
            else:
                out[f.name] = plain(value)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Self:
        """A config from its JSON object (a config file a person wrote: a retired key is refused). The keys of
        earlier versions (`OLD_KEYS`) read as today's; the commands say so (`old_spellings_note`)."""
        if not isinstance(d, Mapping):
            raise ValueError(f"a config must be a JSON object (got {type(d).__name__})")
        refuse_unsettable(d)
        d = with_old_keys_nested(d)
        unknown = sorted(k for k in d if k not in field_names(cls))
        for name, keys in nested_keys(cls).items():
            if isinstance(d.get(name), Mapping):
                wrong = [f"{name}.{k}" for k in d[name] if k not in keys]
                refuse_unsettable(wrong)
                unknown += sorted(wrong)
        if unknown:
            raise unknown_keys(unknown, settable_keys(cls))
        return cls(**d)

    @classmethod
    def from_saved(cls, d: Mapping[str, Any]) -> Self:
        """A config this project wrote (a checkpoint's manifest, a run's config.json), from any version."""
        return cls.from_dict(upgrade_saved(d))

    @classmethod
    def from_json(cls, path: str | Path, saved: bool = False) -> Self:
        """A config file; `saved`: one this project wrote (retired fields are dropped, not refused)."""
        data = read_config_json(path)
        return cls.from_saved(data) if saved else cls.from_dict(data)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> Self:
        """A preset's config (BEHAVIOUR §14.3), `overrides` applied."""
        key = str(name).lower()
        if key not in PRESETS:
            raise ValueError(f"unknown preset {name!r}{did_you_mean(key, PRESET_NAMES)}; available: "
                             f"{list(PRESET_NAMES)}")
        return cls(**{**PRESETS[key], **overrides})


def read_config_json(path: str | Path) -> dict[str, Any]:
    """The JSON object of the config file `path`. Raises ValueError, one line naming the file and the problem."""
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
    return data
