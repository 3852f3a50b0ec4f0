"""The report's reference line (issue 37): the static host, trained alone in one more batch of the run's envs."""

import json

import matplotlib

matplotlib.use("Agg")

import esper_fx  # noqa: E402
from esper_fx.config import TrainingConfig  # noqa: E402
from esper_fx.outputs import plots  # noqa: E402
from esper_fx.outputs.closing import closing_lines  # noqa: E402
from tests.esper_fx import tiny

TINY = dict(tiny.TINY, n_episodes=2, device="cpu", tensorboard=False)


def test_the_static_host_is_the_wait_controllers_batch_after_the_last(tmp_path):
    grown = esper_fx.run(TrainingConfig(**TINY, controller="heuristic"), run_dir=tmp_path / "grown", quiet=True)
    static = json.loads((tmp_path / "grown" / "summary.json").read_text())["static_host"]
    assert static["batch"] == 1 and static["controller"] == "wait"
    # the same envs as batch 1 of a two-batch `wait` run: the same seeds, the host alone
    waited = esper_fx.run(TrainingConfig(**{**TINY, "n_episodes": 4}, controller="wait", report=False),
                          run_dir=False, quiet=True)
    assert static["accuracy"] == waited.history[1].avg_accuracy
    assert static["env_accuracies"] == waited.history[1].env_accuracies
    assert grown.summary["static_host"] == static
    page = (tmp_path / "grown" / "report.html").read_text()
    assert "static host, trained alone in batch 1" in page
    assert f"Static host (no growth, trained alone in batch 1): {static['accuracy']:.2f}%" in closing_lines(grown, 1.0)


def test_the_learning_curve_draws_the_static_host_as_a_labelled_line():
    history = esper_fx.run(TrainingConfig(**TINY, controller="wait", report=False), run_dir=False,
                           quiet=True).history
    fig = plots.plot_runs(history, env_band=True, static_host=12.5)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert "static host 12.5%" in labels
    assert "static host 12.5%" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_a_task_mix_has_no_single_static_host(tmp_path):
    config = TrainingConfig(**{**TINY, "task": "shapes16"}, task_mix=("shapes16", "shapes16_narrow"),
                            controller="wait")
    esper_fx.run(config, run_dir=tmp_path / "mix", quiet=True)
    assert json.loads((tmp_path / "mix" / "summary.json").read_text())["static_host"] is None
