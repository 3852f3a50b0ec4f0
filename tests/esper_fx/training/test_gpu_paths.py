"""The GPU half of esper_fx: device placement of the policy and the learner, Ray's device names, and the
whole run on CUDA.

The CPU tests check the logic that decides devices (with torch's and JAX's device queries faked where
needed); the `gpu` tests run the same paths on CUDA and skip cleanly without it (tests/conftest.py).
"""

from __future__ import annotations

import dataclasses
import json
import jax
import pytest
import torch

import esper_fx
from esper_fx.outputs import checkpoint as ckpt
from esper_fx.controllers import protocol as ctl
from esper_fx import devices
from esper_fx.controllers import registry
from esper_fx.training import preflight
from esper_fx.config import TrainingConfig
from esper_fx.errors import DeviceUnavailableError
from esper_fx.evaluation.episodes import Arm, load_policy
from esper_fx.evaluation.ray_tasks import task_arm
from esper_fx.distributed.worker import one_gpu_config, worker_settings
from esper_fx.training.pools import pool_settings
from esper_fx.training.run_state import fresh_learner
from esper_fx.cli.train import main
from tests.esper_fx import tiny

TINY = dict(tiny.TINY, device="cpu", tensorboard=False, report=False)


def tiny(**overrides) -> TrainingConfig:
    return TrainingConfig(**{**TINY, **overrides})


def _learner_devices(tree) -> set:
    return {d for leaf in jax.tree_util.tree_leaves(tree) if isinstance(leaf, jax.Array) for d in leaf.devices()}


# ------------------------------------------------------------------------------------------
# CPU: which device each half picks
# ------------------------------------------------------------------------------------------


def test_auto_is_refused_when_torch_has_a_gpu_and_jax_has_none(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(devices, "jax_gpus", lambda: [])
    with pytest.raises(DeviceUnavailableError, match="device 'auto'.*JAX has no GPU"):
        preflight.check_devices(tiny(device="auto"))
    monkeypatch.setattr(devices, "jax_gpus", lambda: ["JAX's GPU 0"])
    preflight.check_devices(tiny(device="auto"))  # both halves on cuda:0: accepted


def test_auto_policy_device_follows_torch(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.policy_jax_device(tiny(device="auto")) == jax.devices("cpu")[0]


def test_the_learner_is_built_on_the_device_asked_for():
    config = tiny()
    spec = ctl.ControllerSpec.from_config(config)
    bundle = registry.build("ppo_lstm", spec)
    cpu = jax.devices("cpu")[0]
    placed = fresh_learner(bundle, spec, 3, cpu)
    assert _learner_devices(placed) == {cpu}
    default = fresh_learner(bundle, spec, 3)
    for a, b in zip(jax.tree_util.tree_leaves(placed), jax.tree_util.tree_leaves(default)):
        assert (jax.numpy.asarray(a) == jax.numpy.asarray(b)).all()


def test_a_ray_worker_keeps_cpu_envs_on_the_cpu_and_renames_cuda_devices():
    cpu, cuda0, cuda1 = torch.device("cpu"), torch.device("cuda:0"), torch.device("cuda:1")
    on_cpu = pool_settings(tiny(n_envs=4))  # (the GPUs below need not exist here: set after resolving)
    mixed = dataclasses.replace(on_cpu, policy_device=cuda1, env_devices=(cpu, cuda1, cpu, cuda1))
    assert worker_settings(mixed).env_devices == (cpu, cuda0, cpu, cuda0)
    assert worker_settings(mixed).policy_device == cpu  # signals leave the worker as numpy
    assert worker_settings(on_cpu).env_devices == (cpu,) * 4
    assert worker_settings(dataclasses.replace(on_cpu, env_devices=(cuda1,) * 4)).env_devices == (cuda0,) * 4


def test_an_evaluation_task_with_one_gpu_sees_it_as_cuda_0():
    config = tiny(device="cuda:1", env_devices=("cuda:1", "cpu"))
    renamed = one_gpu_config(config, gpu=True)
    assert renamed.device == "cuda:0" and tuple(renamed.env_devices) == ("cuda:0", "cpu")
    arm = Arm.build("wait", tiny(device="cuda:1"))
    moved = task_arm(arm, gpu=True)
    assert moved.config.device == "cuda:0" and moved.controller is arm.controller and arm.config.device == "cuda:1"
    assert task_arm(Arm.build("wait", tiny()), gpu=False).config.device == "cpu"


# ------------------------------------------------------------------------------------------
# CUDA: whole runs, the CLI, checkpoints across devices, the policy on cuda:N
# ------------------------------------------------------------------------------------------


def _gpus(n: int) -> None:
    if torch.cuda.device_count() < n or len(jax.devices("gpu")) < n:
        pytest.skip(f"needs {n} GPUs seen by both torch and JAX")


@pytest.mark.gpu
def test_run_on_cuda_trains_with_everything_on_the_gpu(tmp_path):
    result = esper_fx.run(tiny(device="cuda:0"), run_dir=tmp_path / "r", quiet=True)
    assert len(result.history) == 2 and result.summary["episodes"] == 4
    assert _learner_devices(result.controller_state) == {jax.devices("gpu")[0]}


@pytest.mark.gpu
@pytest.mark.parametrize("amp_dtype", ["float16", "bfloat16"])
def test_run_on_cuda_with_amp(tmp_path, amp_dtype):
    result = esper_fx.run(tiny(device="cuda:0", amp=True, amp_dtype=amp_dtype), run_dir=tmp_path / "r", quiet=True)
    assert len(result.history) == 2
    assert all(0.0 <= h.avg_accuracy <= 100.0 for h in result.history)


@pytest.mark.gpu
def test_cli_on_cuda_exits_0_and_writes_the_run(tmp_path):
    (tmp_path / "base.json").write_text(json.dumps({k: v for k, v in TINY.items() if k not in ("tensorboard", "report")}))
    code = main(["--config", str(tmp_path / "base.json"), "--device", "cuda:0", "--run-dir", str(tmp_path / "r"),
                 "--quiet", "--no-tensorboard", "--no-report"])
    assert code == 0
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["episodes"] == 4


@pytest.mark.gpu
def test_a_gpu_checkpoint_restores_on_the_cpu(tmp_path):
    result = esper_fx.run(tiny(device="cuda:0"), run_dir=tmp_path / "r", quiet=True)
    config = result.config
    spec = ctl.ControllerSpec.from_config(config)
    cpu = jax.devices("cpu")[0]
    template = fresh_learner(registry.build(config.controller_name, spec), spec, config.seed, cpu)._asdict()
    trees = ckpt.load_trees(ckpt.read_manifest(tmp_path / "r"), template)
    assert _learner_devices(trees) == {cpu}
    for a, b in zip(jax.tree_util.tree_leaves(trees["controller"]), jax.tree_util.tree_leaves(result.controller_state)):
        assert (jax.device_get(a) == jax.device_get(b)).all()


@pytest.mark.gpu
def test_load_policy_of_a_gpu_run_lands_on_the_default_device(tmp_path):
    esper_fx.run(tiny(device="cuda:0"), run_dir=tmp_path / "r", quiet=True)
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        _, policy = load_policy(tmp_path / "r")
    assert _learner_devices(policy.controller_state) == {cpu}


@pytest.mark.gpu
def test_a_gpu_run_resumes_with_its_policy_on_the_cpu(tmp_path):
    esper_fx.run(tiny(device="cuda:0", checkpoint_every=1), run_dir=tmp_path / "r", quiet=True)
    resumed = esper_fx.run(tiny(device="cpu", n_episodes=6, resume_path=str(tmp_path / "r")), quiet=True)
    assert len(resumed.history) == 3
    assert _learner_devices(resumed.controller_state) == {jax.devices("cpu")[0]}


@pytest.mark.gpu
def test_policy_on_cuda_0_with_envs_on_the_cpu_and_the_gpu(tmp_path):
    result = esper_fx.run(tiny(device="cuda:0", env_devices=("cpu", "cuda:0")), run_dir=tmp_path / "r", quiet=True)
    assert len(result.history) == 2


@pytest.mark.gpu
def test_policy_on_cuda_1_with_envs_on_cuda_0(tmp_path):
    _gpus(2)
    result = esper_fx.run(tiny(device="cuda:1", env_devices=("cuda:0",)), run_dir=tmp_path / "r", quiet=True)
    assert len(result.history) == 2
    assert _learner_devices(result.controller_state) == {jax.devices("gpu")[1]}


@pytest.mark.gpu
def test_cuda_devices_agree_between_torch_and_jax():
    """A tensor on torch's cuda:N is, through DLPack, an array on JAX's GPU N: the same physical card."""
    from bridge.dlpack import to_jax

    for index in range(min(torch.cuda.device_count(), len(jax.devices("gpu")))):
        tensor = torch.arange(8, dtype=torch.float32, device=f"cuda:{index}")
        array = to_jax(tensor).tree
        assert array.devices() == {devices.policy_devices(f"cuda:{index}")[1]}
        assert array.unsafe_buffer_pointer() == tensor.data_ptr()

