"""The process's torch threads for a run: one policy for `esper_fx.run`, `esper_fx.compare` and the command
line alike, so a notebook gets the command line's speed and its numbers (issue 37).

On a run whose envs are all on the CPU, torch uses one intra-op thread unless `OMP_NUM_THREADS` says
otherwise. The hosts are tiny: on a small CPU, OpenMP oversubscription made epochs up to 10x slower as soon
as anything else ran on the machine (docs/USAGE.md's Python snippet: 551 s with torch's default threads, 59 s
with one), while one thread lost little when it was idle. The thread count also decides how some CPU
kernels split their sums, so a run's numbers are the command line's only with the same count.
"""

from __future__ import annotations

import os
from typing import Any, Callable

NOTICE = "CPU run: 1 torch thread (set OMP_NUM_THREADS to use more)"


def cpu_only(config: Any) -> bool:
    """Whether every device the run names is the CPU (`esper_fx.devices.on_cuda`: an `auto` device counts as
    CUDA where torch sees one)."""
    from esper_fx.devices import on_cuda  # (torch loads here: the command line imports this module first)

    return not on_cuda([config.device, *(config.env_devices or ())])


def limit_cpu_threads(config: Any, say: Callable[[str], None] = print) -> None:
    """One torch intra-op thread on a CPU-only run unless OMP_NUM_THREADS is set; `say` the notice when
    this changes the count (a second call, or a process already at one thread, says nothing)."""
    if os.environ.get("OMP_NUM_THREADS") or not cpu_only(config):
        return
    import torch

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
        say(NOTICE)
