"""Crash-safe, checksummed checkpoints at batch boundaries (BEHAVIOUR §7.8, ARCHITECTURE §2).

Layout under `<run_dir>/checkpoints/`:

    batch-000003/            one complete checkpoint
        state/               orbax: the JAX pytrees (controller state, normalisers, best params, key)
        manifest.json        JSON: version, config, batch index, best tracking, history, architecture,
                             the SHA-256 of every state file and of the manifest itself
    latest -> batch-000003   symlink, swapped atomically
    final  -> batch-000003   symlink written at the end of the run

Writing: the checkpoint is built in `.tmp-<name>-<id>` (state fsynced, then the manifest, fsynced), and
installed by renames only: an existing checkpoint of the same name is first renamed aside to
`.old-<name>-<id>`, the new one renamed into place, the directory fsynced, and only then the old copy
deleted. At every instant a complete copy exists under some name, and loading considers all of them.

Loading verifies the manifest, every checksum, and that the manifest's counts agree (its batch index, its
history's rows, its episodes completed, its directory's name). Given a run directory (or its
`checkpoints/`), it takes `latest` if intact, else the newest intact checkpoint, and says which ones it
passed over and why. Given one checkpoint directory, that checkpoint must be intact.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import threading
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from esper_fx.contracts.actions import ACTION_HEADS
from esper_fx.config import TrainingConfig, flat_view, upgrade_saved
from esper_fx.controller_names import ALIASES
from esper_fx.errors import OutputError, ResumeMismatchError, SetupError
from esper_fx.outputs.durable import fsync_dir, fsync_tree, install_dir, replace_link, write_durably

CHECKPOINT_VERSION = 1
MANIFEST = "manifest.json"
STATE = "state"
KEEP_LAST = 2
LINKS = ("latest", "final")
# Free space asked for before a checkpoint is written: 1.25x the size on disk of the run's previous checkpoint
# (the manifest grows by one history row per batch, and how well orbax compresses the state changes as the
# optimiser's moments fill in), or for a run's first checkpoint its arrays' raw bytes (an upper bound: orbax
# stores them at most uncompressed), plus 64 KiB for the manifest and the directory entries.
FREE_SPACE_GROWTH = 1.25
FREE_SPACE_MARGIN = 64 << 10
# Every manifest holds these, with these types.
REQUIRED = {"config": dict, "next_batch_idx": int, "episodes_completed": int, "best_avg_acc": (int, float),
            "recent_avg_acc": list, "history": list}
_NAME = re.compile(r"(?:\.(?P<kind>tmp|old)-)?batch-(?P<batch>\d+)(?:-[0-9a-f]+)?")
_PREFERENCE = {None: 2, "tmp": 1, "old": 0}  # of two copies of one batch: installed, newer, older

# Fields that fix the shapes of the controller and the observation, or what an observation means: a resume
# must not change them (nor `prove --checkpoint`, but for n_envs).
SHAPE_FIELDS = ("task", "n_envs", "max_epochs", "slots", "use_telemetry", "observe_log_params", "observe_withheld",
                "observe_fit_gap", "blueprint_menu", "controller", "lifecycle")
# The fields that fix a learning controller's own network (its width), by its canonical name: a checkpoint
# of that controller keeps them (`shape_fields`).
NETWORK_FIELDS = {"ppo_lstm": ("ppo.lstm_hidden_dim",), "ppo_mlp": ("ppo.lstm_hidden_dim",),
                  "reinforce": ("reinforce.hidden_dim",)}


def shape_fields(controller: str) -> tuple[str, ...]:
    """The fields a checkpoint of `controller` fixes: `SHAPE_FIELDS` and its own network's (an alias, `ppo`,
    stands for its controller)."""
    return SHAPE_FIELDS + NETWORK_FIELDS.get(ALIASES.get(controller, controller), ())
# The action heads of a checkpoint written before the manifest named them (before the tempo head).
FOUR_HEADS = ("slot", "blueprint", "blend", "op")


class CheckpointError(SetupError, RuntimeError):
    """A checkpoint is missing, damaged, or does not fit the current run."""


class NoCheckpoint(CheckpointError):
    """The directory holds no checkpoint at all (not even a damaged one): a run stopped before its first."""


# ----------------------------------------------------------------------------------------------
# checksums
# ----------------------------------------------------------------------------------------------


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def state_checksums(state_dir: Path) -> dict[str, str]:
    """SHA-256 of every file under `state_dir`, by path relative to the checkpoint."""
    out = {}
    for root, _dirs, files in os.walk(state_dir):
        for name in files:
            path = Path(root) / name
            out[str(path.relative_to(state_dir.parent))] = _file_digest(path)
    return dict(sorted(out.items()))


def _manifest_digest(body: Mapping[str, Any]) -> str:
    plain = {k: v for k, v in body.items() if k != "manifest_checksum" and not k.startswith("_")}
    return hashlib.sha256(json.dumps(plain, sort_keys=True).encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------------------------
# saving
# ----------------------------------------------------------------------------------------------


def _save_trees(path: Path, trees: Mapping[str, Any]) -> None:
    import orbax.checkpoint as ocp

    _check_free_space(path.parent, trees)
    checkpointer = ocp.PyTreeCheckpointer()
    try:
        with _OrbaxFailureEchoes():
            checkpointer.save(os.path.abspath(path), dict(trees))  # orbax accepts only absolute paths
    except Exception as exc:  # orbax reports write failures (a full disk) as ValueError / RuntimeError
        raise OSError(errno.ENOSPC if _disk_full(exc) else errno.EIO, _write_failure(exc)) from exc
    finally:
        close = getattr(checkpointer, "close", None)
        if close is not None:
            close()


def _tree_bytes(trees: Mapping[str, Any]) -> int:
    import jax

    return sum(int(getattr(leaf, "nbytes", 8)) for leaf in jax.tree_util.tree_leaves(dict(trees)))


def _check_free_space(directory: Path, trees: Mapping[str, Any]) -> None:
    """Refuse to start a state write the disk cannot hold (a full disk found mid-write leaves orbax's
    background threads failing noisily). `directory` is the checkpoint being built, in checkpoints/."""
    previous = _previous_size(directory.parent)
    expected = FREE_SPACE_GROWTH * previous if previous else _tree_bytes(trees)
    needed = int(expected) + FREE_SPACE_MARGIN
    free = shutil.disk_usage(directory).free
    if free < needed:
        raise OSError(errno.ENOSPC, f"No space left on device (a checkpoint needs about {needed / 2**20:.1f} "
                                    f"MiB, {free / 2**20:.1f} MiB free)")


def _previous_size(root: Path) -> int:
    """The bytes of the newest installed checkpoint under `root` (0 if none)."""
    installed = sorted(p for p in root.glob("batch-*") if p.is_dir() and not p.is_symlink())
    if not installed:
        return 0
    return sum(f.stat().st_size for f in installed[-1].rglob("*") if f.is_file() and not f.is_symlink())


def _disk_full(exc: BaseException) -> bool:
    text = str(exc)
    return "RESOURCE_EXHAUSTED" in text or "No space" in text or "os_error_code='28'" in text


def _write_failure(exc: BaseException) -> str:
    """The cause of a failed write in a few words: a full disk is named as such."""
    if _disk_full(exc):
        return "No space left on device"
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__


class _OrbaxFailureEchoes(logging.Filter):
    """While orbax writes or reads: drop the echoes of a failure. Its helper threads each log the failure with a
    traceback and, once its event loop is closed, print 'Event loop is closed' tracebacks; a failed read
    leaves coroutines that raise, or were never awaited, until the process exits: hundreds of lines that hid
    the cause, which the caller reports in one line. After a failure the echoes go on for a while, so the
    filters stay installed."""

    def __init__(self) -> None:
        super().__init__()
        self._previous = (threading.excepthook, sys.excepthook, sys.unraisablehook)

    def filter(self, record: logging.LogRecord) -> bool:
        return "_SignalingThread.run() raised" not in record.getMessage()

    def _thread_hook(self, args) -> None:
        if not _echo(args.exc_value):
            self._previous[0](args)

    def _excepthook(self, kind, value, tb) -> None:  # (a C++ thread's Python callback that failed)
        if not _echo(value):
            self._previous[1](kind, value, tb)

    def _unraisable_hook(self, unraisable) -> None:
        if not _echo(unraisable.exc_value):
            self._previous[2](unraisable)

    def __enter__(self) -> "_OrbaxFailureEchoes":
        logging.getLogger("absl").addFilter(self)
        threading.excepthook, sys.excepthook, sys.unraisablehook = (self._thread_hook, self._excepthook,
                                                                    self._unraisable_hook)
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if kind is None:
            logging.getLogger("absl").removeFilter(self)
            threading.excepthook, sys.excepthook, sys.unraisablehook = self._previous
        else:
            warnings.filterwarnings("ignore", message=r"coroutine '.*' was never awaited", category=RuntimeWarning)
        return False


def _echo(exc: BaseException | None) -> bool:
    """An echo of a failed orbax write or read (the caller reports the failure itself)."""
    text = str(exc)
    return isinstance(exc, Exception) and (
        "Event loop is closed" in text or _disk_full(exc) or "Encountered error while reading array index" in text)


def save_checkpoint(checkpoint_dir: str | Path, batch_idx: int, trees: Mapping[str, Any],
                    manifest: Mapping[str, Any], *, final: bool = False) -> Path:
    """Write one complete checkpoint crash-safely and point `latest` (and `final`) at it.

    Raises OutputError (naming the file) when the disk refuses a write."""
    root = Path(checkpoint_dir)
    name = f"batch-{batch_idx:06d}"
    target = root / name
    tmp = root / f".tmp-{name}-{uuid.uuid4().hex[:8]}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
        try:
            _save_trees(tmp / STATE, trees)
            fsync_tree(tmp / STATE)
            body = {"checkpoint_version": CHECKPOINT_VERSION, **manifest,
                    "checksums": state_checksums(tmp / STATE), "complete": True}
            body["manifest_checksum"] = _manifest_digest(body)
            write_durably(tmp / MANIFEST, json.dumps(body).encode("utf-8"))
            fsync_dir(tmp)
            install_dir(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        replace_link(root / "latest", name)
        if final:
            replace_link(root / "final", name)
    except OSError as exc:
        raise OutputError(f"cannot write checkpoint {target}: {exc.strerror or exc}") from exc
    _prune(root)
    return target


def _prune(root: Path) -> None:
    """Keep the newest KEEP_LAST installed checkpoints and whatever a link names; drop leftovers."""
    installed = sorted(p for p in root.glob("batch-*") if p.is_dir() and _looks_complete(p))
    keep = {p.resolve() for p in installed[-KEEP_LAST:]}
    keep |= {target for link in LINKS if (target := _link_target(root, root / link)[0]) is not None}
    for p in installed:
        if p.resolve() not in keep:
            shutil.rmtree(p, ignore_errors=True)
    for stale in [*root.glob(".tmp-*"), *root.glob(".old-*")]:
        shutil.rmtree(stale, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# finding and verifying
# ----------------------------------------------------------------------------------------------


def _looks_complete(ckpt: Path) -> bool:
    """A cheap check (no checksums): the manifest reads and says complete."""
    try:
        manifest = _read_json(ckpt / MANIFEST)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(manifest, dict) and bool(manifest.get("complete"))


def _read_json(path: Path) -> Any:
    with open(path, "rb") as fh:
        return json.loads(fh.read().decode("utf-8"))


def _manifest_problem(manifest: Any) -> str | None:
    if not isinstance(manifest, dict):
        return "its manifest is not a JSON object"
    if not manifest.get("complete"):
        return "it is incomplete"
    if manifest.get("checkpoint_version") != CHECKPOINT_VERSION:
        return f"it has version {manifest.get('checkpoint_version')!r}, expected {CHECKPOINT_VERSION}"
    for key, kind in REQUIRED.items():
        if key not in manifest:
            return f"its manifest has no {key!r}"
        if not isinstance(manifest[key], kind) or isinstance(manifest[key], bool):
            return f"its manifest's {key!r} is not a {getattr(kind, '__name__', 'number')}"
    recorded = manifest.get("manifest_checksum")
    if recorded is None:
        return "its manifest has no checksum of its own (it cannot be verified)"
    if recorded != _manifest_digest(manifest):
        return "its manifest does not match its checksum"
    return _disagreement(manifest)


def _disagreement(manifest: Mapping[str, Any]) -> str | None:
    """Whether the manifest's counts agree with each other: its history holds one row per batch, 0 to
    next_batch_idx − 1, and the last row's episodes are its episodes_completed. A manifest whose checksum was
    recomputed over disagreeing counts would resume at the wrong batch, so it is refused like a bad checksum."""
    history = manifest["history"]
    problem = _history_problem(history, manifest["config"].get("n_envs"))
    if problem is not None:
        return problem
    if manifest["next_batch_idx"] != len(history):
        return (f"its manifest's next_batch_idx {manifest['next_batch_idx']} disagrees with its history of "
                f"{len(history)} batch(es)")
    episodes = history[-1]["episodes_completed"] if history else 0
    if manifest["episodes_completed"] != episodes:
        return (f"its manifest's episodes_completed {manifest['episodes_completed']} disagrees with its history's "
                f"{episodes}")
    return None


def _history_problem(history: list, n_envs: Any) -> str | None:
    """The history's rows are batches 0, 1, 2, ... in order, each with 1 to n_envs more episodes completed."""
    episodes = 0
    for i, row in enumerate(history):
        batch = row.get("batch") if isinstance(row, dict) else None
        done = row.get("episodes_completed") if isinstance(row, dict) else None
        if not (_is_int(batch) and _is_int(done)):
            return f"its history's row {i} has no whole batch and episodes_completed"
        if batch != i:
            return f"its history's row {i} is of batch {batch} (the rows must be batches 0, 1, 2, ... in order)"
        if done <= episodes or (_is_int(n_envs) and done - episodes > n_envs):
            return (f"its history's batch {i} says {done} episodes completed after {episodes} (a batch runs 1 "
                    f"to n_envs episodes)")
        episodes = done
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _name_problem(ckpt: Path, manifest: Mapping[str, Any]) -> str | None:
    """A checkpoint named batch-N holds batch N: its manifest's next_batch_idx is N + 1."""
    match = _NAME.fullmatch(ckpt.name)
    if match is None or int(match["batch"]) == manifest["next_batch_idx"] - 1:
        return None
    return (f"its name says batch {int(match['batch'])}, its manifest's next_batch_idx "
            f"{manifest['next_batch_idx']} says batch {manifest['next_batch_idx'] - 1}")


def _state_problem(ckpt: Path, checksums: Any) -> str | None:
    if not (ckpt / STATE).is_dir():
        return f"its {STATE}/ directory is missing"
    if checksums is None:
        return "its manifest has no checksums (its state cannot be verified)"
    if not isinstance(checksums, dict):
        return "its manifest's checksums are not a JSON object"
    for rel, digest in checksums.items():
        path = ckpt / rel
        if not path.is_file():
            return f"{rel} is missing"
        if _file_digest(path) != digest:
            return f"{rel} does not match its checksum"
    return None


def _intact_reason(ckpt: Path) -> str | None:
    """None if `ckpt` is an intact checkpoint, else why not (a few words)."""
    try:
        manifest = _read_json(ckpt / MANIFEST)
    except FileNotFoundError:
        return f"it has no {MANIFEST}"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"its {MANIFEST} is unreadable ({type(exc).__name__})"
    try:
        return (_manifest_problem(manifest) or _name_problem(ckpt, manifest)
                or _state_problem(ckpt, manifest.get("checksums")))
    except OSError as exc:
        return f"its files are unreadable ({exc.strerror or exc})"


def _candidates(root: Path) -> list[Path]:
    """Every checkpoint copy under root, newest batch first (an installed copy before a leftover)."""
    found = []
    for p in root.iterdir() if root.is_dir() else ():
        m = _NAME.fullmatch(p.name)
        if m and p.is_dir() and not p.is_symlink():
            found.append((int(m["batch"]), _PREFERENCE[m["kind"]], p.name, p))
    return [p for *_, p in sorted(found, reverse=True)]


@dataclass(frozen=True)
class Found:
    """The checkpoint a path resolved to, and the newer ones passed over (each: name and reason)."""

    path: Path
    skipped: tuple[str, ...] = ()

    def warning(self) -> str | None:
        if not self.skipped:
            return None
        return f"passed over {'; '.join(self.skipped)}; using the newest intact checkpoint {self.path}"


def find_checkpoint(path: str | Path) -> Found:
    """A run directory, its checkpoints/ directory, or one checkpoint -> an intact checkpoint. The `latest`
    link is followed only to a checkpoint inside the same checkpoints/ directory: one that leads anywhere
    else (another run), or loops, is passed over like a damaged checkpoint."""
    p = Path(path)
    if not str(path):
        raise CheckpointError("no checkpoint found: the path is empty")
    if not p.exists():
        raise CheckpointError(f"no checkpoint found: {p} does not exist")
    if (p / MANIFEST).exists():
        reason = _intact_reason(p)
        if reason is not None:
            raise CheckpointError(f"checkpoint {p} is damaged: {reason} (resume from its run directory to "
                                  f"fall back to an older intact checkpoint)")
        return Found(p.resolve())
    if _lexists(p / "checkpoints") and not (p / "checkpoints").is_dir():
        raise CheckpointError(f"{p / 'checkpoints'} is not a directory: the run's checkpoints are gone or "
                              f"replaced (nothing was changed)")
    root = p / "checkpoints" if (p / "checkpoints").is_dir() else p
    skipped = []
    latest, followed = root / "latest", None
    if _lexists(latest):
        followed, reason = _link_target(root, latest)
        if reason is None:
            return Found(followed)
        skipped.append(f"{followed.name if followed is not None else 'latest'} ({reason})")
    for candidate in _candidates(root):
        if followed is not None and candidate.resolve() == followed:
            continue
        reason = _intact_reason(candidate)
        if reason is None:
            return Found(candidate, tuple(skipped))
        if not candidate.name.startswith(".tmp-"):  # an unfinished write never was a checkpoint
            skipped.append(f"{candidate.name} ({reason})")
    if not skipped:
        raise NoCheckpoint(f"no checkpoint under {root} (the run wrote none)")
    raise CheckpointError(f"no intact checkpoint under {root}: {'; '.join(skipped)}")


def _lexists(path: Path) -> bool:
    return os.path.lexists(path)


def _link_target(root: Path, link: Path) -> tuple[Path | None, str | None]:
    """(the checkpoint `link` leads to, None) when it is intact and inside `root`; else (it, or None when it
    leads outside `root` or nowhere, and why not)."""
    missing = False
    try:
        target = link.resolve(strict=True)
    except FileNotFoundError:
        target, missing = link.resolve(), True
    except (OSError, RuntimeError):  # a loop of links
        return None, "it is a loop of links"
    if target.parent != root.resolve():
        return None, f"it points outside {root} (to {target}), which is never read as this run's checkpoint"
    return target, "it is missing" if missing else _intact_reason(target)


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of the checkpoint `path` resolves to, with `_path` (the checkpoint directory) and
    `_warning` (which newer checkpoints were passed over, or None)."""
    found = find_checkpoint(path)
    manifest = _read_json(found.path / MANIFEST)
    manifest["_path"] = str(found.path)
    manifest["_warning"] = found.warning()
    return manifest


def has_checkpoint(run_dir: str | Path) -> bool:
    try:
        find_checkpoint(run_dir)
    except CheckpointError:
        return False
    return True


def restore_args(template: Mapping[str, Any]) -> Any:
    """Where each array is restored: on the device (sharding) of the template's array, never on the device
    recorded at save time (a checkpoint written on a GPU then loads on a CPU-only machine)."""
    import orbax.checkpoint as ocp

    return ocp.checkpoint_utils.construct_restore_args(dict(template))


def _restore_trees(path: Path, template: Mapping[str, Any]) -> dict[str, Any]:
    import orbax.checkpoint as ocp

    checkpointer = ocp.PyTreeCheckpointer()
    with _OrbaxFailureEchoes(), warnings.catch_warnings():  # (the echoes' filters outlast a failure)
        warnings.simplefilter("ignore")
        try:
            return checkpointer.restore(os.path.abspath(path), item=dict(template),
                                        restore_args=restore_args(template))
        except Exception as exc:  # a structure that does not match the template, unreadable data
            raise CheckpointError(f"cannot load the state of checkpoint {path.parent}: "
                                  f"{str(exc).strip().splitlines()[0][:300] if str(exc).strip() else exc!r}") from exc


def check_heads(manifest: Mapping[str, Any]) -> None:
    """A checkpoint's controller must act with this version's action heads (`contracts.actions.ACTION_HEADS`): one
    written before the tempo head (BEHAVIOUR §2.14) is refused by name, whatever its controller."""
    saved = tuple(manifest.get("architecture", {}).get("action_heads", FOUR_HEADS))
    if saved != ACTION_HEADS:
        path = manifest.get("_path", "the checkpoint")
        raise CheckpointError(
            f"checkpoint {path} was written for the action heads {list(saved)}; this esper_fx acts with "
            f"{list(ACTION_HEADS)} (the tempo head came later): train a new run, or use the esper_fx that wrote it")


def load_trees(manifest: Mapping[str, Any], template: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint's pytrees, shaped like `template` and placed on its arrays' devices."""
    return _restore_trees(Path(manifest["_path"]) / STATE, template)


def _plain(value: Any) -> Any:
    return getattr(value, "value", value)


def check_compatible(manifest: Mapping[str, Any], config_dict: Mapping[str, Any],
                     architecture: Mapping[str, Any]) -> None:
    """Shape-relevant fields must match the checkpoint's (ResumeMismatchError, a ValueError, naming the field).
    A field the checkpoint's config lacks came later: that run had the field's default, so the resumed run
    must have it too."""
    check_heads(manifest)
    saved = {**flat_view(TrainingConfig().to_dict()), **flat_view(upgrade_saved(manifest["config"]))}
    config_dict = flat_view(config_dict)
    for name in shape_fields(str(saved.get("controller"))):
        if saved.get(name) != config_dict.get(name):
            raise ResumeMismatchError(
                f"cannot resume: {name} differs from the checkpoint ({_plain(saved.get(name))!r} in the "
                f"checkpoint, {_plain(config_dict.get(name))!r} now)"
            )
    saved_arch = manifest.get("architecture", {})
    for key, value in architecture.items():
        if key in saved_arch and saved_arch[key] != value:
            raise CheckpointError(
                f"cannot resume: checkpoint architecture {key}={saved_arch[key]!r} does not match this run "
                f"({value!r})"
            )
