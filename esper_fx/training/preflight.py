"""What can be checked before a run writes its first file: the run directory, a resume's checkpoint, the Ray
cluster to join, the devices, the data root, W&B's package and credentials.

Each check raises a `SetupError` naming the path, device or field; none writes anything (a lock held by a
live run is probed with a read-only open). `esper_fx.training.run.run` calls `check_before_writing` first, then
builds the data (whose problems are also reported before anything is written), and only then claims the
run directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from esper_fx.contracts.tasks import task_data_name
from esper_fx.config import TrainingConfig
from esper_fx.distributed.runtime import check_ray_address
from esper_fx.errors import DataError, ResumeMismatchError, RunDirectoryError
from esper_fx.outputs.checkpoint import CheckpointError, NoCheckpoint, find_checkpoint, read_manifest
from esper_fx.outputs.metrics_csv import int_or_none, metric_rows, rows_by_batch
from esper_fx.outputs.folder_lock import LOCK_NAME, holder_of
from esper_fx.outputs.run_directory import CONFIG_NAME, METRICS_NAME, refusal, run_dir_entries
from esper_fx.outputs.wandb_log import check_wandb

# Room left in a path for what a run writes inside its directory (checkpoints/.tmp-batch-.../state/...).
RUN_DIR_PATH_RESERVE = 200
DISK_TASKS = ("cifar10", "cifar10_deep", "tinystories", "fashion_mnist")  # tasks that read data_root


def check_before_writing(config: TrainingConfig) -> None:
    """Every check that needs no data loaded: the run directory, the devices, the data root, W&B."""
    if config.run_dir:
        check_run_dir(Path(os.path.abspath(config.run_dir)), resumed_run_dir(config.resume_path))
    check_resume(config)
    if config.env_workers != 0:
        check_ray_address(config.ray_address)
    check_devices(config)
    check_data_root(config)
    check_wandb(config.wandb, config.wandb_project, config.run_dir)


def resumed_run_dir(resume_path: str | None) -> Path | None:
    """The run directory holding the checkpoint a resume starts from (None for a fresh run); for a run
    stopped before its first checkpoint, that run's directory (see `restartable_run`)."""
    if not resume_path:
        return None
    try:
        return find_checkpoint(resume_path).path.parent.parent.resolve()
    except NoCheckpoint:
        restart = restartable_run(resume_path)
        if restart is None:
            raise
        return restart


def check_resume(config: TrainingConfig) -> None:
    """What a resume's checkpoint must agree with before anything is truncated or trained: its own counts
    (`outputs.checkpoint` refuses a manifest whose counts disagree like a bad checksum), n_episodes, and the
    run's metrics.csv."""
    if not config.resume_path or restartable_run(config.resume_path) is not None:
        return
    manifest = read_manifest(config.resume_path)
    check_resume_episodes(config, manifest)
    check_metrics_rows(manifest)


def check_resume_episodes(config: TrainingConfig, manifest: dict) -> None:
    """A resume may extend a run but not cut it short: n_episodes must cover what its checkpoint has done
    (else config.json would disagree with summary.json)."""
    done = manifest["episodes_completed"]
    if config.n_episodes < done:
        raise ResumeMismatchError(f"--episodes / n_episodes {config.n_episodes} is below the {done} episodes the "
                                  f"run has already done (checkpoint {manifest['_path']}): pass {done} or more")


def check_metrics_rows(manifest: dict) -> None:
    """The run's metrics.csv, when it has one, holds a row of every batch the checkpoint holds, with the same
    episodes completed: a resume truncates metrics.csv to those batches, so a checkpoint that disagrees with
    it (another run's, or a manifest edited) is refused by name first."""
    path = Path(manifest["_path"]).parent.parent / METRICS_NAME
    if not path.is_file():
        return
    rows = rows_by_batch(metric_rows(path))
    for entry in manifest["history"]:
        row = rows.get(entry["batch"])
        episodes = None if row is None else row.get("episodes_completed", entry["episodes_completed"])
        if row is None or int_or_none(episodes) != entry["episodes_completed"]:
            found = "has no row" if row is None else f"says {episodes!r} episodes completed"
            raise CheckpointError(
                f"checkpoint {manifest['_path']} disagrees with {path}: for batch {entry['batch']} the checkpoint "
                f"says {entry['episodes_completed']} episodes completed, metrics.csv {found} (nothing was changed; "
                f"resume from the checkpoint that belongs to this run, or start a new run)")


def restartable_run(path: str | Path) -> Path | None:
    """A run directory holding a run that was stopped (or failed) before its first checkpoint: its
    config.json but no checkpoint. Resuming it restarts that run from batch 0 in place."""
    p = Path(path)
    if not (p / CONFIG_NAME).is_file():
        return None
    try:
        find_checkpoint(p)
    except NoCheckpoint:
        return p.resolve()
    except CheckpointError:
        return None
    return None


# ----------------------------------------------------------------------------------------------
# the run directory
# ----------------------------------------------------------------------------------------------


def check_run_dir(path: Path, resumed: Path | None = None) -> None:
    """The run directory can be created (or exists) and written; it holds no run other than `resumed`,
    and no live run holds its lock."""
    _check_path_length(path)
    if _exists(path):
        if not path.is_dir():
            raise RunDirectoryError(f"run directory {path} exists and is not a directory")
        held = run_dir_entries(path)
        if held and (resumed is None or path.resolve() != resumed):
            raise RunDirectoryError(refusal(path, held, restartable=restartable_run(path) is not None))
        if not os.access(path, os.W_OK | os.X_OK):
            raise RunDirectoryError(f"run directory {path} is not writable")
        held_by = holder_of(path)
        if held_by is not None:
            raise RunDirectoryError(f"run directory {path} is in use by {held_by} (its {LOCK_NAME} is locked)")
        return
    ancestor = _existing_ancestor(path)
    if not ancestor.is_dir():
        raise RunDirectoryError(f"cannot create run directory {path}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise RunDirectoryError(f"cannot create run directory {path}: {ancestor} is not writable")


def _existing_ancestor(path: Path) -> Path:
    for parent in path.parents:
        if _exists(parent):
            return parent
    return Path(path.anchor)


def _exists(path: Path) -> bool:
    try:
        return path.exists() or path.is_symlink()
    except OSError:  # a name too long, a loop of links: nothing usable there
        return False


def _check_path_length(path: Path) -> None:
    base = _existing_ancestor(path)
    try:
        name_max = os.pathconf(base, "PC_NAME_MAX") if base.is_dir() else 255
        path_max = os.pathconf(base, "PC_PATH_MAX") if base.is_dir() else 4096
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    long_names = [part for part in path.parts if len(os.fsencode(part)) > name_max]
    if long_names:
        raise RunDirectoryError(f"run directory name too long: {long_names[0][:40]}... has "
                                f"{len(os.fsencode(long_names[0]))} bytes (at most {name_max})")
    if len(os.fsencode(str(path))) + RUN_DIR_PATH_RESERVE > path_max:
        raise RunDirectoryError(f"run directory path too long: {len(os.fsencode(str(path)))} bytes (at most "
                                f"{path_max - RUN_DIR_PATH_RESERVE}, leaving room for the files inside)")


# ----------------------------------------------------------------------------------------------
# devices and data
# ----------------------------------------------------------------------------------------------


def check_devices(config: TrainingConfig) -> None:
    """Every device the config names exists (`esper_fx.devices`: the envs' for torch, the policy's for torch
    and JAX); an "auto" policy device resolves to the same device for both (torch's cuda:0 needs a JAX GPU).
    (torch and jax load here, not when this module is imported: a resumed command line reads it first.)"""
    from esper_fx.devices import env_devices, policy_devices

    policy_devices(config.device)
    env_devices(config)


def check_data_root(config: TrainingConfig) -> None:
    """A task that reads its data from disk needs data_root to be a directory (or not to exist yet)."""
    if task_data_name(config.task) not in DISK_TASKS:
        return
    root = Path(config.data_root)
    if root.exists() and not root.is_dir():
        raise DataError(f"data_root {str(root)!r} is not a directory (task {config.task.value!r} reads its "
                        f"dataset from there; pass --data-dir DIR)")


def check_data(config: TrainingConfig) -> None:
    """Read a dataset of image files (CIFAR-10, Fashion-MNIST; a missing CIFAR-10 is downloaded as an
    in-process run would) here, before Ray and any env worker or evaluation task start: a missing root or a
    malformed file is then the in-process run's one line (DataError, exit 2) instead of a worker's death. A
    run joining a cluster (`ray_address`) is not checked here: its workers read the data on their nodes (and
    report a problem as the same line)."""
    if config.ray_address is not None:
        return
    from esper_fx.distributed.worker import data_errors
    from hosts.data.task_data import read_image_files
    from hosts.tasks import get_task

    with data_errors():
        read_image_files(get_task(config.task), config.data_root)
