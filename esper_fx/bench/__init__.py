"""Benchmarks of what the esper_fx architecture claims, each against a reference measured in the same run.

    python -m esper_fx.bench [--quick] [--device cpu|cuda] [--only NAME ...] [--json PATH]

- `act`: one policy step, the jitted JAX `rl.ppo.act` vs the PyTorch eager reference (`torch_reference`).
- `update`: one PPO update on an E×25 rollout, jitted `rl.ppo.update` vs the reference.
- `bridge`: the torch→jax→torch round trip through `bridge`, flat in size and zero copy.
- `host`: one env-epoch of shapes10 through `hosts.env.EnvPool` vs a plain PyTorch training loop.
- `data`: generating shapes10 at its default sizes, in CPU seconds, vs drawing as many Gaussian pixels.
- `e2e`: the share of an epoch's wall time spent in the controller and the bridge in a real run.
- `ray`: one epoch with 2 Ray env workers vs the in-process pool.
- `default_workers_train`, `default_workers_prove` (only when named in `--only`; minutes): the commands
  with no flags (`--env-workers auto`) vs `--env-workers 0`, as subprocesses, interleaved.
- `notebooks` (only when named; minutes): each notebook under SMOKE=1 vs a kernel that only imports esper_fx.

`torch_reference` is a baseline written for these benchmarks only; it is not part of the system.
Speed goals live here and in docs/PERFORMANCE.md, never in timed tests. Importing this package loads
neither torch nor jax; the benchmark modules do.
"""

from esper_fx.bench.cli import BENCHMARKS, ON_REQUEST, main

__all__ = ["BENCHMARKS", "ON_REQUEST", "main"]
