"""What every finished run's `timing.breakdown` holds (issue 55): every part, none negative, their sum the wall
time, and the share no part names (`other_share`). Shared by the run tests in process and on Ray workers."""

from __future__ import annotations

from typing import Any, Mapping

import pytest

from esper_fx.outputs.time_breakdown import PARTS

TOLERANCE_S = 2e-3  # the parts are rounded to 0.1 ms each


def check_breakdown(summary: Mapping[str, Any], *, ray: bool = False) -> dict[str, float]:
    """The breakdown's parts, after checking it; `ray`: the run's envs ran on Ray workers."""
    bd = summary["timing"]["breakdown"]
    parts = bd["parts"]
    assert list(parts) == list(PARTS)
    assert all(seconds >= 0 for seconds in parts.values()), parts
    assert bd["wall_s"] > 0 and sum(parts.values()) == pytest.approx(bd["wall_s"], abs=TOLERANCE_S)
    assert bd["other_share"] == pytest.approx(parts["other"] / bd["wall_s"])
    assert 0 <= bd["other_share"] < 1
    # what every run does: starts, trains and validates its envs, acts, compiles
    assert min(parts[name] for name in ("setup", "pool_build", "pool_train", "pool_validate", "controller",
                                         "jax_compile")) > 0, parts
    assert (parts["ray_wait"] > 0) == ray, parts  # the driver's wait beyond its workers' time: Ray's only
    return parts
