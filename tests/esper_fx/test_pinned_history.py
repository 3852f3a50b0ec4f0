"""Short seeded runs reproduce, number for number, what the code produced when the fixture was recorded.

`pinned_history.json` holds, for a few batches of `ppo_lstm` on shapes10 at tiny size, one batch of
`heuristic` and one of `heuristic` under the proportional clock with a wsd rate, every history entry, every event, metrics.csv and summary.json, without wall times and
timestamps. A refactoring must leave all of it unchanged. A change that is *meant* to change the numbers
(a new reward, other PPO settings) re-records the file on purpose, which keeps only this machine's recording:

    python -m tests.esper_fx.test_pinned_history --record

Floating-point results depend on the library versions and on the CPU's instruction set (torch and XLA pick
their kernels by it), so the fixture holds one recording per environment it was recorded in (an AVX-512 Xeon
and an AVX2 EPYC so far; on the EPYC one validation image of the heuristic's batch lands in another class).
Under a recorded environment (README's install with `-c constraints.txt`) a run must match that recording
bit for bit. Anywhere else the test still asserts two things: two runs in this environment agree bit for
bit, and the run agrees with some recording up to float noise (every count, event and action equal, every
number within a small tolerance); a warning names what differs from the recorded environments. A machine
of a new kind adds its recording, from a commit whose numbers match the fixture's elsewhere, with

    python -m tests.esper_fx.test_pinned_history --add-environment
"""

from __future__ import annotations

import csv
import json
import math
import platform
import sys
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from tests.esper_fx.stops import VOLATILE_KEYS, without_keys

FIXTURE = Path(__file__).with_name("pinned_history.json")

TINY = dict(task="shapes10", n_envs=2, synthetic_train_samples=256, synthetic_test_samples=64,
            batch_size_per_env=32, max_train_batches=2, seed=5, device="cpu", env_workers=0)
RUNS: dict[str, dict[str, Any]] = {
    "ppo_lstm": dict(TINY, controller="ppo_lstm", max_epochs=4, n_episodes=6, slots=["r0c0", "r0c1"],
                     telemetry_level="debug", checkpoint_every=2),
    "heuristic": dict(TINY, controller="heuristic", max_epochs=14, n_episodes=2, slots=["r0c0", "r0c1", "r0c2"],
                      heuristic={"min_epochs_before_germinate": 2, "plateau_epochs_to_germinate": 1,
                                 "cull_after_epochs_without_improvement": 2}),
    # the proportional clock (ramps per training step, the tempo, a fossil's release) under wsd with re-warming
    "proportional": dict(TINY, controller="heuristic", max_epochs=14, n_episodes=2, slots=["r0c0", "r0c1", "r0c2"],
                         lifecycle="proportional", lr_schedule="wsd", seed_lr_rewarm_steps=3,
                         heuristic={"min_epochs_before_germinate": 2, "plateau_epochs_to_germinate": 1,
                                    "cull_after_epochs_without_improvement": 2, "tempo": "fast"}),
}


# the packages whose numerics reach the history
NUMERIC_PACKAGES = ("torch", "jax", "jaxlib", "numpy", "flax", "optax", "chex")


def environment() -> dict[str, str]:
    """What the numbers of a run depend on besides the code: package versions, the CPU kernels torch picks."""
    import torch

    env = {name: metadata.version(name) for name in NUMERIC_PACKAGES}
    env["python"] = platform.python_version()
    env["machine"] = platform.machine()
    env["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    env["cpu"] = _cpu_model()
    return env


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _close(observed: Any, expected: Any, where: str = "") -> list[str]:
    """Where `observed` differs from `expected` beyond float noise: strings, booleans, integers, list
    lengths and keys exactly; floats within rel 1e-3 or abs 1e-5."""
    if isinstance(expected, dict):
        if not isinstance(observed, dict) or observed.keys() != expected.keys():
            return [f"{where}: keys differ"]
        return [d for k in expected for d in _close(observed[k], expected[k], f"{where}.{k}")]
    if isinstance(expected, list):
        if not isinstance(observed, list) or len(observed) != len(expected):
            return [f"{where}: lengths differ"]
        return [d for i, (o, e) in enumerate(zip(observed, expected)) for d in _close(o, e, f"{where}[{i}]")]
    if isinstance(expected, float) and isinstance(observed, (int, float)) and not isinstance(observed, bool):
        ok = math.isclose(observed, expected, rel_tol=1e-3, abs_tol=1e-5) or (
            math.isnan(observed) and math.isnan(expected))
        return [] if ok else [f"{where}: {observed!r} != {expected!r}"]
    if isinstance(expected, str) and isinstance(observed, str) and where.startswith(".metrics_csv"):
        try:  # metrics.csv holds numbers as text
            return _close(float(observed), float(expected), where) if "." in expected else (
                [] if observed == expected else [f"{where}: {observed!r} != {expected!r}"])
        except ValueError:
            pass
    return [] if observed == expected else [f"{where}: {observed!r} != {expected!r}"]


def _drop_times(value: Any) -> Any:
    """The value with every wall time, timestamp and path (they differ between runs) left out."""
    return without_keys(value, VOLATILE_KEYS)


def _entry_dict(entry: Any) -> dict[str, Any]:
    return entry if isinstance(entry, dict) else entry.to_dict()


def _metrics_rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        return [header] + [[v for k, v in zip(header, row) if k != "wall_time_s"] for row in reader]


def observe(name: str, run_dir: Path) -> dict[str, Any]:
    """Everything a run of RUNS[name] leaves behind, without times: history, events, metrics.csv, summary."""
    import esper_fx
    from esper_fx.config import TrainingConfig

    result = esper_fx.run(TrainingConfig(**RUNS[name]), run_dir=run_dir)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()]
    observed = {
        "history": [_entry_dict(e) for e in result.history],
        "events": [e for e in events if e["event_type"] not in ("CHECKPOINT_SAVED", "CHECKPOINT_LOADED")],
        "metrics_csv": _metrics_rows(run_dir),
        "summary": json.loads((run_dir / "summary.json").read_text(encoding="utf-8")),
    }
    return json.loads(json.dumps(_drop_times(observed)))  # plain JSON values, as stored in the fixture


def _recordings() -> list[dict[str, Any]]:
    """The fixture's recordings, each {"environment": ..., "runs": {name: observed}}."""
    return json.loads(FIXTURE.read_text(encoding="utf-8"))["recordings"]


def test_every_recording_holds_every_run_with_the_same_columns():
    recordings = _recordings()
    assert len({json.dumps(r["environment"], sort_keys=True) for r in recordings}) == len(recordings)
    for recording in recordings:
        assert sorted(recording["runs"]) == sorted(RUNS)
        for name in RUNS:
            assert recording["runs"][name]["metrics_csv"][0] == recordings[0]["runs"][name]["metrics_csv"][0]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_short_seeded_run_reproduces_the_pinned_history(name, tmp_path):
    recordings = _recordings()
    observed = observe(name, tmp_path / name)
    assert observed["metrics_csv"][0] == recordings[0]["runs"][name]["metrics_csv"][0]  # the columns of metrics.csv
    here = environment()
    for recording in recordings:
        if recording["environment"] == here:
            expected = recording["runs"][name]
            for part in ("history", "events", "metrics_csv", "summary"):
                assert observed[part] == expected[part], part
            return
    differs = "; ".join(", ".join(f"{k} {here.get(k)} (recorded {v})" for k, v in r["environment"].items()
                                  if here.get(k) != v) for r in recordings)
    warnings.warn(f"pinned history: bit-exact check not run, the environment differs from every recorded one: "
                  f"{differs}; checked bit-for-bit repeatability and closeness to a recording instead", stacklevel=1)
    again = observe(name, tmp_path / f"{name}-again")
    assert again == observed, "two runs in one environment differ"
    differences = min((_close(observed, r["runs"][name]) for r in recordings), key=len)
    assert not differences, f"{len(differences)} values moved beyond float noise, first: {differences[:5]}"


def test_closeness_tolerates_float_noise_and_nothing_more():
    entry = {"ppo": {"loss": 0.6019654, "policy_loss": 4.2e-07}, "action_counts": {"WAIT": 8}, "menu": ["noop"]}
    noisy = {"ppo": {"loss": 0.6019651, "policy_loss": 1.3e-07}, "action_counts": {"WAIT": 8}, "menu": ["noop"]}
    assert _close(noisy, entry) == []
    assert _close({**noisy, "ppo": {"loss": 0.61, "policy_loss": 4.2e-07}}, entry) == [".ppo.loss: 0.61 != 0.6019654"]
    assert _close({**noisy, "action_counts": {"WAIT": 7}}, entry) == [".action_counts.WAIT: 7 != 8"]
    assert _close({**noisy, "menu": []}, entry) == [".menu: lengths differ"]
    rows = [["batch", "avg_accuracy"], ["0", "14.84375"]]
    assert _close([["batch", "avg_accuracy"], ["0", "14.843751"]], rows, ".metrics_csv") == []
    assert _close([["batch", "avg_accuracy"], ["1", "14.84375"]], rows, ".metrics_csv") != []


def record(tmp: Path, keep_others: bool) -> None:
    """Record with one torch thread, as the tests run (tests/conftest.py sets OMP_NUM_THREADS=1): the
    channels_last kernels split their reductions by thread, so the numbers depend on the thread count.
    `keep_others` keeps the other environments' recordings (this one's is replaced); without it only this
    environment's recording is left, as after a change meant to move the numbers."""
    import torch

    torch.set_num_threads(1)
    here = environment()
    others = [r for r in _recordings() if r["environment"] != here] if keep_others else []
    recording = {"environment": here, "runs": {name: observe(name, tmp / name) for name in RUNS}}
    FIXTURE.write_text(json.dumps({"recordings": others + [recording]}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] not in (["--record"], ["--add-environment"]):
        raise SystemExit("usage: python -m tests.esper_fx.test_pinned_history --record | --add-environment")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        record(Path(tmp), keep_others=sys.argv[1] == "--add-environment")
    print(f"recorded {FIXTURE}")
