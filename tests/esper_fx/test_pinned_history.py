"""Two short seeded runs reproduce, number for number, what the code produced when the fixture was recorded.

`pinned_history.json` holds, for a few batches of `ppo_lstm` on shapes10 at tiny size and one batch of
`heuristic`, every history entry, every event, metrics.csv and summary.json, without wall times and
timestamps. A refactoring must leave all of it unchanged. A change that is *meant* to change the numbers
(a new reward, other PPO settings) re-records the file on purpose:

    python -m tests.esper_fx.test_pinned_history --record
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.esper_fx.stops import VOLATILE_KEYS, without_keys

FIXTURE = Path(__file__).with_name("pinned_history.json")

TINY = dict(task="shapes10", n_envs=2, synthetic_train_samples=256, synthetic_test_samples=64,
            batch_size_per_env=32, max_train_batches=2, seed=5, device="cpu")
RUNS: dict[str, dict[str, Any]] = {
    "ppo_lstm": dict(TINY, controller="ppo_lstm", max_epochs=4, n_episodes=6, slots=["r0c0", "r0c1"],
                     telemetry_level="debug", checkpoint_every=2),
    "heuristic": dict(TINY, controller="heuristic", max_epochs=14, n_episodes=2, slots=["r0c0", "r0c1", "r0c2"],
                      heuristic={"min_epochs_before_germinate": 2, "plateau_epochs_to_germinate": 1,
                                 "cull_after_epochs_without_improvement": 2}),
}


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


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_short_seeded_run_reproduces_the_pinned_history_exactly(name, tmp_path):
    expected = json.loads(FIXTURE.read_text(encoding="utf-8"))[name]
    observed = observe(name, tmp_path / name)
    assert observed["metrics_csv"][0] == expected["metrics_csv"][0]  # the columns of metrics.csv
    for part in ("history", "events", "metrics_csv", "summary"):
        assert observed[part] == expected[part], part


def record(tmp: Path) -> None:
    """Record with one torch thread, as the tests run (tests/conftest.py sets OMP_NUM_THREADS=1): the
    channels_last kernels split their reductions by thread, so the numbers depend on the thread count."""
    import torch

    torch.set_num_threads(1)
    FIXTURE.write_text(json.dumps({name: observe(name, tmp / name) for name in RUNS}, indent=1) + "\n",
                       encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        raise SystemExit("usage: python -m tests.esper_fx.test_pinned_history --record")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        record(Path(tmp))
    print(f"recorded {FIXTURE}")
