"""The small run the Ray tests share: 3 envs over 2 workers (slices of 2 and 1); 5 episodes, so the second
batch runs 2 envs and worker 1 idles."""

import json

from esper_fx.config import OLD_KEYS, TrainingConfig
from esper_fx.configuration.keys import with_old_keys_nested

SMALL = dict(
    task="shapes10", n_envs=3, max_epochs=3, n_episodes=5, synthetic_train_samples=256, synthetic_test_samples=64,
    batch_size_per_env=32, max_train_batches=2, seed=5, device="cpu", checkpoint_every=1, num_minibatches=1,
    tensorboard=False, report=False,
)


def small(**overrides) -> TrainingConfig:
    return TrainingConfig(**{**SMALL, **overrides})


def as_file(values: dict) -> dict:
    """Keyword arguments (`SMALL`) in the keys of a config file: a group's fields nested under it
    (`num_minibatches` -> {"ppo": {"num_minibatches": ...}}), so a command reading it prints no note."""
    return with_old_keys_nested(values)


def as_sets(values: dict) -> list[str]:
    """Keyword arguments as `--set` items in today's keys (`ppo.num_minibatches=1`)."""
    return [arg for k, v in values.items() for arg in ("--set", f"{OLD_KEYS.get(k, k)}={json.dumps(v)}")]
