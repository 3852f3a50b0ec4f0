"""One thread policy for the command line, `esper_fx.run` and `esper_fx.compare` (issue 37): a notebook gets
the command line's torch threads, so its speed and its numbers."""

import csv
import json
from types import SimpleNamespace

import pytest
import torch

import esper_fx
from esper_fx.cli.train import main
from esper_fx.config import TrainingConfig
from esper_fx.training import threads
from tests.esper_fx import tiny

TINY = dict(tiny.TINY, n_episodes=2, device="cpu", tensorboard=False, report=False)


@pytest.fixture
def policy_applies(monkeypatch):
    """The policy as outside the test suite (which sets OMP_NUM_THREADS=1): torch at two threads, no
    OMP_NUM_THREADS; the count restored afterwards."""
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _rows(run_dir):
    with open(run_dir / "metrics.csv") as fh:
        return [{k: v for k, v in row.items() if not (k == "timestamp" or k.endswith("_s"))}
                for row in csv.DictReader(fh)]


def test_the_python_api_runs_with_the_command_lines_threads_and_numbers(tmp_path, policy_applies, capsys):
    (tmp_path / "c.json").write_text(json.dumps(TINY))
    assert main(["--config", str(tmp_path / "c.json"), "--run-dir", str(tmp_path / "cli"), "--quiet"]) == 0
    assert torch.get_num_threads() == 1
    assert threads.NOTICE in capsys.readouterr().out
    torch.set_num_threads(2)  # a fresh kernel's count
    esper_fx.run(TrainingConfig(**TINY), run_dir=tmp_path / "api")
    assert torch.get_num_threads() == 1
    assert "BATCH 0 |" in capsys.readouterr().out, "it talks by default, as the command line does"
    assert _rows(tmp_path / "api") == _rows(tmp_path / "cli") != []


def test_compare_takes_the_same_policy(policy_applies):
    said = []
    esper_fx.compare({"wait": "wait"}, TrainingConfig(**{**TINY, "env_workers": 0}), seeds=[900_000],
                     progress=said.append)
    assert torch.get_num_threads() == 1
    assert said[0] == threads.NOTICE


@pytest.mark.parametrize("config", [
    SimpleNamespace(device="cuda:0", env_devices=None),
    SimpleNamespace(device="cpu", env_devices=("cpu", "cuda:1")),
], ids=["cuda-policy", "a-cuda-env"])
def test_a_run_on_a_gpu_keeps_torchs_threads(policy_applies, config):
    threads.limit_cpu_threads(config, say=pytest.fail)
    assert torch.get_num_threads() == 2


def test_omp_num_threads_is_the_users_choice(policy_applies, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    threads.limit_cpu_threads(SimpleNamespace(device="cpu", env_devices=None), say=pytest.fail)
    assert torch.get_num_threads() == 2


def test_a_second_call_says_nothing(policy_applies):
    said = []
    config = SimpleNamespace(device="cpu", env_devices=None)
    threads.limit_cpu_threads(config, said.append)
    threads.limit_cpu_threads(config, said.append)
    assert said == [threads.NOTICE]
