"""The configurations the host benchmarks measure: a preset, E = 4 envs, and the sizes of issue 17.

`bench_config("quickstart")` is the quickstart preset as a researcher runs it, with E = 4 envs. The
`shapes10` preset trains on the full synthetic split with the whole test split as validation; the
benchmark uses the sizes the issue measured instead: 8,192 training images (4 steps of 512 per env at
E = 4) and 512 validation images. Any other preset (a new quickstart task included) is taken as it is,
so `python -m esper_fx.bench --only host --preset NAME` re-measures it. `--quick` shrinks every preset to a
smoke-test size. Imports neither torch nor jax.
"""

from __future__ import annotations

from typing import Any

from esper_fx.config import TrainingConfig

DEFAULT_PRESETS = ("quickstart", "shapes10")
N_ENVS = 4
SIZES: dict[str, dict[str, Any]] = {
    "shapes10": {"synthetic_train_samples": 8192, "synthetic_test_samples": 512},
}
QUICK_SIZES: dict[str, Any] = {"synthetic_train_samples": 512, "synthetic_test_samples": 64,
                               "batch_size_per_env": 32, "max_train_batches": 2, "val_samples": None}


def bench_config(preset: str, *, n_envs: int = N_ENVS, device: str = "cpu", seed: int = 0,
                 quick: bool = False) -> TrainingConfig:
    """The preset with `n_envs` envs on `device`, at the benchmark's sizes (or the quick ones), its envs in
    this process (`env_workers` 0: the benchmarks measure the in-process pool; `ray` asks for its workers)."""
    sizes = QUICK_SIZES if quick else SIZES.get(preset, {})
    return TrainingConfig.preset(preset, n_envs=n_envs, device=device, seed=seed, run_dir=None, env_workers=0,
                                 **sizes)
