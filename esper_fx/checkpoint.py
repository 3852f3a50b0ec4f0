"""Atomic checkpoints at batch boundaries (SPEC §7.8, ARCHITECTURE §5).

Layout under `<run_dir>/checkpoints/`:

    batch-000003/            one complete checkpoint (written as .tmp-*, fsynced, then renamed)
        state/               orbax: the JAX pytrees (controller state, normalisers, best params, key)
        manifest.json        JSON: version, config, batch index, best tracking, history, architecture
    latest -> batch-000003   symlink, replaced atomically with os.replace
    final  -> batch-000003   symlink written at the end of the run

A crash leaves at worst a `.tmp-*` directory, which loaders ignore; `latest` always names a complete
checkpoint, and loading falls back to the newest complete `batch-*` directory if the link is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
import warnings
from pathlib import Path
from typing import Any, Mapping

CHECKPOINT_VERSION = 1
MANIFEST = "manifest.json"
KEEP_LAST = 2

# Fields that fix the shapes of the controller and the observation: a resume must not change them.
SHAPE_FIELDS = ("task", "n_envs", "max_epochs", "slots", "use_telemetry", "blueprint_menu", "controller",
                "lstm_hidden_dim")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete, or does not fit the current run."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    for root, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(root))


def _save_trees(path: Path, trees: Mapping[str, Any]) -> None:
    import orbax.checkpoint as ocp

    checkpointer = ocp.PyTreeCheckpointer()
    checkpointer.save(os.path.abspath(path), dict(trees))  # orbax accepts only absolute paths


def _restore_trees(path: Path, template: Mapping[str, Any]) -> dict[str, Any]:
    import orbax.checkpoint as ocp

    checkpointer = ocp.PyTreeCheckpointer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return checkpointer.restore(os.path.abspath(path), item=dict(template))


def _replace_link(link: Path, target_name: str) -> None:
    tmp = link.with_name(f".{link.name}.{uuid.uuid4().hex[:8]}")
    os.symlink(target_name, tmp)
    os.replace(tmp, link)


def save_checkpoint(checkpoint_dir: str | Path, batch_idx: int, trees: Mapping[str, Any],
                    manifest: Mapping[str, Any], *, final: bool = False) -> Path:
    """Write one complete checkpoint atomically and point `latest` (and `final`) at it."""
    root = Path(checkpoint_dir)
    root.mkdir(parents=True, exist_ok=True)
    name = f"batch-{batch_idx:06d}"
    target = root / name
    tmp = root / f".tmp-{name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        _save_trees(tmp / "state", trees)
        body = {"checkpoint_version": CHECKPOINT_VERSION, **manifest, "complete": True}
        with open(tmp / MANIFEST, "w", encoding="utf-8") as fh:
            json.dump(body, fh)
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_tree(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.rename(tmp, target)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _replace_link(root / "latest", name)
    if final:
        _replace_link(root / "final", name)
    _prune(root)
    return target


def _complete(path: Path) -> bool:
    try:
        with open(path / MANIFEST, encoding="utf-8") as fh:
            return bool(json.load(fh).get("complete"))
    except (OSError, json.JSONDecodeError):
        return False


def _batch_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("batch-*") if p.is_dir() and _complete(p))


def _prune(root: Path) -> None:
    keep = {p.resolve() for p in _batch_dirs(root)[-KEEP_LAST:]}
    for link in ("latest", "final"):
        if (root / link).exists():
            keep.add((root / link).resolve())
    for p in _batch_dirs(root):
        if p.resolve() not in keep:
            shutil.rmtree(p, ignore_errors=True)
    for stale in root.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)


def resolve_checkpoint(path: str | Path) -> Path:
    """A run directory, its checkpoints/ directory, or one checkpoint -> a complete checkpoint dir."""
    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"no checkpoint found: {p} does not exist")
    if (p / MANIFEST).exists():
        if not _complete(p):
            raise CheckpointError(f"checkpoint {p} is incomplete")
        return p
    root = p / "checkpoints" if (p / "checkpoints").is_dir() else p
    latest = root / "latest"
    if latest.exists() and _complete(latest.resolve()):
        return latest.resolve()
    candidates = _batch_dirs(root)
    if not candidates:
        raise CheckpointError(f"no complete checkpoint under {root}")
    return candidates[-1]


def read_manifest(path: str | Path) -> dict[str, Any]:
    ckpt = resolve_checkpoint(path)
    with open(ckpt / MANIFEST, encoding="utf-8") as fh:
        manifest = json.load(fh)
    if manifest.get("checkpoint_version") != CHECKPOINT_VERSION:
        raise CheckpointError(f"checkpoint {ckpt} has version {manifest.get('checkpoint_version')}, "
                              f"expected {CHECKPOINT_VERSION}")
    manifest["_path"] = str(ckpt)
    return manifest


def load_trees(manifest: Mapping[str, Any], template: Mapping[str, Any]) -> dict[str, Any]:
    return _restore_trees(Path(manifest["_path"]) / "state", template)


def check_compatible(manifest: Mapping[str, Any], config_dict: Mapping[str, Any],
                     architecture: Mapping[str, Any]) -> None:
    """Shape-relevant fields must match the checkpoint's (ValueError naming the field)."""
    saved = manifest["config"]
    for name in SHAPE_FIELDS:
        if saved.get(name) != config_dict.get(name):
            raise ValueError(
                f"cannot resume: {name} differs from the checkpoint ({saved.get(name)!r} in the checkpoint, "
                f"{config_dict.get(name)!r} now)"
            )
    saved_arch = manifest.get("architecture", {})
    for key, value in architecture.items():
        if key in saved_arch and saved_arch[key] != value:
            raise RuntimeError(
                f"cannot resume: checkpoint architecture {key}={saved_arch[key]!r} does not match this run "
                f"({value!r})"
            )
