"""The small run the Ray tests share: 3 envs over 2 workers (slices of 2 and 1); 5 episodes, so the second
batch runs 2 envs and worker 1 idles."""

from esper_fx.config import TrainingConfig

SMALL = dict(
    task="shapes10", n_envs=3, max_epochs=3, n_episodes=5, synthetic_train_samples=256, synthetic_test_samples=64,
    batch_size_per_env=32, max_train_batches=2, seed=5, device="cpu", checkpoint_every=1, num_minibatches=1,
    tensorboard=False, report=False,
)


def small(**overrides) -> TrainingConfig:
    return TrainingConfig(**{**SMALL, **overrides})
