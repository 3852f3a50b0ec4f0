"""Task data and the batches every env trains on (BEHAVIOUR §6).

    task_data.py       TaskData (a task's train/test tensors on a device), load_task_data, batches
    feed.py            DataFeed: one run's batches for every env, device path or DataLoader path; PoolData,
                       the env pool's view of it, one epoch at a time
    batching.py        epoch plans (which samples each env sees per step), image augmentation, and
                       mix_seed / make_generator: pure, reproducible random-number streams
    external.py        CIFAR-10 and TinyStories from disk, with clear errors when missing
    idx.py             a strict reader of IDX files (MNIST's format), plain or gzipped
    fashion_mnist.py   Fashion-MNIST from its four IDX files (the dataset-fashion-mnist package, or --data-dir)
    shapes10.py        shapes10: the offline, generated stand-in for CIFAR-10
    pytext.py          pytext: byte-level language modelling over the standard library's sources
    difficulty.py      `python -m hosts.data.difficulty`: how hard the offline tasks are for a bare host
"""
