"""`python -m esper_fx.bench`: every benchmark yields finite figures, the bridge is zero copy, and the
PyTorch reference computes the same function as the JAX controller. No speed is asserted anywhere:
speed goals live in the benchmark output and docs/PERFORMANCE.md, never in timed tests."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from esper_fx.bench import BENCHMARKS, ON_REQUEST, main
from esper_fx.bench import torch_reference as T
from esper_fx.bench.timing import Candidate, Timing, measure_interleaved

TOL = 1e-5


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory):
    """One in-process `--quick` run of every benchmark, written to JSON and read back."""
    path = tmp_path_factory.mktemp("bench") / "bench.json"
    status = main(["--quick", "--json", str(path)])
    return status, json.loads(path.read_text())


@pytest.fixture(scope="module")
def pair():
    from esper_fx.bench import fixtures

    return fixtures.make_pair(seed=3, device=torch.device("cpu"))


def _numbers(tree):
    """Every int/float leaf of a JSON tree (bools excluded)."""
    if isinstance(tree, dict):
        for value in tree.values():
            yield from _numbers(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from _numbers(value)
    elif isinstance(tree, (int, float)) and not isinstance(tree, bool):
        yield tree


# ------------------------------------------------------------------------------------------
# the quick run
# ------------------------------------------------------------------------------------------


def test_quick_run_exits_zero_and_reports_every_benchmark(quick_results):
    status, results = quick_results
    errors = {name: r.get("error") for name, r in results.items() if name != "meta" and "error" in r}
    assert errors == {}
    assert status == 0
    assert set(BENCHMARKS) - set(ON_REQUEST) <= set(results)  # the default selection: all but the on-request ones
    assert not set(ON_REQUEST) & set(results)


@pytest.mark.parametrize("name", [n for n in BENCHMARKS if n not in ON_REQUEST])
def test_every_figure_of_every_benchmark_is_finite_and_every_median_positive(quick_results, name):
    result = quick_results[1][name]
    numbers = list(_numbers(result))
    assert result["cases"], f"{name} measured no case"
    assert numbers and all(math.isfinite(x) for x in numbers)
    columns = result["columns"]
    for case in result["cases"]:
        assert case[columns["measured"]]["median_s"] > 0
        assert case[columns["reference"]]["median_s"] > 0
        assert case["ratio"] > 0


def test_bridge_round_trip_is_zero_copy_at_every_size(quick_results):
    bridge = quick_results[1]["bridge"]
    assert bridge["zero_copy"] is True
    assert [case["zero_copy"] for case in bridge["cases"]] == [True] * len(bridge["cases"])


def test_act_benchmark_compares_equal_functions(quick_results):
    diffs = quick_results[1]["act"]["equivalence_max_abs_diff"]
    assert diffs and max(diffs.values()) < TOL


def test_update_benchmark_took_the_same_single_gradient_step_on_both_sides(quick_results):
    update = quick_results[1]["update"]
    for case in update["cases"]:
        assert case["gradient_steps"] == {"jax": 1, "torch": 1}
    eq = update["equivalence"]
    assert eq["steps_jax"] == eq["steps_torch"] == 1
    assert eq["loss_abs_diff"] < TOL
    assert eq["params_after_abs_diff"] < TOL


# ------------------------------------------------------------------------------------------
# the reference computes the same function as rl/
# ------------------------------------------------------------------------------------------


def test_reference_has_the_spec_parameter_count_and_matches_the_jax_network(pair):
    from rl.network import param_count

    assert T.param_count(T.TorchActorCritic(89, 3)) == 194_387
    assert T.param_count(T.TorchActorCritic(133, 5)) == 200_149
    assert param_count(pair.state.params) == T.param_count(pair.torch_net) == 194_387


def test_reference_init_follows_the_spec_gains_and_forget_bias():
    net = T.TorchActorCritic(89, 3)
    h = net.hidden_dim
    bias = net.lstm.bias_ih_l0.detach()
    assert torch.all(bias[h:2 * h] == 2.0) and torch.all(bias[:h] == 0) and torch.all(bias[2 * h:] == 0)
    assert torch.all(net.lstm.bias_hh_l0 == 0) and not net.lstm.bias_hh_l0.requires_grad
    out = net.policy_heads[3].out.weight.detach()  # orthogonal rows with gain 0.01
    torch.testing.assert_close(out @ out.T, 1e-4 * torch.eye(out.shape[0]), atol=1e-9, rtol=1e-5)


def test_reference_logits_values_and_carries_match_jax_on_random_sequences(pair):
    from esper_fx.bench import equivalence

    diffs = equivalence.forward_differences(pair, seed=11, n_envs=3, seq_len=7)
    assert max(diffs.values()) < TOL, diffs


def test_reference_acting_step_matches_jax(pair):
    from esper_fx.bench import equivalence

    diffs = equivalence.act_differences(pair, seed=5)
    assert max(diffs.values()) < TOL, diffs


def test_one_update_gives_the_same_loss_and_parameters_on_both_sides(pair):
    from esper_fx.bench import equivalence

    eq = equivalence.update_differences(pair, seed=7)
    assert eq["steps_jax"] == eq["steps_torch"] == 1
    for term in equivalence.LOSS_TERMS:
        assert eq[f"{term}_abs_diff"] < TOL, (term, eq)
    assert eq["params_before_abs_diff"] == 0.0
    assert eq["params_after_abs_diff"] < TOL
    assert eq["params_step_max"] > 10 * eq["params_after_abs_diff"]  # the step itself was not trivial


def test_an_update_with_entropy_weighted_per_head_matches_on_both_sides(pair):
    """`entropy_head_weights` reaches the reference's loss too: both sides take the same weighted step, and
    it differs from the unweighted one."""
    import dataclasses

    from esper_fx.bench import equivalence

    weighted = dataclasses.replace(pair, cfg=dataclasses.replace(pair.cfg, entropy_head_weights={"blueprint": 5.0,
                                                                                                "op": 0.0}))
    eq = equivalence.update_differences(weighted, seed=7)
    plain = equivalence.update_differences(pair, seed=7)
    for term in equivalence.LOSS_TERMS:
        assert eq[f"{term}_abs_diff"] < TOL, (term, eq)
    assert eq["params_after_abs_diff"] < TOL
    assert eq["loss_jax"] != plain["loss_jax"]


@pytest.mark.parametrize(
    "truncated, bootstrap, advantages",
    [(True, 2.0, [2.82632, 2.606, 2.3]), (False, 0.0, [1.8932, 1.31, 0.5])],
    ids=["truncated", "terminal"],
)
def test_reference_gae_reproduces_the_spec_worked_examples(truncated, bootstrap, advantages):
    values = torch.full((1, 3), 0.5)
    rewards = torch.ones(1, 3)
    dones = torch.tensor([[False, False, True]])
    trunc = torch.tensor([[False, False, truncated]])
    boot = torch.tensor([[0.0, 0.0, bootstrap]])
    adv, ret = T.gae(rewards, values, dones, trunc, boot, torch.ones(1, 3, dtype=torch.bool), 0.9, 0.8)
    np.testing.assert_allclose(adv[0].numpy(), advantages, atol=1e-5)
    np.testing.assert_allclose(ret[0].numpy(), np.asarray(advantages) + 0.5, atol=1e-5)


# ------------------------------------------------------------------------------------------
# the timing harness and the command line
# ------------------------------------------------------------------------------------------


@given(st.lists(st.floats(min_value=0.0, max_value=1e3, allow_nan=False), min_size=1, max_size=50))
def test_timing_summary_is_ordered(samples):
    t = Timing.from_samples(samples)
    assert t.min_s <= t.p10_s <= t.median_s <= t.p90_s <= max(samples)
    assert t.reps == len(samples)


def test_interleaved_measurement_prepares_and_times_every_candidate_each_repetition():
    calls = {"a": 0, "b": 0, "prepare": 0}

    def bump(name):
        calls[name] += 1

    candidates = {
        "a": Candidate(lambda: bump("a"), lambda _: None, prepare=lambda: bump("prepare")),
        "b": Candidate(lambda: bump("b"), lambda _: None),
    }
    timings = measure_interleaved(candidates, warmup=2, reps=7)
    assert calls == {"a": 9, "b": 9, "prepare": 9}
    assert timings["a"].reps == timings["b"].reps == 7


def test_notebooks_benchmark_times_each_notebook_against_a_kernel_that_only_imports(tmp_path, monkeypatch):
    """The notebooks benchmark on a stand-in notebook of one cell (the real ones run in tests/notebooks)."""
    import nbformat

    from esper_fx.bench import bench_notebooks

    path = tmp_path / "01_stand_in.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import os; print(os.environ['SMOKE'])")]),
                   path)
    monkeypatch.setattr(bench_notebooks, "notebooks", lambda: [path])
    result = bench_notebooks.run(None)
    (case,) = result["cases"]
    assert case["notebook"] == "01_stand_in"
    assert case["smoke"]["median_s"] > 0 and case["import"]["median_s"] > 0
    assert case["ratio"] == pytest.approx(case["smoke"]["median_s"] / case["import"]["median_s"])
    assert result["target"]["max_s"] == bench_notebooks.TARGET_S
    assert result["target"]["met"] == (case["smoke"]["median_s"] <= bench_notebooks.TARGET_S)
    assert "01_stand_in" in result["headline"]


def test_notebooks_benchmark_without_notebooks_says_where_it_looked(monkeypatch):
    from esper_fx.bench import bench_notebooks

    monkeypatch.setattr(bench_notebooks, "notebooks", lambda: [])
    with pytest.raises(FileNotFoundError, match="no notebooks in .*checkout"):
        bench_notebooks.run(None)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error path on a machine without CUDA")
def test_cuda_request_without_a_gpu_exits_with_status_2(capsys):
    assert main(["--device", "cuda", "--only", "bridge"]) == 2
    assert "cuda" in capsys.readouterr().err.lower()


def _jax_has_gpu() -> bool:
    import jax

    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_quick_run_gives_finite_figures_and_a_zero_copy_bridge(tmp_path):
    if not _jax_has_gpu():
        pytest.skip("JAX has no GPU backend here")
    path = tmp_path / "bench_cuda.json"
    assert main(["--quick", "--device", "cuda", "--only", "act", "update", "bridge", "--json", str(path)]) == 0
    results = json.loads(path.read_text())
    assert results["meta"]["device"] == "cuda"
    assert results["bridge"]["zero_copy"] is True
    for name in ("act", "update", "bridge"):
        assert all(math.isfinite(x) for x in _numbers(results[name]))


# ------------------------------------------------------------------------------------------
# the host benchmark's parts that --quick leaves out or that a ratio hides
# ------------------------------------------------------------------------------------------


def test_time_to_first_action_marks_every_phase_in_order():
    from esper_fx.bench import first_action
    from esper_fx.bench.presets import bench_config

    config = bench_config("quickstart", n_envs=2, quick=True).replace(controller="heuristic")
    marks = first_action.time_to_first_action(config)
    order = ["imports_start", "imports_end", "pool_built", "reset_start", "reset_end", "first_action"]
    assert [marks[k] for k in order] == sorted(marks[k] for k in order)
    phases = first_action.phases(marks, marks["imports_start"])
    assert all(v >= 0 for v in phases.values()) and phases["total_s"] > 0


def test_flop_floor_counts_the_cnn_host_layer_by_layer():
    from esper_fx.bench.floor import epoch_macs, layer_macs
    from hosts.models.cnn import CNNHost

    layers = layer_macs(CNNHost.cifar10(), torch.randn(2, 3, 32, 32))
    assert [m.macs for m in layers] == [3 * 8 * 9 * 32 * 32, 8 * 16 * 9 * 16 * 16, 16 * 32 * 9 * 8 * 8, 32 * 10]
    assert [m.input_grad for m in layers] == [False, True, True, True]
    forward = sum(m.macs for m in layers)
    assert epoch_macs(layers, 4, 2) == 4 * (3 * forward - layers[0].macs) + 2 * forward
    assert 2 * epoch_macs(layers, 2048, 512) == 9_894_428_672  # the 9.9 GFLOP
