"""Where a run's time goes (issue 55): the breakdown's arithmetic (`outputs.time_breakdown`), JAX's compilation
read from jax.monitoring and kept out of every other part (`training.clock`), the pool's time split into its
phases, in process and as Ray's slowest worker saw it (`BridgedPool`), the closing line and the report's bar.
Whole runs: `outputs/test_run_outputs.py` (in process) and `distributed/test_ray_pool.py` (Ray workers)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from esper_fx.outputs import plots
from esper_fx.outputs.time_breakdown import PARTS, batch_parts, breakdown, closing_line, largest
from esper_fx.training import bridged_pool
from esper_fx.training.bridged_pool import BridgedPool
from esper_fx.training.clock import Lap, RunClock, compile_seconds

TIMING = {"env_s": 10.0, "env_build_s": 1.0, "env_train_s": 5.0, "env_validate_s": 2.0, "env_wait_s": 0.5,
          "bridge_s": 0.25, "controller_s": 3.0, "update_s": 4.0, "compile_s": 5.0, "controller_compile_s": 2.0,
          "update_compile_s": 2.5}


def test_a_batch_splits_into_pool_phases_and_its_compilation_is_taken_out_of_the_parts_it_ran_in():
    parts = batch_parts(TIMING, wall_s=20.0)
    assert parts == {"pool_build": 1.0, "pool_train": 5.0, "pool_validate": 2.0, "ray_wait": 0.5, "pool_other": 1.5,
                     "bridge": 0.25, "controller": 1.0, "update": 1.5,
                     # 20 - 10 - 0.25 - 3 - 4 less the 0.5 s compiled outside the controller and the update
                     "batch_other": 2.25}
    assert sum(parts.values()) + TIMING["compile_s"] == pytest.approx(20.0)


def test_the_parts_add_up_to_the_wall_time_and_other_is_what_is_left():
    batches = [{"timing": TIMING, "wall_time_s": 20.0}, {"timing": {}, "wall_time_s": 1.0}]
    bd = breakdown(40.0, {"setup": 3.0, "report": 2.0, "logging": 1.0}, compile_s=9.0, batches=batches)
    parts = bd["parts"]
    assert list(parts) == list(PARTS)
    assert parts["jax_compile"] == 9.0 and parts["batch_other"] == 2.25 + 1.0 and parts["setup"] == 3.0
    assert sum(parts.values()) == pytest.approx(40.0)
    assert parts["other"] == pytest.approx(40.0 - 3 - 2 - 1 - 9 - 15 - 1.0)
    assert bd["other_share"] == pytest.approx(parts["other"] / 40.0)


def test_other_is_never_negative_and_an_unknown_part_is_refused():
    assert breakdown(1.0, {"setup": 2.0}, 0.0, [])["parts"]["other"] == 0.0
    with pytest.raises(KeyError, match="unknown part"):
        breakdown(1.0, {"teatime": 0.5}, 0.0, [])


def test_the_closing_line_names_the_three_largest_parts_and_the_share_of_other():
    bd = breakdown(100.0, {"setup": 5.0, "report": 20.0, "logging": 1.0, "checkpoints": 30.0}, 40.0, [])
    assert [name for name, _ in largest(bd)] == ["jax_compile", "checkpoints", "report"]
    line = closing_line(bd)
    assert line.startswith("Time: JAX compilation 40.0%, checkpoints 30.0%, report 20.0% of 100.0 s (other 4.0%;")
    assert closing_line(None) is None and closing_line({}) is None


def test_the_report_draws_the_breakdown_as_one_stacked_bar():
    bd = breakdown(50.0, {"setup": 5.0, "report": 20.0}, 10.0, [{"timing": TIMING, "wall_time_s": 20.0}])
    fig = plots.plot_time_breakdown(bd)
    bars = fig.axes[0].patches
    assert len(bars) == sum(1 for s in bd["parts"].values() if s > 0)
    assert {round(b.get_y(), 6) for b in bars} == {round(bars[0].get_y(), 6)}  # one row
    assert bars[-1].get_x() + bars[-1].get_width() == pytest.approx(50.0)


def test_compilation_is_read_from_jax_and_kept_out_of_the_part_it_happened_in():
    clock = RunClock()
    before = compile_seconds()
    with clock.part("setup"):
        lap = Lap()
        fresh = jax.jit(lambda x: jnp.sin(x) * 3.0 + jnp.cos(x) @ x.T)  # a program no one compiled yet
        fresh(jnp.ones((5, 5))).block_until_ready()
    assert compile_seconds() - before == pytest.approx(lap.compiled()) and lap.compiled() > 0
    assert clock.compile_s() == pytest.approx(lap.compiled())
    assert clock.parts["setup"] == pytest.approx(lap.wall() - lap.compiled(), abs=0.05)
    again = Lap()
    fresh(jnp.ones((5, 5))).block_until_ready()  # cached: nothing compiles
    assert again.compiled() == 0.0


def test_a_lap_takes_what_no_part_took():
    clock = RunClock()
    with clock.part("report"):
        pass
    clock.lap("setup")
    assert clock.parts["setup"] <= clock.wall_s() - clock.parts["report"]


class PhasedPool:
    """A pool that says how long its phases took (`phase_s`), as EnvPool (no work_s) or RayEnvPool (the slowest
    worker's whole call in work_s) do; each step the driver waits 4 s."""

    steps_per_epoch = 1

    def __init__(self, phases: dict[str, float], clock: list[float]):
        self.phase_s = dict.fromkeys(phases, 0.0)
        self._phases, self._clock = phases, clock

    def step(self, actions, bootstrap=False):
        for key, seconds in self._phases.items():
            self.phase_s[key] += seconds
        self._clock[0] += 4.0


@pytest.mark.parametrize("work_s, expected", [
    (None, {"env_train_s": 2.0, "env_validate_s": 1.0, "env_build_s": 0.0, "env_wait_s": 0.0}),  # in process
    (3.0, {"env_train_s": 2.0, "env_validate_s": 1.0, "env_build_s": 0.0, "env_wait_s": 1.0}),  # Ray: 1 s waited
    (8.0, {"env_train_s": 1.0, "env_validate_s": 0.5, "env_build_s": 0.0, "env_wait_s": 0.0}),  # Ray, overlapped
])
def test_the_pools_time_splits_into_its_phases_as_the_driver_waited_for_them(monkeypatch, work_s, expected):
    now = [0.0]
    monkeypatch.setattr(bridged_pool.time, "perf_counter", lambda: now[0])
    phases = {"train_s": 2.0, "validate_s": 1.0} | ({"work_s": work_s} if work_s else {})
    bridged = BridgedPool(PhasedPool(phases, now), {})
    started, before = now[0], bridged._phases()
    bridged.pool.step(None)
    bridged._pool_lap(started, before)
    assert bridged.timing["env_s"] == 4.0
    assert {k: bridged.timing[k] for k in expected} == pytest.approx(expected)
