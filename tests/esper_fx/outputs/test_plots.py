"""esper_fx.outputs.plots: figures built from synthetic history / events render, carry the expected artists, save."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import sys  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from matplotlib.collections import LineCollection, PathCollection, PolyCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from esper_fx.outputs import plots  # noqa: E402
from esper_fx.outputs.history import BatchSummary  # noqa: E402
from esper_fx.outputs.plots import StageInterval, events_to_intervals  # noqa: E402
from esper_fx.contracts.events import EventType  # noqa: E402
from esper_fx.outputs.events import Event  # noqa: E402
from esper_fx.outputs.run_directory import RunDirectory  # noqa: E402

T = 25
MENU = ["noop", "conv_light", "attention", "norm", "depthwise"]
SLOTS = ["r0c0", "r0c1", "r0c2"]
OPS = ["WAIT", "GERMINATE", "CULL", "FOSSILIZE"]


# ----------------------------------------------------------------------------------------------
# synthetic fixtures
# ----------------------------------------------------------------------------------------------


def ev(kind, epoch, env=None, slot=None, batch=1, seed=None, **data):
    return {"event_type": kind, "timestamp": "2025-01-01T00:00:00.000+00:00", "env_id": env, "seed_id": seed,
            "slot_id": slot, "epoch": epoch, "batch": batch, "message": "", "data": data, "severity": "info"}


def stage(epoch, env, slot, frm, to, batch=1):
    return ev("SEED_STAGE_CHANGED", epoch, env, slot, batch, **{"from": frm, "to": to})


def make_events():
    """Batch 1 of a 2-env, 3-slot run (T = 25), plus unrelated events of batch 0 and batch-less events."""
    return [
        ev("TRAINING_STARTED", None, batch=None),
        ev("SEED_GERMINATED", 1, 0, "r0c0", batch=0, blueprint="norm", blend="linear"),
        # env0 r0c1: the full germinate -> TRAINING -> BLENDING -> PROBATIONARY -> FOSSILIZED sequence
        ev("SEED_GERMINATED", 2, 0, "r0c1", seed="env0_seed_0", blueprint="conv_light", blend="linear"),
        stage(2, 0, "r0c1", "GERMINATED", "TRAINING"),
        stage(5, 0, "r0c1", "TRAINING", "BLENDING"),
        stage(10, 0, "r0c1", "BLENDING", "PROBATIONARY"),
        stage(13, 0, "r0c1", "PROBATIONARY", "FOSSILIZED"),
        ev("SEED_FOSSILIZED", 13, 0, "r0c1"),
        # env0 r0c2: a policy cull while TRAINING
        ev("SEED_GERMINATED", 4, 0, "r0c2", seed="env0_seed_1", blueprint="attention", blend="sigmoid"),
        stage(4, 0, "r0c2", "GERMINATED", "TRAINING"),
        ev("SEED_CULLED", 7, 0, "r0c2", reason=""),
        # env1 r0c0: a governor rollback culls the BLENDING seed; the slot is germinated again later
        ev("SEED_GERMINATED", 3, 1, "r0c0", seed="env1_seed_0", blueprint="norm", blend="gated"),
        stage(3, 1, "r0c0", "GERMINATED", "TRAINING"),
        stage(6, 1, "r0c0", "TRAINING", "BLENDING"),
        ev("GOVERNOR_PANIC", 9, 1),
        ev("GOVERNOR_ROLLBACK", 9, 1),
        ev("SEED_CULLED", 9, 1, "r0c0", reason="governor_rollback"),
        ev("SEED_GERMINATED", 11, 1, "r0c0", seed="env1_seed_1", blueprint="depthwise", blend="linear"),
        stage(11, 1, "r0c0", "GERMINATED", "TRAINING"),
        ev("BATCH_COMPLETED", None, batch=1),
    ]


EXPECTED_INTERVALS = [
    StageInterval(0, "r0c1", "TRAINING", 2.0, 5.0),
    StageInterval(0, "r0c1", "BLENDING", 5.0, 10.0),
    StageInterval(0, "r0c1", "PROBATIONARY", 10.0, 13.0),
    StageInterval(0, "r0c1", "FOSSILIZED", 13.0, 25.0),
    StageInterval(0, "r0c2", "TRAINING", 4.0, 7.0),
    StageInterval(1, "r0c0", "TRAINING", 3.0, 6.0),
    StageInterval(1, "r0c0", "BLENDING", 6.0, 9.0),
    StageInterval(1, "r0c0", "TRAINING", 11.0, 25.0),
]


def ppo_metrics(b):
    return {"policy_loss": -0.02 + 0.001 * b, "value_loss": 1.0 / (b + 1), "entropy": 3.0 - 0.1 * b,
            "entropy_slot": 1.0 - 0.03 * b, "entropy_blueprint": 1.2 - 0.04 * b, "entropy_blend": 0.9,
            "entropy_op": 1.3 - 0.05 * b, "approx_kl": 0.01 + 0.002 * b, "clip_fraction": 0.1,
            "explained_variance": -0.2 + 0.1 * b, "grad_norm": 0.5, "early_stopped": b == 3}


def make_entry(b, run_offset=0.0, ppo=True, skipped_at=(2,)):
    head_counts = {"slot": [10 + b, 20, 30], "blueprint": [0, 5 + b, 3, 2, 1], "blend": [4, 5, 6],
                   "op": [60 + b, 8, 2, 1], "tempo": [1, 3 + b, 2]}
    if not ppo:
        ppo_field = None
    elif b in skipped_at:
        ppo_field = {"skipped": True, "reason": "no transitions after discarding rolled-back envs"}
    else:
        ppo_field = ppo_metrics(b)
    return BatchSummary(
        batch=b, episodes_completed=4 * (b + 1), env_accuracies=[60.0 + b, 62.0 + b, 58.0 + b, 61.0 + b],
        avg_accuracy=60.25 + b + run_offset, rolling_avg_accuracy=60.0 + 0.8 * b + run_offset,
        avg_reward=1.0 + 0.5 * b - run_offset, env_rewards=[1.0, 2.0, 0.5, 1.5],
        host_max_accuracies=[61.0 + b, 63.0 + b, 59.0 + b, 62.0 + b], env_seed_params=[0.0, 120.0, 0.0, 80.0],
        action_counts=dict(zip(OPS, head_counts["op"])),
        successful_action_counts=dict(zip(OPS, [60 + b, 6, 1, 1])),
        head_counts=head_counts, menu=MENU, slot_ids=SLOTS, entropy_coef=0.05 - 0.001 * b,
        seeds_created=8, seeds_fossilized=1, contributing_fossilized=1, seeds_culled=3, rollbacks=int(b == 1),
        wall_time_s=10.0 * (b + 1), ppo=ppo_field,
    )


def make_history(n=5, run_offset=0.0, ppo=True):
    return [make_entry(b, run_offset, ppo) for b in range(n)]


def lines_of(ax):
    return [a for a in ax.get_children() if isinstance(a, Line2D)]


def stage_bars(ax):
    return [p for p in ax.patches if (p.get_gid() or "").startswith("stage:")]


def by_gid(ax, cls, gid):
    return [c for c in ax.get_children() if isinstance(c, cls) and c.get_gid() == gid]


def assert_png(fig, path):
    fig.savefig(path, dpi=60)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------------------------
# events_to_intervals
# ----------------------------------------------------------------------------------------------


def test_intervals_follow_the_stage_events_of_the_batch():
    assert events_to_intervals(make_events(), 1, max_epochs=T) == EXPECTED_INTERVALS


def test_intervals_default_end_is_the_last_event_epoch_of_the_batch():
    # the last epoch-stamped event of batch 1 is at 13: the fossil's interval is empty and dropped
    expected = [iv._replace(end_epoch=min(iv.end_epoch, 13.0)) for iv in EXPECTED_INTERVALS if iv.start_epoch < 13]
    assert events_to_intervals(make_events(), 1) == expected


def test_intervals_ignore_other_batches():
    only_batch0 = events_to_intervals(make_events(), 0, max_epochs=T)
    assert only_batch0 == [StageInterval(0, "r0c0", "GERMINATED", 1.0, 25.0)]
    assert events_to_intervals(make_events(), 7, max_epochs=T) == []


def test_intervals_read_the_from_stage_to_stage_keys_the_env_pool_writes():
    renamed = []
    for e in make_events():
        if e["event_type"] == "SEED_STAGE_CHANGED":
            e = {**e, "data": {"from_stage": e["data"]["from"], "to_stage": e["data"]["to"]}}
        renamed.append(e)
    assert events_to_intervals(renamed, 1, max_epochs=T) == EXPECTED_INTERVALS


def test_rollback_closes_non_fossilized_seeds_of_its_env_even_without_cull_events():
    events = [e for e in make_events()
              if e["event_type"] != "SEED_CULLED" or e["data"]["reason"] != "governor_rollback"]
    events.append(ev("GOVERNOR_ROLLBACK", 20, 0))  # env0 has only a fossil open at 20: it must survive
    intervals = events_to_intervals(events, 1, max_epochs=T)
    assert StageInterval(1, "r0c0", "BLENDING", 6.0, 9.0) in intervals
    assert StageInterval(0, "r0c1", "FOSSILIZED", 13.0, 25.0) in intervals


def test_intervals_accept_runresult_like_objects_and_event_objects():
    objects = [Event(EventType.SEED_GERMINATED, env_id=0, slot_id="r0c0", epoch=3, batch=2,
                     data={"blueprint": "norm", "blend": "linear"}),
               Event(EventType.SEED_STAGE_CHANGED, env_id=0, slot_id="r0c0", epoch=3, batch=2,
                     data={"from": "GERMINATED", "to": "TRAINING"}),
               Event(EventType.SEED_CULLED, env_id=0, slot_id="r0c0", epoch=8, batch=2,
                     data={"reason": "probation_timeout"})]
    run = SimpleNamespace(history=[], events=objects)
    assert events_to_intervals(run, 2) == [StageInterval(0, "r0c0", "TRAINING", 3.0, 8.0)]


def test_events_round_trip_through_a_run_directory(tmp_path):
    run_dir = RunDirectory(tmp_path / "run")
    run_dir.append_events(Event(EventType(e["event_type"]), message=e["message"], env_id=e["env_id"],
                                slot_id=e["slot_id"], epoch=e["epoch"], batch=e["batch"], data=e["data"])
                          for e in make_events())
    assert events_to_intervals(tmp_path / "run", 1, max_epochs=T) == EXPECTED_INTERVALS
    assert len(plots.load_events(run_dir.events_path)) == len(make_events())


def test_damaged_events_lines_are_left_out_with_a_note_and_skipped_types_are_not_read(tmp_path):
    """One reader of events.jsonl for the plots and the report, tolerant of what a stopped run leaves: the
    torn last line of a killed run is left out quietly, more damaged lines with a note."""
    path = tmp_path / "events.jsonl"
    good = '{"event_type": "A", "batch": 0}\n{"event_type": "REWARD_COMPUTED"}\n'
    path.write_text(good + '{"event_type": "B", "ba', encoding="utf-8")
    notes: list[str] = []
    events = plots.load_events(tmp_path, notes, skip_types=("REWARD_COMPUTED",))
    assert [e["event_type"] for e in events] == ["A"] and notes == []
    assert [e["event_type"] for e in plots.load_events(path)] == ["A", "REWARD_COMPUTED"]
    path.write_text(good + "[1, 2]\n" + '{"event_type": "B", "ba', encoding="utf-8")
    assert [e["event_type"] for e in plots.load_events(path, notes)] == ["A", "REWARD_COMPUTED"]
    assert notes == ["events.jsonl: 2 line(s) that are not JSON events left out"]
    assert plots.load_events(tmp_path / "missing.jsonl") == []


def test_integer_stage_values_are_named():
    events = [ev("SEED_GERMINATED", 1, 0, "r0c0", stage=3), stage(4, 0, "r0c0", 3, 4)]
    assert [iv.stage for iv in events_to_intervals(events, 1, max_epochs=6)] == ["TRAINING", "BLENDING"]


@st.composite
def lane_story(draw):
    """One slot's seeds in one batch: (germination epoch, stage durations, how it ends)."""
    seeds, epoch = [], 1
    for _ in range(draw(st.integers(1, 3))):
        g = epoch + draw(st.integers(0, 3))
        durations = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
        ending = draw(st.sampled_from(["cull", "open"]))
        seeds.append((g, durations, ending))
        epoch = g + sum(durations) + 1
        if ending == "open" or len(durations) == 4:
            break
    return seeds


@settings(max_examples=40)
@given(lane_story())
def test_intervals_tile_each_seed_lifetime_without_gaps_or_overlaps(story):
    names = ["TRAINING", "BLENDING", "PROBATIONARY", "FOSSILIZED"]
    events, expected = [], []
    end = max(g + sum(d) for g, d, _ in story) + 2
    for g, durations, ending in story:
        events += [ev("SEED_GERMINATED", g, 0, "r0c0"), stage(g, 0, "r0c0", "GERMINATED", "TRAINING")]
        t = g
        for i, d in enumerate(durations):
            if i > 0:
                events.append(stage(t, 0, "r0c0", names[i - 1], names[i]))
            stop = t + d if (i < len(durations) - 1 or ending == "cull") else end
            if names[i] == "FOSSILIZED":
                stop = end
            expected.append(StageInterval(0, "r0c0", names[i], float(t), float(stop)))
            t += d
        if ending == "cull" and len(durations) < 4:
            events.append(ev("SEED_CULLED", t, 0, "r0c0", reason="negative_counterfactual"))
    intervals = events_to_intervals(events, 1, max_epochs=end)
    assert intervals == expected
    assert all(a.end_epoch <= b.start_epoch for a, b in zip(intervals, intervals[1:]))


# ----------------------------------------------------------------------------------------------
# plot_runs
# ----------------------------------------------------------------------------------------------


def test_plot_runs_draws_one_subplot_per_metric_and_one_line_per_run(tmp_path):
    runs = {"ppo": SimpleNamespace(history=make_history(), events=[]), "heuristic": make_history(run_offset=2.0)}
    fig = plots.plot_runs(runs)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    acc_ax, reward_ax = fig.axes
    assert len(lines_of(acc_ax)) == 4  # per-batch + dashed rolling line per run
    assert [ln.get_linestyle() for ln in lines_of(acc_ax)] == ["-", "--", "-", "--"]
    assert len(lines_of(reward_ax)) == 2
    np.testing.assert_allclose(lines_of(reward_ax)[1].get_ydata(),
                               [e.avg_reward for e in make_history(run_offset=2.0)])
    np.testing.assert_allclose(lines_of(acc_ax)[0].get_xdata(), range(5))
    legend = [t.get_text() for t in acc_ax.get_legend().get_texts()]
    assert legend == ["ppo", "heuristic", "per batch", "rolling mean"]
    assert [t.get_text() for t in reward_ax.get_legend().get_texts()] == ["ppo", "heuristic"]
    assert_png(fig, tmp_path / "runs.png")


def test_plot_runs_options_rolling_off_env_band_other_metrics_and_x():
    fig = plots.plot_runs({"a": make_history(3)}, metrics=("avg_accuracy", "ppo.approx_kl", "rollbacks"),
                          rolling=False, env_band=True, x="episodes_completed")
    assert len(fig.axes) == 3
    assert len(lines_of(fig.axes[0])) == 1
    assert len([c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]) == 1
    kl = lines_of(fig.axes[1])[0].get_ydata()
    assert np.isnan(kl[2]) and kl[1] == pytest.approx(0.012)  # batch 2's update was skipped -> a gap
    np.testing.assert_allclose(lines_of(fig.axes[2])[0].get_xdata(), [4, 8, 12])


def test_plot_runs_accepts_a_single_history_list():
    fig = plots.plot_runs(make_history(2), metrics=("avg_reward",))
    assert len(fig.axes) == 1 and [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["run"]


# ----------------------------------------------------------------------------------------------
# plot_lifecycle
# ----------------------------------------------------------------------------------------------


def test_plot_lifecycle_draws_a_bar_per_stage_interval_and_event_markers(tmp_path):
    run = SimpleNamespace(history=[], events=make_events())
    fig = plots.plot_lifecycle(run, batch=1, n_envs=2, slot_ids=SLOTS, max_epochs=T)
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"env{e} · {s}" for e in (0, 1) for s in SLOTS]
    bars = stage_bars(ax)
    assert len(bars) == len(EXPECTED_INTERVALS)
    assert [(b.get_x(), b.get_x() + b.get_width()) for b in bars] == [(iv.start_epoch, iv.end_epoch)
                                                                       for iv in EXPECTED_INTERVALS]
    assert [b.get_gid() for b in bars] == [f"stage:{iv.stage}" for iv in EXPECTED_INTERVALS]
    colors = {b.get_gid(): b.get_facecolor() for b in bars}
    assert len(set(colors.values())) == 4  # one colour per stage
    counts = {g: len(by_gid(ax, PathCollection, g)[0].get_offsets()) for g in ("germinate", "fossilize", "cull")}
    assert counts == {"germinate": 4, "fossilize": 1, "cull": 2}
    assert sorted(t.get_text() for t in ax.texts if t.get_gid() == "cull-label") == ["policy", "rollback"]
    assert "conv_light/linear" in [t.get_text() for t in ax.texts if t.get_gid() == "germinate-label"]
    rollback = by_gid(ax, LineCollection, "rollback")
    assert len(rollback) == 1
    (segment,) = rollback[0].get_segments()
    np.testing.assert_allclose(segment[:, 0], [9, 9])
    np.testing.assert_allclose(sorted(segment[:, 1]), [3 - 0.45, 5 + 0.45])  # env1's three lanes
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[:4] == ["training", "blending", "probationary", "fossilized"]
    assert "governor rollback" in legend and "cull (reason)" in legend
    assert_png(fig, tmp_path / "lifecycle.png")


def test_plot_lifecycle_infers_lanes_and_draws_into_a_given_axis():
    host = Figure()
    ax = host.add_subplot()
    fig = plots.plot_lifecycle(make_events(), batch=1, ax=ax)
    assert fig is host
    # lanes: every (env, slot) pair among the envs and slots named in the batch's events
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"env{e} · {s}" for e in (0, 1) for s in SLOTS]
    assert len(stage_bars(ax)) == len(events_to_intervals(make_events(), 1)) == 7  # no max_epochs: ends at 13


def test_plot_lifecycle_of_an_empty_batch_says_so():
    fig = plots.plot_lifecycle(make_events(), batch=42, n_envs=1, slot_ids=SLOTS, max_epochs=T)
    assert stage_bars(fig.axes[0]) == []
    assert any("no seed events in batch 42" in t.get_text() for t in fig.axes[0].texts)


# ----------------------------------------------------------------------------------------------
# plot_action_distribution
# ----------------------------------------------------------------------------------------------


def head_bars(ax):
    return [p for p in ax.patches if (p.get_gid() or "").startswith("head:")]


def test_action_distribution_has_five_heads_with_fractions_summing_to_one(tmp_path):
    fig = plots.plot_action_distribution(SimpleNamespace(history=make_history(), events=[]))
    assert isinstance(fig, Figure) and len(fig.axes) == 5
    sizes = [len(head_bars(ax)) for ax in fig.axes]
    assert sizes == [3, 5, 3, 4, 3]
    for ax in fig.axes:
        assert sum(b.get_height() for b in head_bars(ax)) == pytest.approx(1.0)
    labels = [[t.get_text() for t in ax.get_xticklabels()] for ax in fig.axes]
    assert labels == [SLOTS, MENU, ["linear", "sigmoid", "gated"], OPS, ["fast", "standard", "slow"]]
    assert_png(fig, tmp_path / "actions.png")


def test_action_distribution_sums_only_the_chosen_batches():
    history = make_history()
    fig = plots.plot_action_distribution(history, batches=[1, 3])
    op_counts = np.array(history[1].head_counts["op"]) + np.array(history[3].head_counts["op"])
    np.testing.assert_allclose([b.get_height() for b in head_bars(fig.axes[3])], op_counts / op_counts.sum())
    assert "batches 1–3, 2 batch(es)" in fig.get_suptitle()
    single = plots.plot_action_distribution(history, batches=4)
    slot = np.array(history[4].head_counts["slot"], dtype=float)
    np.testing.assert_allclose([b.get_height() for b in head_bars(single.axes[0])], slot / slot.sum())
    sliced = plots.plot_action_distribution(history, batches=slice(3, None))
    assert "2 batch(es)" in sliced.get_suptitle()


def test_action_distribution_op_bars_report_success_rates():
    history = make_history(1)
    fig = plots.plot_action_distribution(history)
    texts = [t.get_text() for t in fig.axes[3].texts]
    assert any("75% ok" in t for t in texts)  # GERMINATE: 6 of 8 succeeded
    assert any("50% ok" in t for t in texts)  # CULL: 1 of 2


def test_action_distribution_without_batches_draws_empty_heads():
    fig = plots.plot_action_distribution(make_history(), batches=[99])
    assert len(fig.axes) == 5
    assert all(b.get_height() == 0 for ax in fig.axes for b in head_bars(ax))
    assert any("no decisions" in t.get_text() for t in fig.axes[0].texts)


# ----------------------------------------------------------------------------------------------
# plot_ppo_diagnostics
# ----------------------------------------------------------------------------------------------


def test_a_constant_entropy_coefficient_is_said_in_the_title_not_drawn(tmp_path):
    """Issue 37: a whole panel plotted a coefficient that never changed."""
    import dataclasses

    history = [dataclasses.replace(e, entropy_coef=0.05) for e in make_history()]
    fig = plots.plot_ppo_diagnostics(SimpleNamespace(history=history, events=[]))
    assert len(fig.axes) == 7 and "entropy coefficient" not in [ax.get_title() for ax in fig.axes]
    assert fig.get_suptitle().endswith("; entropy coefficient 0.05 throughout")
    assert_png(fig, tmp_path / "ppo.png")


def test_ppo_diagnostics_plots_updated_batches_and_shades_skipped_ones(tmp_path):
    fig = plots.plot_ppo_diagnostics(SimpleNamespace(history=make_history(), events=[]))
    assert isinstance(fig, Figure) and len(fig.axes) == 8
    entropy_ax = fig.axes[0]
    assert [ln.get_label() for ln in lines_of(entropy_ax)] == ["total", "slot", "blueprint", "blend", "op"]
    for ax in fig.axes:
        data_lines = [ln for ln in lines_of(ax) if ln.get_gid() != "zero"]
        assert data_lines and all(list(ln.get_xdata()) == [0, 1, 3, 4] for ln in data_lines)
        skipped = [p for p in ax.patches if p.get_gid() == "skipped"]
        assert len(skipped) == 1 and skipped[0].get_x() == pytest.approx(1.5)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["entropy per head", "approx KL", "clip fraction", "explained variance", "policy loss",
                      "value loss", "grad norm", "entropy coefficient"]
    kl_ax = fig.axes[1]
    np.testing.assert_allclose(lines_of(kl_ax)[0].get_ydata(), [0.01, 0.012, 0.016, 0.018])
    (stopped,) = by_gid(kl_ax, PathCollection, "early-stopped")
    np.testing.assert_allclose(stopped.get_offsets(), [[3, 0.016]])
    assert "1 skipped" in fig.get_suptitle()
    assert_png(fig, tmp_path / "ppo.png")


def test_ppo_diagnostics_without_updates_shows_a_message(tmp_path):
    fig = plots.plot_ppo_diagnostics(make_history(3, ppo=False))
    assert len(fig.axes) == 1
    assert "No PPO updates" in fig.axes[0].texts[0].get_text()
    only_skipped = [make_entry(b, skipped_at=(0, 1)) for b in range(2)]
    text = plots.plot_ppo_diagnostics(only_skipped).axes[0].texts[0].get_text()
    assert "2 skipped" in text and "no transitions" in text
    assert_png(fig, tmp_path / "no_ppo.png")


def test_plot_functions_reuse_a_given_figure_and_never_touch_pyplot():
    fig = Figure()
    assert plots.plot_ppo_diagnostics(make_history(), fig=fig) is fig
    assert plots.plot_action_distribution(make_history(), fig=fig) is fig and len(fig.axes) == 5
    assert plots.plot_runs({"a": make_history()}, fig=fig) is fig and len(fig.axes) == 2
    assert "matplotlib.pyplot" not in sys.modules or not __import__("matplotlib.pyplot").pyplot.get_fignums()


def test_plots_module_imports_neither_torch_nor_jax_nor_pyplot():
    source = open(plots.__file__, encoding="utf-8").read()
    imports = [ln for ln in source.splitlines() if ln.startswith(("import ", "from "))]
    assert imports
    for name in ("torch", "jax", "flax", "optax", "pyplot"):
        assert not any(name in ln for ln in imports)
