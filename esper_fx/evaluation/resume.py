"""What a resumable comparison keeps as it goes, and how it continues (`compare(..., resume=DIR)`, `prove --resume`).

Every finished evaluation episode (the best_fixed search's included) is kept as one small JSON file,
`<DIR>/episodes/<key>.json`, written whole or not at all (`outputs.durable.replace_text`) the moment it is
reported. Its key is a digest of everything the episode's numbers depend on: the arm's name, its
controller, the episode's configuration (seed and per-seed overrides included, the fields a resume may
change left out: `config.RESUME_OVERRIDABLE`) and the trained policy's arrays. A comparison given the same
DIR plays only the episodes it does not hold (`kept_runner`), in the order an unbroken run plays them, so
its table is the unbroken run's. The file holds its key too: a file in an episode's place that is not an
episode, or is another arm's, seed's or configuration's (copied in, or left by another comparison), is not
used: a line on stderr names it and the episode is played again.

A learning arm's training run (`<DIR>/train/<arm>`) is reused when it finished (its summary.json), continued
with train's own resume when it was stopped (a checkpoint, or a config.json before the first one), and
trained from the start when it never began (`trained_run`). A kept run must have been trained with the
configuration the comparison asks for (`ResumeMismatchError` naming the first field that differs).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from esper_fx.config import RESUME_OVERRIDABLE, TrainingConfig, flat_view
from esper_fx.configuration.keys import legacy_dict
from esper_fx.errors import ResumeMismatchError
from esper_fx.outputs.durable import replace_text
from esper_fx.stopping import deferred_stops

EPISODES_DIR = "episodes"
COMMAND_NAME = "prove_command.json"  # in prove's output directory: the first start's command line, for --resume
# what a comparison writes first in its resume folder: a folder holding none of them is the user's, not ours
_OURS = (EPISODES_DIR, "train", COMMAND_NAME)
SUMMARY_NAME = "summary.json"
# what a resume may change (train's list) never changes an episode's numbers: left out of its key
_KEY_IGNORES = frozenset(RESUME_OVERRIDABLE) | {"run_dir", "resume_path"}
_RUN_IGNORES = _KEY_IGNORES - {"n_episodes"}  # a training run: how many episodes it trains is its result


class EpisodeStore:
    """The finished episodes of a comparison, one JSON file each under `<root>/episodes/`."""

    def __init__(self, root: str | os.PathLike):
        root = Path(root)
        if root.exists() and not root.is_dir():
            raise ValueError(f"resume={os.fspath(root)!r} is a file: pass a folder (a new one, or the one a stopped "
                             f"comparison kept its episodes in)")
        if root.is_dir() and any(root.iterdir()) and not any((root / name).exists() for name in _OURS):
            raise ValueError(f"resume={os.fspath(root)!r} holds files of its own and no comparison's episodes: pass "
                             f"a new folder, or the one a stopped comparison kept its episodes in")
        self.dir = root / EPISODES_DIR

    def get(self, arm: Any, seed: int) -> Any | None:
        """The kept episode of `arm` (an `episodes.Arm`) on `seed`, or None: none is kept, or the file in its
        place cannot be used (not an episode, or one of another arm, seed or configuration: a line on stderr
        says which, and the episode is played again)."""
        key = episode_key(arm, seed)
        path = self.dir / f"{key}.json"
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:  # a file that is not whole cannot be: it was renamed into place
            return _replayed(path, f"cannot be read ({exc})")
        try:
            episode = episode_of(kept)
        except ValueError as exc:
            return _replayed(path, f"is not an episode ({exc})")
        if (episode.arm, episode.seed, kept.get("key", key)) != (arm.name, int(seed), key):
            return _replayed(path, f"holds the episode of arm {episode.arm!r} on seed {episode.seed} with digest "
                                   f"{kept.get('key', key)!r}, not arm {arm.name!r} on seed {int(seed)} with digest "
                                   f"{key!r}")
        return episode

    def put(self, arm: Any, seed: int, episode: Any) -> None:
        """Keep `episode`, with its digest (`episode_key`) as `key` (a stop waits for the write: the file is
        whole or absent)."""
        key = episode_key(arm, seed)
        with deferred_stops():
            self.dir.mkdir(parents=True, exist_ok=True)
            replace_text(self.dir / f"{key}.json",
                         json.dumps({**dataclasses.asdict(episode), "key": key}, default=_plain) + "\n")


def _replayed(path: Path, why: str) -> None:
    """One line on stderr: the kept file in `path` is not used and its episode is played again."""
    print(f"resume: kept episode {path} {why}: playing that episode again", file=sys.stderr, flush=True)
    return None


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")


def episode_of(kept: Any) -> Any:
    """An `episodes.Episode` from its kept dict (its lists are the episode's tuples), every field of the type
    the episode holds (a number where a number belongs); ValueError says what does not fit."""
    from esper_fx.evaluation.episodes import Episode

    if not isinstance(kept, dict):
        raise ValueError(f"a JSON object was expected, not {type(kept).__name__}")
    values = {}
    for f in dataclasses.fields(Episode):
        if f.name not in kept:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValueError(f"{f.name} is missing")
            continue
        values[f.name] = _checked(f.name, kept[f.name], _EPISODE_TYPES[f.name])
    return Episode(**values)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# what each field of a kept episode holds: a kind, or (container, kind of its values)
_EPISODE_TYPES = {"arm": "str", "seed": "int", "val_accs": ("list", "number"), "params_added": "number",
                  "germinated": "int", "fossilized": "int", "culls": ("list", "str"), "fossils": ("list", "str"),
                  "wall_s": "number", "params": "number", "flops": ("dict", "number"),
                  "compute_units": ("dict", "number"), "task": "str", "germinations": ("list", "str")}
_KINDS = {"str": lambda v: isinstance(v, str), "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
          "number": _number}
_NAMED = {"str": ("a string", "strings"), "int": ("an integer", "integers"), "number": ("a number", "numbers")}


def _checked(name: str, value: Any, kind: Any) -> Any:
    if isinstance(kind, tuple):
        container, each = kind
        if container == "list" and isinstance(value, list) and all(_KINDS[each](v) for v in value):
            return tuple(value)
        if container == "dict" and isinstance(value, dict) and all(_KINDS[each](v) for v in value.values()):
            return value
        raise ValueError(f"{name} must be a {'list' if container == 'list' else 'JSON object'} of "
                         f"{_NAMED[each][1]} (got {value!r:.60})")
    if not _KINDS[kind](value):
        raise ValueError(f"{name} must be {_NAMED[kind][0]} (got {value!r:.60})")
    return value


def episode_key(arm: Any, seed: int) -> str:
    """The digest of what `arm`'s episode on `seed` depends on (module docstring)."""
    from esper_fx.evaluation.episodes import episode_config

    overrides = arm.per_seed(seed) if arm.per_seed is not None else {}
    # the config's keys as earlier versions wrote them (`legacy_dict`), so a kept folder's digests still match
    config = {k: v for k, v in legacy_dict(episode_config(arm.config, seed, **overrides).to_dict(every_constant=True))
              .items() if k not in _KEY_IGNORES and not _later_at_default(k, v)}
    digest = hashlib.sha256()
    digest.update(json.dumps([arm.name, int(seed), getattr(arm.controller, "name", repr(arm.controller)), config],
                             sort_keys=True, default=repr).encode("utf-8"))
    if arm.policy is not None:
        import jax

        for leaf in jax.tree_util.tree_leaves(arm.policy):
            array = np.asarray(leaf)
            digest.update(f"{array.dtype}{array.shape}".encode())
            digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:32]


# PPO's settings added after the key's digest was fixed (issue 69): at their defaults they change nothing, and
# are left out of the key, so a folder an earlier version kept still finds its episodes
_LATER_PPO_SETTINGS = ("lr_anneal", "lr_anneal_updates", "lr_anneal_warmup", "lr_anneal_decay", "entropy_mode",
                       "update_diagnostics")


def _later_at_default(key: str, value: Any) -> bool:
    from rl.config import PPOConfig

    return key in _LATER_PPO_SETTINGS and value == getattr(PPOConfig(), key)


def kept_runner(runner: Any, store: EpisodeStore) -> Any:
    """`runner` (an `arm_runner.EpisodeRunner`) playing only the episodes `store` does not hold, keeping each
    as it finishes; every caller sees the episodes in the order and with the values of an unbroken run."""

    def one(arm, seeds, on_episode=None):
        seeds = [int(s) for s in seeds]
        got = {s: e for s in seeds if (e := store.get(arm, s)) is not None}
        report = _in_order(seeds, got, on_episode)
        todo = [s for s in seeds if s not in got]
        if todo:
            runner.one(arm, todo, on_episode=lambda e: report(_kept(store, arm, e)))
        return [got[s] for s in seeds]

    def many(arms, seeds, on_episode=None):
        seeds = [int(s) for s in seeds]
        got = [{s: e for s in seeds if (e := store.get(arm, s)) is not None} for arm in arms]
        groups: dict[tuple[int, ...], list[int]] = {}  # the seeds an arm lacks -> those arms, played at once
        for i, have in enumerate(got):
            todo = tuple(s for s in seeds if s not in have)
            if todo:
                groups.setdefault(todo, []).append(i)
        for todo, which in groups.items():
            order = [(i, s) for i in which for s in todo]  # the runner reports arm by arm, each in seed order

            def keep(e, _order=iter(order)):
                i, seed = next(_order)
                got[i][seed] = _kept(store, arms[i], e)

            runner.many([arms[i] for i in which], list(todo), on_episode=keep)
        results = [[have[s] for s in seeds] for have in got]
        if on_episode is not None:
            for episodes in results:
                for e in episodes:
                    on_episode(e)
        return results

    return dataclasses.replace(runner, one=one, many=many, store=store)


def _kept(store: EpisodeStore, arm: Any, episode: Any) -> Any:
    store.put(arm, episode.seed, episode)
    return episode


def _in_order(seeds: Sequence[int], got: dict[int, Any], on_episode: Callable | None) -> Callable[[Any], None]:
    """A reporter that shows `on_episode` every episode in seed order: the kept ones at once, up to the first
    one still to play, then each played one (and the kept ones after it) as it comes."""
    position = {"next": 0}

    def flush():
        while position["next"] < len(seeds) and seeds[position["next"]] in got:
            if on_episode is not None:
                on_episode(got[seeds[position["next"]]])
            position["next"] += 1

    def report(episode):
        got[int(episode.seed)] = episode
        flush()

    flush()
    return report


# ----------------------------------------------------------------------------------------------
# training runs
# ----------------------------------------------------------------------------------------------


def trained_run(config: TrainingConfig, controller: Any, reward_fn: Any, run_dir: str, quiet: bool) -> Any:
    """A learning arm's training `RunResult` in `run_dir`: read back when the run finished, continued by
    train's resume when it was stopped, trained from the start when it never began (module docstring)."""
    from esper_fx.outputs.checkpoint import CheckpointError, find_checkpoint
    from esper_fx.training.preflight import restartable_run
    from esper_fx.training.run import run

    path = Path(run_dir)
    if (path / SUMMARY_NAME).is_file():
        summary = _readable_summary(path / SUMMARY_NAME)
        if summary is not None:
            return finished_run(path, config, summary)
    # (a summary that cannot be read: the run is continued from its last checkpoint, which writes it again)
    try:
        find_checkpoint(path)
        stopped = True
    except CheckpointError:  # (NoCheckpoint included) none yet: restarted in place if it left its config.json
        stopped = restartable_run(path) is not None
    if stopped:
        _check_same(path, config)
        config = config.replace(resume_path=str(path))
    return run(config, controller=controller, reward_fn=reward_fn, run_dir=str(path), quiet=quiet)


def _readable_summary(path: Path) -> dict[str, Any] | None:
    """A finished run's summary.json, or None (and a line on stderr) when it cannot be read: cut short (a
    disk that filled), or not a summary."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(summary, dict) and isinstance(summary.get("episodes"), int):
            return summary
        why = "it is not a run's summary"
    except (OSError, ValueError) as exc:
        why = f"it cannot be read ({exc})"
    print(f"resume: the training run's {path} is kept, but {why}: continuing that run from its last checkpoint",
          file=sys.stderr, flush=True)
    return None


def finished_run(path: Path, config: TrainingConfig, summary: dict[str, Any] | None = None) -> Any:
    """The `RunResult` of the finished run in `path`: its summary (read here unless given), its final policy
    and its history (the final checkpoint's); its events are not read back."""
    from esper_fx.evaluation.episodes import load_policy
    from esper_fx.outputs.checkpoint import read_manifest
    from esper_fx.outputs.history import as_summaries
    from esper_fx.training.run import RunResult

    _check_same(path, config)
    saved, policy = load_policy(path)
    if summary is None:
        summary = json.loads((path / SUMMARY_NAME).read_text(encoding="utf-8"))
    history = as_summaries(read_manifest(path)["history"])
    return RunResult(history=history, events=[], summary=summary, run_dir=str(path),
                     controller_state=policy.controller_state, config=saved, obs_rms=policy.obs_rms)


def _check_same(path: Path, config: TrainingConfig) -> None:
    """The run in `path` was trained with `config` (the fields a resume may change apart)."""
    from esper_fx.outputs.run_directory import CONFIG_NAME

    try:
        saved = TrainingConfig.from_json(str(path / CONFIG_NAME), saved=True)
    except (OSError, ValueError) as exc:
        raise ResumeMismatchError(f"resume: the training run {path} cannot be read ({exc}); delete it to train "
                                  f"it again") from None
    theirs, mine = flat_view(saved.to_dict(every_constant=True)), flat_view(config.to_dict(every_constant=True))
    for name in sorted(set(theirs) | set(mine)):
        if name not in _RUN_IGNORES and theirs.get(name) != mine.get(name):
            raise ResumeMismatchError(f"resume: the training run {path} was trained with {name} "
                                      f"{theirs.get(name)!r}, this comparison asks {mine.get(name)!r}")
