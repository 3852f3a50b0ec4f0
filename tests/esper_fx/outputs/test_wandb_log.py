"""Weights & Biases beside TensorBoard (`--wandb`): an offline run's files under the run directory hold the
batch scalars of metrics.csv, the config, the report's plots and the summary; a resume continues the same W&B
run; a missing wandb package or missing credentials stop the run before it writes anything.

W&B runs offline here, every one of its folders in a temporary directory: no network, no account. Its
`.wandb` transaction log is read back record by record (`wandb_records`) and decoded with wandb's own
protobuf classes.
"""

from __future__ import annotations

import csv
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

import esper_fx
from esper_fx.outputs.closing import where_lines
from esper_fx.cli import train
from esper_fx.config import TrainingConfig
from esper_fx.errors import SetupError
from esper_fx.outputs import report
from esper_fx.outputs.tensorboard_log import batch_scalars
from esper_fx.outputs.wandb_log import INSTALL, RUN_ID_NAME, WANDB_SUBDIR
from tests.esper_fx import tiny

wandb = pytest.importorskip("wandb")

TINY = dict(tiny.TINY, controller="random", slots=["r0c0", "r0c1"], wandb="offline")
BLOCK = 32768  # the transaction log's block size (LevelDB's log format)
FULL, LAST = 1, 4  # the record types that end a record


def tiny(**overrides) -> TrainingConfig:
    return TrainingConfig(**{**TINY, **overrides})


@pytest.fixture(scope="module", autouse=True)
def offline_wandb(tmp_path_factory):
    """W&B offline, its cache, config and default folders in a temporary directory; torn down at the end, so
    that no later module inherits this module's W&B settings."""
    home = tmp_path_factory.mktemp("wandb_home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "offline")
        for name in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
            patch.setenv(name, str(home / name.lower()))
        patch.delenv("WANDB_API_KEY", raising=False)
        yield home
        wandb.teardown()


def wandb_records(path: Path) -> list:
    """The records of a `.wandb` transaction log: a 7-byte header, then blocks of 32 KiB holding chunks of a
    7-byte header (checksum, length, type) and data; a block's tail too short for a header is padding."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, parts, pos = [], [], 7
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        parts.append(data[pos + 7:pos + 7 + length])
        pos += 7 + length
        if kind in (FULL, LAST):
            records.append(wandb_internal_pb2.Record.FromString(b"".join(parts)))
            parts = []
    return records


def offline_runs(run_dir: Path) -> list[Path]:
    """The offline-run folders W&B left in the run directory, oldest first (one per process)."""
    return sorted((run_dir / WANDB_SUBDIR).glob("offline-run-*"), key=lambda p: p.stat().st_mtime_ns)


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


def read_back(folder: Path) -> dict:
    """What one offline run holds: its run record, history {step: {key: value}} and summary {key: value}."""
    (log,) = folder.glob("run-*.wandb")
    out = {"run": None, "history": {}, "summary": {}}
    for record in wandb_records(log):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["run"] = record.run
        elif kind == "history":
            out["history"][record.history.step.num] = {_key(i): json.loads(i.value_json) for i in record.history.item}
        elif kind == "summary":
            out["summary"].update({_key(i): json.loads(i.value_json) for i in record.summary.update})
    return out


def metrics_rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_an_offline_run_leaves_the_scalars_config_plots_and_summary_under_the_run_directory(tmp_path, capfd):
    result = esper_fx.run(tiny(), run_dir=tmp_path / "r", quiet=True)
    run_dir = Path(result.run_dir)
    printed = capfd.readouterr()
    assert "wandb" not in (printed.out + printed.err).lower()  # W&B is quiet
    (folder,) = offline_runs(run_dir)
    held = read_back(folder)
    run_id = (run_dir / WANDB_SUBDIR / RUN_ID_NAME).read_text().strip()
    assert (held["run"].run_id, held["run"].display_name, held["run"].project) == (run_id, "r", "esper_fx")
    config = {i.key: json.loads(i.value_json) for i in held["run"].config.update}
    assert (config["n_episodes"], config["wandb"], config["run_dir"]) == (4, "offline", str(run_dir))

    rows = metrics_rows(run_dir)
    assert sorted(held["history"]) == [0, 1] == [int(row["batch"]) for row in rows]
    for row, entry in zip(rows, result.history):
        logged = held["history"][int(row["batch"])]
        assert set(batch_scalars(entry)) <= set(logged)  # TensorBoard's tags (with the reward components)
        for column, key in (("avg_accuracy", "accuracy/mean"), ("avg_reward", "reward/mean"),
                            ("wall_time_s", "timing/batch_s"), ("env1_accuracy", "accuracy/env1")):
            assert logged[key] == float(row[column]), column  # exact: W&B keeps doubles
    summary = json.loads((run_dir / "summary.json").read_text())
    assert held["summary"]["final/final_avg_accuracy"] == summary["final_avg_accuracy"]
    assert held["summary"]["final/episodes"] == 4

    pngs = sorted((run_dir / report.PLOTS_SUBDIR).glob("*.png"))
    assert pngs
    images = {key.split("/")[1]: value for key, value in held["history"][1].items()
              if key.startswith("plots/") and key.endswith("/path")}
    assert sorted(images) == [png.stem for png in pngs]  # at the last batch's step
    assert all((folder / "files" / path).is_file() for path in images.values())
    assert f"wandb sync {run_dir / WANDB_SUBDIR}/offline-run-*" in "\n".join(where_lines(result))  # says how to upload


def test_a_resume_continues_the_same_wandb_run(tmp_path):
    config = tiny(n_episodes=2, report=False, tensorboard=False)
    esper_fx.run(config, run_dir=tmp_path / "r")
    esper_fx.run(config.replace(n_episodes=4, resume_path=str(tmp_path / "r")), run_dir=tmp_path / "r")
    first, second = (read_back(folder) for folder in offline_runs(tmp_path / "r"))
    assert first["run"].run_id == second["run"].run_id
    assert (sorted(first["history"]), sorted(second["history"])) == ([0], [1])
    assert second["history"][1]["accuracy/mean"] == float(metrics_rows(tmp_path / "r")[1]["avg_accuracy"])


def test_without_the_wandb_package_the_run_stops_before_writing_naming_the_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    with pytest.raises(SetupError) as caught:
        esper_fx.run(tiny(), run_dir=tmp_path / "r")
    message = str(caught.value)
    assert "\n" not in message and INSTALL in message and "--wandb offline" in message
    assert not (tmp_path / "r").exists()


class shutil_usage(NamedTuple):  # what shutil.disk_usage returns
    total: int
    used: int
    free: int


def test_a_disk_without_room_for_wandb_stops_the_run_before_writing(tmp_path, monkeypatch):
    """W&B's service drops its log on a full disk without a word: the run refuses first (the disk's free space is
    the check's one input; a real full disk is the fault test's, tests/esper_fx/cli/test_feature_faults.py)."""
    from esper_fx.outputs import wandb_log

    seen = []

    def usage(path):
        seen.append(Path(path))
        return shutil_usage(1 << 30, (1 << 30) - 5 * 1024, 5 * 1024)

    monkeypatch.setattr(wandb_log.shutil, "disk_usage", usage)
    with pytest.raises(SetupError) as caught:
        esper_fx.run(tiny(), run_dir=tmp_path / "r")
    message = str(caught.value)
    assert "\n" not in message and "has 5 KiB free" in message and "--wandb off" in message
    assert seen == [tmp_path]  # the nearest folder that exists above the run's wandb/
    assert not (tmp_path / "r").exists()
    monkeypatch.setattr(wandb_log.shutil, "disk_usage",
                        lambda path: shutil_usage(1 << 40, 0, wandb_log.MIN_FREE_BYTES))
    wandb_log.check_free_space("offline", tmp_path / "r" / WANDB_SUBDIR)  # exactly the minimum is enough


def test_online_without_credentials_is_refused_without_a_prompt(tmp_path):
    """In a fresh interpreter (W&B's settings are read once per process): no key anywhere, stdin closed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), NETRC=str(tmp_path / "netrc"), WANDB_CONFIG_DIR=str(tmp_path / "config"))
    code = "from esper_fx.outputs.wandb_log import check_wandb; check_wandb('online')"
    proc = subprocess.run([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).resolve().parents[3])
    assert proc.returncode != 0
    assert "SetupError: --wandb online needs W&B credentials" in proc.stderr


def test_the_flags_parse_and_default_to_off():
    config, _ = train.resolve_config(["--wandb", "offline", "--wandb-project", "mine", "--run-dir", "x"])
    assert (config.wandb, config.wandb_project) == ("offline", "mine")
    assert TrainingConfig().wandb == "off"
    with pytest.raises(ValueError, match=r"wandb must be one of \[off, online, offline\]"):
        TrainingConfig(wandb="on")
