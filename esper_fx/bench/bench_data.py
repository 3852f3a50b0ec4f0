"""`data`: generating shapes10 at its default sizes, which a shapes10 run does before its first action.

`hosts.data.shapes10.generate()` draws and renders every image on the CPU (BEHAVIOUR §6.6). Its defaults,
50,000 training and 10,000 test images, are measured in CPU seconds of this process (`time.process_time`)
on the bench's torch threads (one unless `--torch-threads` says otherwise): a busy shared machine inflates
the wall time, not this, and on an idle machine the wall time is about the same. The reference measured in
the same run draws the same number of pixels as plain Gaussian noise (`torch.randn`), the floor of any
generator of these tensors. The claim: at most 60 s of CPU time. `--quick` generates 2,000 + 400 images once.
"""

from __future__ import annotations

import inspect
import time
from functools import partial

import torch

from esper_fx.bench.settings import BenchSettings
from esper_fx.bench.timing import Candidate, measure_interleaved, ratio
from hosts.data import shapes10

FULL_REPS = 3
QUICK_SIZES = {"n_train": 2_000, "n_test": 400}
TARGET_CPU_S = 60.0  # the default sizes within a minute of one core


def default_sizes() -> dict[str, int]:
    """`shapes10.generate`'s default training and test sizes."""
    parameters = inspect.signature(shapes10.generate).parameters
    return {name: parameters[name].default for name in ("n_train", "n_test")}


def gaussian_pixels(n_train: int, n_test: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference: tensors of the generated images' shapes, filled by one seeded `torch.randn` each."""
    size = shapes10.DEFAULT_KNOBS.size
    gen = torch.Generator().manual_seed(0)
    return tuple(torch.randn((n, 3, size, size), generator=gen) for n in (n_train, n_test))


def _no_sync(_: object) -> None:
    return None


def run(settings: BenchSettings) -> dict:
    sizes = QUICK_SIZES if settings.quick else default_sizes()
    candidates = {"generate": Candidate(partial(shapes10.generate, **sizes), _no_sync),
                  "randn": Candidate(partial(gaussian_pixels, **sizes), _no_sync)}
    timings = measure_interleaved(candidates, 0, 1 if settings.quick else FULL_REPS, clock=time.process_time)
    cpu_s = timings["generate"].median_s
    case = {**sizes, "generate": timings["generate"].as_dict(), "randn": timings["randn"].as_dict(),
            "ratio": ratio(timings["generate"], timings["randn"]), "torch_threads": torch.get_num_threads()}
    return {
        "what": "shapes10.generate() at its default sizes, CPU seconds of the process",
        "reference": "randn: torch.randn of the same shapes (the floor of any generator of these tensors)",
        "ratio_definition": "generate / randn, CPU time",
        "columns": {"case": "n_train", "measured": "generate", "reference": "randn"},
        "cases": [case],
        "target": {"cpu_s_max": TARGET_CPU_S, "met": cpu_s <= TARGET_CPU_S},
        "headline": f"shapes10 at {sizes['n_train']:,} + {sizes['n_test']:,} images: {cpu_s:.1f} s of CPU time "
                    f"(target ≤ {TARGET_CPU_S:.0f} s), {case['ratio']:.0f}× drawing as many Gaussian pixels",
    }
