"""The tiny run the end-to-end tests share: shapes10 at 256 training images, 2 envs, episodes of 3 epochs of 2
minibatches, 4 episodes, seed 3. A test file takes it with its own changes: `dict(TINY, controller="wait")`."""

TINY = dict(task="shapes10", n_envs=2, max_epochs=3, n_episodes=4, synthetic_train_samples=256,
            synthetic_test_samples=64, batch_size_per_env=32, max_train_batches=2, seed=3)
