"""What the Ray tests share: their small run, and the live processes below a pid."""

from esper_fx.config import TrainingConfig
from esper_fx.distributed import reaper

# 3 envs over 2 workers (slices of 2 and 1); 5 episodes: the second batch runs 2 envs, worker 1 idles.
SMALL = dict(
    task="shapes10", n_envs=3, max_epochs=3, n_episodes=5, synthetic_train_samples=256, synthetic_test_samples=64,
    batch_size_per_env=32, max_train_batches=2, seed=5, device="cpu", checkpoint_every=1, num_minibatches=1,
    tensorboard=False, report=False,
)


def small(**overrides) -> TrainingConfig:
    return TrainingConfig(**{**SMALL, **overrides})


def descendants(pid: int) -> set[tuple[int, int]]:
    """Live (non-zombie) processes below `pid`, as (pid, start time), from the process table (the reaper's)."""
    return reaper.descendants(pid, reaper.process_table())
