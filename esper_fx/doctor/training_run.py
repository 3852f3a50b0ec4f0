"""The doctor's checks of a training run: a short run through the CLI on the device, and its checkpoint
restored onto its own device and (one written on a GPU) onto the CPU."""

from __future__ import annotations

import contextlib
import io
import json
import time
from typing import Any

import jax

from esper_fx.doctor.context import Context, NotRun

# the small workload of the CLI run (shapes10 at a few hundred samples)
SMALL_RUN = dict(task="shapes10", controller="ppo_lstm", n_envs=2, max_epochs=3, n_episodes=2, seed=3,
                 synthetic_train_samples=256, synthetic_test_samples=64, batch_size_per_env=32,
                 max_train_batches=2, checkpoint_every=1)


def check_cli_run(ctx: Context) -> str:
    from esper_fx.cli.train import main as train_main

    config = ctx.scratch / "config.json"
    config.write_text(json.dumps({**SMALL_RUN, "device": str(ctx.torch_device)}))
    run_dir = ctx.scratch / "run"
    argv = ["--config", str(config), "--run-dir", str(run_dir), "--quiet", "--no-tensorboard", "--no-report"]
    out, err = io.StringIO(), io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = train_main(argv)
    if code != 0:
        raise RuntimeError(f"exit {code}: {err.getvalue().strip()[-300:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    ctx.cli_run = run_dir
    return (f"python -m esper_fx.train on {ctx.torch_device}: {summary['episodes']} episodes in "
            f"{time.perf_counter() - started:.1f} s, exit 0")


def _restored(ctx: Context, device: Any) -> tuple[dict, dict]:
    """The CLI run's checkpoint restored with a template on `device`, and the manifest."""
    from esper_fx.outputs import checkpoint as ckpt
    from esper_fx.controllers import protocol as ctl
    from esper_fx.controllers import registry
    from esper_fx.config import TrainingConfig
    from esper_fx.training.run_state import fresh_learner

    if ctx.cli_run is None:
        raise NotRun("cli_run did not finish (no checkpoint to restore)")
    manifest = ckpt.read_manifest(ctx.cli_run)
    config = TrainingConfig.from_dict(manifest["config"])
    spec = ctl.ControllerSpec.from_config(config)
    template = fresh_learner(registry.build(config.controller_name, spec), spec, config.seed, device)._asdict()
    return ckpt.load_trees(manifest, template), manifest


def _leaf_devices(tree: Any) -> set:
    return {d for leaf in jax.tree_util.tree_leaves(tree) if isinstance(leaf, jax.Array) for d in leaf.devices()}


def check_checkpoint(ctx: Context) -> str:
    trees, manifest = _restored(ctx, ctx.jax_device)
    if _leaf_devices(trees) != {ctx.jax_device}:
        raise RuntimeError(f"restored onto {_leaf_devices(trees)}, expected {ctx.jax_device}")
    return f"batch {manifest['next_batch_idx'] - 1} restored onto {ctx.jax_device}"


def check_gpu_checkpoint_on_cpu(ctx: Context) -> str:
    cpu = jax.devices("cpu")[0]
    trees, _ = _restored(ctx, cpu)
    if _leaf_devices(trees) != {cpu}:
        raise RuntimeError(f"restored onto {_leaf_devices(trees)}, expected the CPU")
    on_gpu, _ = _restored(ctx, ctx.jax_device)
    for a, b in zip(jax.tree_util.tree_leaves(trees), jax.tree_util.tree_leaves(on_gpu)):
        if not (jax.device_get(a) == jax.device_get(b)).all():
            raise RuntimeError("the CPU restore differs from the GPU restore")
    return f"a checkpoint written on {ctx.torch_device} restored onto {cpu}, same values"


def check_epoch_audit(ctx: Context) -> str:
    """A three-batch tiny quickstart on the device through the real loop (`esper_fx.training.epoch_audit`): no
    XLA program compiled after batch 0, and every host read on the whitelist (on CUDA the epochs run under
    torch's sync debug mode)."""
    from esper_fx.training.epoch_audit import audit_config, audit_run

    audit = audit_run(audit_config(str(ctx.torch_device)))
    if audit.problems():
        raise RuntimeError("; ".join(audit.problems()))
    return (f"{audit.batches} batches on {ctx.torch_device}: {len(audit.first_batch_programs())} programs in batch 0, "
            f"none after; host reads at {len(audit.syncs)} whitelisted sites only")
