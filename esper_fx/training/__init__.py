"""Training: the loop over batches and epochs, the jitted step, the bridged env pool, the learner's run state, preflight checks, the compile cache and stopping by signal."""
