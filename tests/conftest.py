"""Shared test setup: JAX must not preallocate GPU memory, hypothesis never times out on jit compiles,
SIGINT behaves as on a terminal however the suite was started, tests marked `gpu` skip cleanly
without CUDA, and the longest files are collected first."""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# The test workloads are tiny: one intra-op thread per process avoids OpenMP oversubscription,
# which made small convolutions several times slower on a 2-core machine (subprocesses inherit it).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Every end-to-end test builds fresh jitted closures with identical programs, and every test process compiles
# the same small programs (jnp's operations on the same shapes): a persistent compilation cache of every
# program, however quickly it compiled (as the command line keeps them: esper_fx/training/compile_cache.py),
# lets the second and later runs skip XLA compilation. (With a 0.5 s threshold, 13 of the 756 programs of
# tests/rl/test_ppo.py and test_gae.py were kept, and compiling the others took their warm run from 24 s to 60 s.)
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR",
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".pytest_cache", "jax"),
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import signal  # noqa: E402

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# The stop tests send SIGINT to runs in this process and in subprocesses. A suite started in the background
# of a shell without job control (`cmd &` in a script, nohup) inherits SIGINT ignored, which would turn
# those signals into no-ops: take Python's own handler back (subprocesses then start with the default).
signal.signal(signal.SIGINT, signal.default_int_handler)

settings.register_profile(
    "esper", deadline=None, max_examples=30, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("esper")


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return torch.cuda.is_available()


# The files that take longest, heaviest first (each 65-140 s in one process, measured 2026-11-27). Under
# pytest-xdist a file runs whole on one worker (`--dist loadfile`) in collection order
# (`--no-loadscope-reorder`): started first, they leave the many short files to fill both workers at the
# end, instead of one long file running alone while the other worker idles.
LONGEST_FIRST = (
    "tests/esper_fx/distributed/test_ray_pool.py",
    "tests/esper_fx/training/test_failures.py",
    "tests/notebooks/test_notebooks.py",
    "tests/esper_fx/test_bench.py",
    "tests/esper_fx/evaluation/test_prove.py",
    "tests/rl/test_ppo.py",
    "tests/esper_fx/training/test_loop.py",
    "tests/esper_fx/distributed/test_auto_workers.py",
)


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject's addopts): one worker more than the usable cores. Many tests spend their time
    waiting on child processes (a CLI run, Ray's start-up and actors, a notebook's kernel), so as many
    workers as cores leaves a core idle while a worker waits. PYTEST_XDIST_AUTO_NUM_WORKERS still decides
    where it is set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist's own hook reads it
    from esper_fx.distributed.auto import usable_cores  # the cores rule of `--env-workers auto`

    return usable_cores() + 1


def _longest_first(items: list) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep order


def pytest_collection_modifyitems(config, items):
    _longest_first(items)
    if not any("gpu" in item.keywords for item in items):
        return
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
