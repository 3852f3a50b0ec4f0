"""hosts.tasks: the task specs (BEHAVIOUR §6.1) are the contracts' task table plus the host builders, and
build the right hosts.

(The LOSS-family reward constants of the table: tests/rl/test_rewards.py checks them.)"""

import math

import pytest
import torch

from esper_fx.contracts.tasks import TASKS, TASK_NAMES
from hosts.models.cnn import CNNHost
from esper_fx.contracts.lifecycle import lifecycle_timings
from hosts.seeds.lifecycle import SeedClock
from hosts.tasks import TaskSpec, get_task
from hosts.models.transformer import TransformerHost


def _params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_every_contract_task_has_a_host():
    assert [get_task(name).name for name in TASK_NAMES] == list(TASKS)


@pytest.mark.parametrize("name", ["cifar10", "CIFAR10", "Shapes10", "PYTEXT", "tinyStories", "cifar10_DEEP"])
def test_get_task_is_case_insensitive(name):
    assert get_task(name).name == name.lower()


def test_get_task_accepts_the_config_enum():
    from esper_fx.config import Task

    assert get_task(Task.SHAPES10).name == "shapes10"


def test_unknown_task_raises_value_error_listing_the_tasks():
    with pytest.raises(ValueError) as info:
        get_task("imagenet")
    for name in TASK_NAMES:
        assert name in str(info.value)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_task_agrees_with_contracts(name):
    task = get_task(name)
    assert task.facts is TASKS[name] and (task.topology, task.num_slots) == (TASKS[name].topology,
                                                                              TASKS[name].num_slots)
    assert task.kind == ("classification" if task.topology == "cnn" else "lm")


@pytest.mark.parametrize(
    "name, batch, horizon, max_batches, rg",
    [
        ("cifar10", 512, 25, None, math.log(10)),
        ("cifar10_deep", 128, 25, None, math.log(10)),
        ("tinystories", 32, 50, None, math.log(50257)),
        ("shapes10", 512, 25, None, math.log(10)),
        ("pytext", 16, 25, 32, math.log(256)),
    ],
)
def test_task_table_values(name, batch, horizon, max_batches, rg):
    task = get_task(name)
    assert (task.batch_size, task.lifecycle_horizon, task.max_train_batches) == (batch, horizon, max_batches)
    assert task.random_guess_loss == pytest.approx(rg)


@pytest.mark.parametrize(
    "name, dwell, timeout", [("cifar10", 2, 5), ("shapes10", 2, 5), ("pytext", 2, 5), ("tinystories", 5, 5)]
)
def test_lifecycle_horizon_gives_the_dwell_and_probation_timeout_of_the_table(name, dwell, timeout):
    task = get_task(name)
    clock = SeedClock.for_run(lifecycle_timings("reference", 25, task.lifecycle_horizon), 0)
    assert (clock.dwell, clock.probation_timeout) == (dwell, timeout)


@pytest.mark.parametrize("name", ["cifar10", "cifar10_deep", "shapes10", "tinystories"])
def test_learning_rates_are_the_reference_defaults(name):
    task = get_task(name)
    assert (task.host_lr, task.seed_lr) == (0.01, 0.01)


def test_pytext_lr_is_within_the_allowed_range():
    task = get_task("pytext")
    assert 0.01 <= task.host_lr <= 0.1 and task.seed_lr == task.host_lr


@pytest.mark.parametrize(
    "name, cls, params, channels",
    [
        ("cifar10", CNNHost, 6_418, [8, 16, 32]),
        ("shapes10", CNNHost, 6_418, [8, 16, 32]),
        ("cifar10_deep", CNNHost, 99_922, [8, 16, 32, 64, 128]),
        ("pytext", TransformerHost, 644_224, [128, 128, 128]),
    ],
)
def test_build_host_gives_the_preset(name, cls, params, channels):
    task = get_task(name)
    host = task.build_host()
    assert isinstance(host, cls)
    assert _params(host) == params
    specs = host.injection_specs()
    assert [s.channels for s in specs] == channels
    assert len(specs) == task.num_slots


def test_tinystories_host_preset_matches_the_parameter_formula():
    # Building the 30M-parameter host is slow-ish; the formula check is what the table promises.
    assert TransformerHost.expected_param_count(50257, 384, 6, 256) == 30_044_544
    assert get_task("tinystories").vocab_size == 50257 and get_task("tinystories").block_size == 256


def test_build_host_returns_a_fresh_host_each_call():
    task = get_task("shapes10")
    a, b = task.build_host(), task.build_host()
    assert a is not b
    assert a.classifier.weight.data_ptr() != b.classifier.weight.data_ptr()


def test_task_spec_is_frozen():
    task = get_task("cifar10")
    assert isinstance(task, TaskSpec)
    with pytest.raises(AttributeError):
        task.lifecycle_horizon = 3  # type: ignore[misc]
    assert task.lifecycle_horizon == 25


def test_output_size_is_classes_or_vocabulary():
    assert get_task("shapes10").output_size == 10
    assert get_task("pytext").output_size == 256


@pytest.mark.parametrize("name, dwell", [("shapes10", 2), ("tinystories", 5)])
def test_the_task_horizon_sets_the_clock_of_every_slot_of_a_morphogenetic_model(name, dwell):
    from hosts.models.morphogenetic import MorphogeneticModel

    task = get_task(name)
    host = task.build_host() if name != "tinystories" else get_task("pytext").build_host()
    clock = SeedClock.for_run(lifecycle_timings("reference", 25, task.lifecycle_horizon), 0)
    model = MorphogeneticModel(host, ["r0c1"], task.topology, clock=clock)
    slot = model.slots["r0c1"]
    assert (slot.dwell_epochs, slot.probation_timeout, slot.clock.blend_ticks()) == (dwell, 5, 5)
