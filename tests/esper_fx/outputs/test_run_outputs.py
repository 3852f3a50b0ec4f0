"""What a researcher opens after a run: the TensorBoard scalars, the plots, report.html, the console.

One short PPO run (two batches, debug telemetry) is shared by the tests of this module; the interrupted and
crashed runs are built from it or from a run stopped by SIGINT.
"""

from __future__ import annotations

import base64
import csv
import fcntl
import html.parser
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

import esper_fx
from esper_fx.outputs import plots, report
from esper_fx.training import pools, run_state
from esper_fx.config import TrainingConfig
from esper_fx.outputs.history import BatchSummary
from esper_fx.outputs.tensorboard_log import TB_SUBDIR, Board, batch_scalars
from esper_fx.outputs.console import Console
from esper_fx.outputs.run_directory import LOCK_NAME
from esper_fx.outputs.time_breakdown import PARTS, largest
from tests.esper_fx.breakdowns import check_breakdown
from tests.esper_fx.stops import signal_at_apply
from tests.esper_fx import tiny

REPO = Path(__file__).resolve().parents[3]
TINY = dict(tiny.TINY, slots=["r0c0", "r0c1"])
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def tiny(**overrides) -> TrainingConfig:
    return TrainingConfig(**{**TINY, **overrides})


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished two-batch ppo_lstm run with debug telemetry, and what its console printed."""
    stream = io.StringIO()
    run_dir = tmp_path_factory.mktemp("outputs") / "run"
    result = esper_fx.run(tiny(telemetry_level="debug"), run_dir=run_dir, quiet=False, console_stream=stream)
    return result, Path(result.run_dir), stream.getvalue()


def metrics_rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


# ----------------------------------------------------------------------------------------------
# TensorBoard
# ----------------------------------------------------------------------------------------------


def read_board(run_dir: Path) -> dict[str, dict[int, float]]:
    """tag -> {step: value}, read back with the tensorboard package's own reader."""
    return {tag: dict(events) for tag, events in _board_scalars(run_dir).items()}


def board_events(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    """Every (step, value) TensorBoard keeps for one tag, duplicates included, in file order."""
    return _board_scalars(run_dir)[tag]


def _board_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / TB_SUBDIR), size_guidance={"scalars": 0})
    acc.Reload()
    assert all(t.startswith(("config", "_hparams_/")) for t in acc.Tags()["tensors"])  # text and HParams
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


# metrics.csv column -> TensorBoard tag (env{i}_accuracy, action counts and ppo_* follow a pattern)
COLUMN_TAGS = {
    "episodes_completed": "progress/episodes", "avg_accuracy": "accuracy/mean",
    "rolling_avg_accuracy": "accuracy/rolling_mean", "avg_reward": "reward/mean",
    "entropy_coef": "progress/entropy_coef", "seeds_created": "seeds/germinated",
    "seeds_fossilized": "seeds/fossilized", "seeds_culled": "seeds/culled", "rollbacks": "seeds/rollbacks",
    "wall_time_s": "timing/batch_s",
}


def tag_of(column: str) -> str | None:
    if column in COLUMN_TAGS:
        return COLUMN_TAGS[column]
    if column.startswith("env") and column.endswith("_accuracy"):
        return f"accuracy/{column[:-len('_accuracy')]}"
    if column.endswith("_gflops"):
        return f"compute/{column}"
    for prefix, group in (("successful_action_counts_", "ops_successful"), ("action_counts_", "ops"),
                          ("ppo_", "ppo")):
        if column.startswith(prefix):
            return f"{group}/{column[len(prefix):]}"
    return None


def csv_value(text: str) -> float | None:
    if text in ("True", "False"):
        return float(text == "True")
    try:
        return float(text)
    except ValueError:
        return None  # "" (None) or a list (ppo_early_stop)


def test_tensorboard_scalars_read_back_as_metrics_csv_holds_them(finished):
    _, run_dir, _ = finished
    board, rows = read_board(run_dir), metrics_rows(run_dir)
    assert len(rows) == 2
    compared = 0
    for row in rows:
        step = int(row["batch"])
        for column, text in row.items():
            value = csv_value(text)
            if column == "batch" or value is None:
                continue
            tag = tag_of(column)
            assert tag in board, f"{column} has no TensorBoard tag {tag}"
            assert board[tag][step] == float(np.float32(value)), (column, step)  # float32 simple_value
            compared += 1
    assert compared > 2 * 40


def test_tensorboard_has_components_entropy_per_head_timing_and_the_first_action(finished):
    result, run_dir, _ = finished
    board = read_board(run_dir)
    for head in ("slot", "blueprint", "blend", "op"):
        assert f"ppo/entropy_{head}" in board
    for name in ("env_s", "bridge_s", "controller_s", "update_s"):
        assert set(board[f"timing/{name}"]) == {0, 1}
    assert list(board["timing/first_action_s"]) == [0]
    assert board["timing/first_action_s"][0] == pytest.approx(result.summary["timing"]["first_action_s"])
    components = [t for t in board if t.startswith("reward_components/")]
    assert components
    for step in (0, 1):  # the reward is the sum of its components
        assert sum(board[t][step] for t in components) == pytest.approx(board["reward/mean"][step], abs=1e-5)
    assert {"choices/slot/r0c0", "choices/blueprint/noop", "choices/blend/linear"} <= set(board)


def test_a_resume_from_an_earlier_checkpoint_replaces_the_later_scalars(tmp_path):
    """As after a crash: batch 2 runs again from the checkpoint of batch 1; TensorBoard shows it once,
    with the new numbers, and still matches metrics.csv."""
    config = tiny(controller="random", n_episodes=6, checkpoint_every=1, report=False)
    first = esper_fx.run(config, run_dir=tmp_path / "r")
    checkpoint = tmp_path / "r" / "checkpoints" / "batch-000001"
    assert checkpoint.is_dir()
    esper_fx.run(config.replace(resume_path=str(checkpoint)), run_dir=tmp_path / "r")
    board, rows = read_board(tmp_path / "r"), metrics_rows(tmp_path / "r")
    assert [step for step, _ in board_events(tmp_path / "r", "timing/batch_s")] == [0, 1, 2]
    assert [int(r["batch"]) for r in rows] == [0, 1, 2]
    for row in rows:
        assert board["timing/batch_s"][int(row["batch"])] == float(np.float32(row["wall_time_s"]))
    assert board["timing/batch_s"][2] != float(np.float32(first.history[2].wall_time_s))  # the second process's batch 2


def test_the_kept_scalars_load_before_a_writer_opened_in_the_same_second_by_the_same_process(tmp_path,
                                                                                              monkeypatch):
    """Readers load event files in name order, and a writer names its file by the second, then host, process
    id and a counter compared as text: the file a resume keeps must come first even when the writer that
    follows opens within the same second under a name that sorts lower (here a host named "0"). A name
    built like the writer's once let a counter passing 9 put batch 2 before batches 0 and 1."""
    from tensorboard.summary.writer import event_file_writer

    def batch(n: int) -> BatchSummary:
        return BatchSummary(
            batch=n, episodes_completed=2 * (n + 1), env_accuracies=[50.0], avg_accuracy=50.0,
            rolling_avg_accuracy=50.0, avg_reward=0.5, env_rewards=[0.5], host_max_accuracies=[],
            env_seed_params=[], action_counts={"WAIT": 1}, successful_action_counts={"WAIT": 1},
            head_counts={}, menu=["noop"], slot_ids=["r0c0"], entropy_coef=0.05, seeds_created=0,
            seeds_fossilized=0, contributing_fossilized=0, seeds_culled=0, rollbacks=0, ppo={}, wall_time_s=n,
        )

    monkeypatch.setattr(event_file_writer, "time", SimpleNamespace(time=lambda: 1_800_000_000.0))  # one second
    first = Board(tmp_path, {})
    for n in range(3):
        first.add_batch(batch(n))
    first.close()
    second = Board(tmp_path, {})
    second.truncate(2)
    monkeypatch.setattr(event_file_writer, "socket", SimpleNamespace(gethostname=lambda: "0"))
    second.add_batch(batch(2))
    second.close()
    assert [step for step, _ in board_events(tmp_path, "timing/batch_s")] == [0, 1, 2]
    assert len(list((tmp_path / TB_SUBDIR).glob("events.out.tfevents.*"))) == 2


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get_json(url: str):
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read().decode("utf-8"))


def _served_scalars(base: str, run: str, want: set[str], deadline: float) -> dict[str, list]:
    """tag -> [[wall_time, step, value], ...] as the server serves them, once it lists every wanted tag."""
    import time
    import urllib.error
    import urllib.parse

    tags: set[str] = set()
    while time.monotonic() < deadline:
        try:
            tags = set(_get_json(f"{base}/data/plugin/scalars/tags").get(run, {}))
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            tags = set()
        if want <= tags:
            break
        time.sleep(0.5)
    assert want <= tags, f"TensorBoard lists {len(tags)} of {len(want)} tags: missing {sorted(want - tags)[:5]}"
    quote = urllib.parse.quote
    return {tag: _get_json(f"{base}/data/plugin/scalars/scalars?run={quote(run)}&tag={quote(tag)}") for tag in want}


@pytest.mark.slow
def test_a_real_tensorboard_server_in_its_default_mode_serves_every_scalar(finished, tmp_path):
    """As a user sees it: `tensorboard --logdir runs/` in its default (fast) loading mode, asked over HTTP."""
    import time

    _, run_dir, _ = finished
    board = read_board(run_dir)
    assert len(board) > 40
    logdir = tmp_path / "runs"
    logdir.mkdir()
    (logdir / "run").symlink_to(run_dir / TB_SUBDIR, target_is_directory=True)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host",
                             "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        served = _served_scalars(f"http://127.0.0.1:{port}", "run", set(board), time.monotonic() + 90)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    for tag, events in board.items():
        assert {int(step): value for _, step, value in served[tag]} == pytest.approx(events, rel=1e-6), tag


def test_batch_scalars_skip_missing_values_and_mark_skipped_updates():
    entry = BatchSummary(
        batch=3, episodes_completed=8, env_accuracies=[50.0, float("nan")], avg_accuracy=50.0,
        rolling_avg_accuracy=40.0, avg_reward=0.5, env_rewards=[0.5, 0.5], host_max_accuracies=[], env_seed_params=[],
        action_counts={"WAIT": 2}, successful_action_counts={"WAIT": 2}, head_counts={"slot": [2], "op": [2]},
        menu=["noop"], slot_ids=["r0c1"], entropy_coef=0.05, seeds_created=0, seeds_fossilized=0,
        contributing_fossilized=0, seeds_culled=0, rollbacks=0, ppo={"skipped": True, "reason": "none"},
    )
    scalars = batch_scalars(entry)
    assert "accuracy/env1" not in scalars and scalars["accuracy/env0"] == 50.0
    assert scalars["ppo/skipped"] == 1.0 and "ppo/reason" not in scalars
    assert scalars["choices/slot/r0c1"] == 2 and "choices/op/WAIT" not in scalars
    assert "timing/first_action_s" not in scalars


def test_no_tensorboard_and_no_report_write_neither(tmp_path):
    result = esper_fx.run(tiny(controller="wait", n_episodes=2, tensorboard=False, report=False), run_dir=tmp_path / "r")
    run_dir = Path(result.run_dir)
    assert (run_dir / "metrics.csv").exists()
    assert not (run_dir / TB_SUBDIR).exists()
    assert not (run_dir / report.REPORT_NAME).exists() and not (run_dir / report.PLOTS_SUBDIR).exists()
    assert result.report_path is None


# ----------------------------------------------------------------------------------------------
# plots and report.html
# ----------------------------------------------------------------------------------------------


class PageParser(html.parser.HTMLParser):
    """The <img> sources and the text of a page; raises on nothing, so `feed` is the parse check."""

    def __init__(self):
        super().__init__()
        self.images: list[str] = []
        self.text: list[str] = []
        self.open_tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        elif tag not in ("meta", "br"):
            self.open_tags.append(tag)

    def handle_endtag(self, tag):
        assert self.open_tags and self.open_tags.pop() == tag, f"unbalanced </{tag}>"

    def handle_data(self, data):
        self.text.append(data)


def parse_page(path: Path) -> PageParser:
    parser = PageParser()
    parser.feed(path.read_text(encoding="utf-8"))
    parser.close()
    assert parser.open_tags == []
    return parser


def check_pngs(plots_dir: Path) -> list[Path]:
    pngs = sorted(plots_dir.glob("*.png"))
    for png in pngs:
        assert png.stat().st_size > 1000, png
        with Image.open(png) as image:
            image.load()  # decodes every pixel
            assert image.width > 100 and image.height > 100
    return pngs


def test_every_plot_exists_is_non_empty_and_decodes(finished):
    result, run_dir, _ = finished
    pngs = check_pngs(run_dir / report.PLOTS_SUBDIR)
    assert {p.stem for p in pngs} == {"learning_curves", "seed_events", "lifecycle", "actions", "ppo", "timing",
                                      "time_breakdown"}
    assert result.report_path == str(run_dir / report.REPORT_NAME)


def test_the_summary_breaks_the_runs_time_into_parts_and_the_console_names_the_largest(finished):
    """Issue 55, item 1, in process: every part, none negative, their sum the run's wall time, the share of
    `other`; summary.json's breakdown is the final one (the report's own time in it); the closing lines name the
    three largest parts."""
    result, run_dir, printed = finished
    parts = check_breakdown(result.summary)
    assert min(parts[name] for name in ("update", "checkpoints", "logging", "static_host", "report")) > 0, parts
    breakdown = result.summary["timing"]["breakdown"]
    assert breakdown["wall_s"] >= result.summary["wall_time_s"]  # the batches' own wall times, and the rest
    assert json.loads((run_dir / "summary.json").read_text())["timing"]["breakdown"] == breakdown
    lines = [line for line in printed.splitlines() if line.startswith("Time: ")]
    assert len(lines) == 1 and f"of {breakdown['wall_s']:.1f} s (other" in lines[0]
    assert all(PARTS[name] in lines[0] for name, _ in largest(breakdown))


def test_report_html_holds_the_summary_numbers_and_one_inlined_image_per_plot(finished):
    result, run_dir, _ = finished
    page = parse_page(run_dir / report.REPORT_NAME)
    text = " ".join(page.text)
    s = result.summary
    for key in ("final_avg_accuracy", "final_rolling_avg_accuracy", "best_rolling_avg_accuracy", "seeds_created",
                "seeds_culled", "episodes"):
        assert report.format_value(s[key]) in text, key
    assert "Finished: 2 of 2 batches" in text
    assert "ppo_lstm" in text and "shapes10" in text  # the config
    pngs = sorted((run_dir / report.PLOTS_SUBDIR).glob("*.png"))
    assert len(page.images) == len(pngs)
    inlined = {base64.b64decode(src.split(",", 1)[1]) for src in page.images}
    assert all(src.startswith("data:image/png;base64,") for src in page.images)
    assert inlined == {p.read_bytes() for p in pngs}  # self-contained: the files' bytes, no links


def test_console_shows_the_first_action_elapsed_time_and_eta(finished):
    _, _, console = finished
    assert "First action after" in console
    assert console.count("ETA") == 2 and "0 batches left" in console


def test_console_episode_text_and_eta_on_resume():
    console = Console(5, 3, quiet=True, n_envs=2, n_episodes=9)
    assert console.episodes_text(0) == "episodes 1-2/9"
    assert console.episodes_text(4) == "episodes 9-9/9"
    console.start_at(3)
    console.batch_done(BatchSummary(**{**_empty_summary(), "batch": 3}))
    assert "(1 batch left)" in console.time_line()


class TerminalStream(io.StringIO):
    def isatty(self) -> bool:
        return True


def _drawn(columns: int, monkeypatch) -> str:
    """What the console draws on a terminal `columns` wide through one resumed batch."""
    monkeypatch.setenv("COLUMNS", str(columns))  # rich sizes the bar to the terminal
    stream = TerminalStream()
    console = Console(30, 12, stream=stream, n_envs=4, n_episodes=120)
    console.start_at(23)  # a resumed run: two-digit batches and episodes
    console.action_ready(23, 11)
    console.epoch_done(23, 11, 4096)
    console.batch_done(BatchSummary(**{**_empty_summary(), "batch": 23}))
    console.line(console.time_line())
    console.close()
    return stream.getvalue()  # rich draws on the console's stream


def test_console_on_a_terminal_draws_a_progress_bar_with_episodes_and_eta(monkeypatch):
    shown = _drawn(240, monkeypatch)
    assert "batch 24/30" in shown and "episodes 93-96/120" in shown and "epoch 11/12" in shown and "ETA" in shown
    assert "train steps/s" in shown and "acc " in shown
    assert "First action after" in shown and "(6 batches left)" in shown


@pytest.mark.parametrize("columns, pace, last", [(80, False, False), (100, True, False), (140, True, True)])
def test_the_progress_bar_fits_the_terminal_without_cutting_a_field(monkeypatch, columns, pace, last):
    """Issue 37: at 80 columns the bar read `batch… episodes 1…`."""
    shown = _drawn(columns, monkeypatch)
    assert "…" not in shown
    assert "batch 24/30" in shown and "episodes 93-96/120" in shown and "epoch 11/12" in shown and "ETA" in shown
    assert ("train steps/s" in shown) == pace and ("acc " in shown) == last


def test_a_task_mix_batch_line_names_each_envs_task():
    from esper_fx.outputs.console import format_batch_lines
    plain = BatchSummary(**{**_empty_summary(), "env_accuracies": [12.5, 60.0]})
    assert "env acc [12.5, 60.0]" in format_batch_lines(plain, 4)[0]
    mixed = BatchSummary(**{**_empty_summary(), "env_accuracies": [12.5, 60.0],
                            "env_tasks": ["shapes16", "shapes16_spatial"]})
    assert "env acc [12.5 shapes16, 60.0 shapes16_spatial]" in format_batch_lines(mixed, 4)[0]


def test_summarize_batch_records_the_tasks_only_for_a_task_mix():
    from types import SimpleNamespace
    from esper_fx.outputs.history import BatchRecord, summarize_batch
    results = [SimpleNamespace(final_val_acc=acc, host_max_acc=acc, action_counts=[1, 0, 0, 0],
                               successful_action_counts=[1, 0, 0, 0], seeds_created=0, seeds_fossilized=0,
                               contributing_fossilized=0, rollbacks=0, flops={}, task=task)
               for acc, task in ((12.5, "shapes16"), (60.0, "shapes16_spatial"))]
    record = BatchRecord(results, [1.0, 6.0], [], {}, None, {}, [0.0, 0.0])
    args = (record, 0, 0, [], ["noop"], ["r0c0"], 0.02, 1.0)
    assert summarize_batch(*args).env_tasks == []
    assert summarize_batch(*args, mixed=True).env_tasks == ["shapes16", "shapes16_spatial"]


def _empty_summary() -> dict:
    return dict(batch=0, episodes_completed=0, env_accuracies=[], avg_accuracy=0.0, rolling_avg_accuracy=0.0,
                avg_reward=0.0, env_rewards=[], host_max_accuracies=[], env_seed_params=[], action_counts={},
                successful_action_counts={}, head_counts={}, menu=[], slot_ids=[], entropy_coef=0.0,
                seeds_created=0, seeds_fossilized=0, contributing_fossilized=0, seeds_culled=0, rollbacks=0, ppo=None)


def test_report_of_an_interrupted_run(tmp_path):
    """SIGINT in the second batch: one batch on disk, no summary.json; the report says so and draws it."""
    config = tiny(n_episodes=6, report=False)
    pool = pools.build_pool(config)
    signal_at_apply(pool, 5, signal.SIGINT)  # second epoch of the second batch
    assert threading.current_thread() is threading.main_thread()
    with pytest.raises(run_state.Interrupted):
        esper_fx.run(config, run_dir=tmp_path / "r", pool=pool)
    run_dir = tmp_path / "r"
    assert not (run_dir / "summary.json").exists() and not (run_dir / report.REPORT_NAME).exists()
    proc = subprocess.run([sys.executable, "-m", "esper_fx.report", str(run_dir)], env=dict(
        os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"Report: {run_dir / report.REPORT_NAME}" in proc.stdout
    text = " ".join(parse_page(run_dir / report.REPORT_NAME).text)
    assert "Not finished: 1 of 3 batches" in text and "--resume" in text
    assert {p.stem for p in check_pngs(run_dir / report.PLOTS_SUBDIR)} >= {"learning_curves", "actions", "ppo"}


def test_report_of_a_crashed_run_reads_metrics_csv_past_the_last_checkpoint(finished, tmp_path):
    """No checkpoint and no summary.json (a run killed before its first checkpoint): metrics.csv and the
    events give every batch, with its PPO metrics."""
    _, run_dir, _ = finished
    crashed = tmp_path / "crashed"
    shutil.copytree(run_dir, crashed, ignore=shutil.ignore_patterns("checkpoints", "summary.json", "plots",
                                                                    "report.html"))
    record = report.load_run(crashed)
    assert [h.batch for h in record.history] == [0, 1] and not record.finished
    assert record.history[1].ppo["approx_kl"] == pytest.approx(finished[0].history[1].ppo["approx_kl"])
    assert record.summary["final_avg_accuracy"] == finished[0].summary["final_avg_accuracy"]
    report.write_report(crashed)
    assert len(parse_page(crashed / report.REPORT_NAME).images) == len(check_pngs(crashed / report.PLOTS_SUBDIR))


def test_a_failing_plot_is_reported_in_the_page_and_the_rest_is_written(finished, tmp_path, monkeypatch):
    _, run_dir, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)

    def broken(*args, **kwargs):
        raise RuntimeError("no ink")

    monkeypatch.setattr(plots, "plot_timing", broken)
    with pytest.warns(UserWarning, match="timing"):
        path = report.write_report(copy)
    page = parse_page(path)
    assert "Plot timing could not be drawn: RuntimeError: no ink" in " ".join(page.text)
    assert len(page.images) == 6  # the seven plots but the broken one
    messages = []
    with pytest.warns(UserWarning, match="report not written"):
        assert report.write_report_or_warn(tmp_path / "missing", messages.append) is None
    assert messages and "python -m esper_fx.report" in messages[0]


def _insert_line(path: Path, index: int, line: bytes) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:index] + [line] + lines[index:]))


def _replace_cell(path: Path, column: str, row: int, text: str) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    cells = lines[row + 1].rstrip("\n").split(",")
    cells[header.index(column)] = text
    lines[row + 1] = ",".join(cells) + "\n"
    path.write_text("".join(lines), encoding="utf-8")


DAMAGES = {  # name -> (damage, a word of the note the page shows)
    "events.jsonl not UTF-8": (lambda d: _insert_line(d / "events.jsonl", 3, b'{"event_type": "\xff\xfe"}\n'),
                               "events.jsonl"),
    "events.jsonl torn non-UTF-8 tail": (lambda d: (d / "events.jsonl").open("ab").write(b'{"event\xc3'),
                                         "events.jsonl"),
    "metrics.csv not UTF-8": (lambda d: _insert_line(d / "metrics.csv", 2, b"1,\xff\xfe,3\n"), "metrics.csv"),
    "metrics.csv non-numeric cell": (lambda d: _replace_cell(d / "metrics.csv", "avg_accuracy", 0, "abc"),
                                     "non-numeric"),
    "metrics.csv non-numeric batch": (lambda d: _replace_cell(d / "metrics.csv", "batch", 1, "x"), "metrics.csv"),
    "config.json wrong types": (lambda d: (d / "config.json").write_text(json.dumps(
        {"slots": 5, "n_envs": "x", "blueprint_menu": 3, "n_episodes": [1], "max_epochs": {}, "task": 7})),
        "config.json"),
    "config.json infinite sizes": (lambda d: (d / "config.json").write_text(
        '{"n_episodes": Infinity, "n_envs": 2}'), "config.json"),
    "config.json a list": (lambda d: (d / "config.json").write_text("[1, 2]"), "config.json"),
    "config.json not UTF-8": (lambda d: (d / "config.json").write_bytes(b'{"task": "\xff"}'), "config.json"),
    "summary.json wrong types": (lambda d: (d / "summary.json").write_text('["batches"]'), "summary.json"),
}


def _damaged_copy(run_dir: Path, target: Path, damages: list[str], without_checkpoints: bool) -> Path:
    shutil.copytree(run_dir, target, ignore=shutil.ignore_patterns(
        "plots", "report.html", *(["checkpoints", "summary.json"] if without_checkpoints else [])))
    for damage in damages:
        DAMAGES[damage][0](target)
    return target


@pytest.mark.parametrize("without_checkpoints", [False, True])
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_report_skips_damaged_lines_and_rows_with_a_note(finished, tmp_path, damage, without_checkpoints):
    """A torn or damaged file costs its bad line or row (named in the page), never the report."""
    copy = _damaged_copy(finished[1], tmp_path / "copy", [damage], without_checkpoints)
    record = report.load_run(copy)
    assert [h.batch for h in record.history] == ([0] if "batch" in damage and without_checkpoints else [0, 1])
    word = DAMAGES[damage][1]
    assert any(word in note for note in record.notes), record.notes
    assert word in report.render_html(record, [])


def test_the_report_command_builds_the_page_of_a_run_with_every_damage_at_once(finished, tmp_path, capsys):
    damages = [d for d in sorted(DAMAGES) if not d.startswith(("config.json a", "config.json not", "summary"))]
    copy = _damaged_copy(finished[1], tmp_path / "copy", damages, without_checkpoints=True)
    assert report.main([str(copy)]) == 0
    assert "Traceback" not in capsys.readouterr().err
    page = " ".join(parse_page(copy / report.REPORT_NAME).text)
    for word in ("events.jsonl", "metrics.csv", "non-numeric", "config.json"):
        assert word in page

def test_report_command_fails_cleanly_on_a_directory_without_a_run(tmp_path, capsys):
    """docs/USAGE.md's exit codes: a path that is no run directory is a bad input, exit 2 (it was 1)."""
    assert report.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"esper_fx.report: error: {tmp_path} is not a run directory (no config.json, no metrics.csv)"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("blocked, needle", [("plots", "is not a folder"), ("report.html", "is a folder")])
def test_a_report_that_cannot_go_where_it_goes_is_one_line_exit_2_and_writes_nothing(finished, tmp_path, capsys,
                                                                                       blocked, needle):
    """Issue 39, item 8: `plots` replaced by a file, or `report.html` by a folder, exited 1 and left a 312 KB
    `.report.html.tmp` in the run."""
    from tests.esper_fx.bad_inputs import snapshot

    _, run_dir, _ = finished
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    for name in ("plots", "report.html"):
        shutil.rmtree(copy / name) if (copy / name).is_dir() else (copy / name).unlink()
    (copy / "plots").write_text("x") if blocked == "plots" else (copy / "report.html").mkdir()
    before = snapshot(copy)
    assert report.main([str(copy)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{copy / blocked} {needle}" in err[0], err
    assert snapshot(copy) == before


# ----------------------------------------------------------------------------------------------
# with issue 12's run directory: the batch commit, truncation on resume, the lock, stops
# ----------------------------------------------------------------------------------------------


def test_a_stop_inside_the_scalars_of_a_batch_keeps_tensorboard_with_the_checkpoint_and_metrics_csv(tmp_path,
                                                                                                   monkeypatch):
    """The TensorBoard scalars belong to the batch's commit: a stop while they are written waits for the
    commit, so the checkpoint, metrics.csv and TensorBoard hold the same batches, and after the resume too."""
    config = tiny(controller="random", n_episodes=6, checkpoint_every=1, report=False)
    original, calls = Board.add_batch, {"n": 0}

    def interrupting(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Board, "add_batch", interrupting)
    with pytest.raises(run_state.Interrupted) as info:
        esper_fx.run(config, run_dir=tmp_path / "r")
    monkeypatch.undo()
    done = json.loads((Path(info.value.checkpoint) / "manifest.json").read_text())["next_batch_idx"]
    assert done == 2
    assert [step for step, _ in board_events(tmp_path / "r", "timing/batch_s")] == [0, 1]
    assert [int(r["batch"]) for r in metrics_rows(tmp_path / "r")] == [0, 1]
    esper_fx.run(config.replace(resume_path=str(tmp_path / "r")), run_dir=tmp_path / "r")
    board, rows = read_board(tmp_path / "r"), metrics_rows(tmp_path / "r")
    assert [step for step, _ in board_events(tmp_path / "r", "timing/batch_s")] == [0, 1, 2]
    assert [board["timing/batch_s"][int(r["batch"])] for r in rows] == [float(np.float32(r["wall_time_s"])) for r in rows]


def test_a_full_disk_met_by_the_tensorboard_writer_is_one_line_without_its_threads_traceback(tmp_path, monkeypatch,
                                                                                              capsys):
    """Issue 39, item 7: a disk that filled mid-batch printed the TensorBoard writer thread's traceback before
    the run's one line. The thread's failure is raised again in the run's thread, which reports it."""
    import errno

    from tensorboard.summary.writer.record_writer import RecordWriter

    from esper_fx.cli.train import main

    real, writes = RecordWriter.write, {"n": 0}

    def filling(self, data):  # the disk is full from the 40th record on (in the second batch's scalars)
        writes["n"] += 1
        if writes["n"] >= 40:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data)

    monkeypatch.setattr(RecordWriter, "write", filling)
    printed: list[BaseException] = []  # what a thread's failure would print (the default hook's job)
    monkeypatch.setattr(threading, "excepthook", lambda args: printed.append(args.exc_value))
    (tmp_path / "c.json").write_text(json.dumps({**TINY, "controller": "random", "device": "cpu", "report": False}))
    monkeypatch.chdir(tmp_path)
    assert main(["--config", "c.json", "--run-dir", "r", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0] and str(tmp_path / "r" / TB_SUBDIR) in err[0], err
    assert writes["n"] >= 40 and printed == []


def test_a_resume_stopped_before_its_first_batch_leaves_tensorboard_as_metrics_csv(tmp_path):
    """A resume truncates metrics.csv and events.jsonl at its start; TensorBoard follows at once, so a resume
    stopped again before it finished a batch leaves no scalars of batches metrics.csv no longer has."""
    config = tiny(controller="random", n_episodes=6, checkpoint_every=1, report=False)
    esper_fx.run(config, run_dir=tmp_path / "r")
    resumed = config.replace(resume_path=str(tmp_path / "r" / "checkpoints" / "batch-000001"))
    pool = pools.build_pool(resumed)
    signal_at_apply(pool, 1, signal.SIGINT)  # in the first epoch the resume applies
    with pytest.raises(run_state.Interrupted):
        esper_fx.run(resumed, run_dir=tmp_path / "r", pool=pool)
    assert [int(r["batch"]) for r in metrics_rows(tmp_path / "r")] == [0, 1]
    assert [step for step, _ in board_events(tmp_path / "r", "timing/batch_s")] == [0, 1]


def test_the_report_reads_a_run_directory_whose_lock_is_held(finished, tmp_path):
    """The report takes no lock: it works on the directory of a run that is still running."""
    _, run_dir, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("plots", "report.html"))
    with open(copy / LOCK_NAME, "a+b") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert report.main([str(copy)]) == 0
        assert len(parse_page(copy / report.REPORT_NAME).images) == len(check_pngs(copy / report.PLOTS_SUBDIR))


def test_a_stop_while_the_report_is_drawn_only_skips_the_report(tmp_path, monkeypatch, capsys):
    """The run is complete when its report is drawn: SIGTERM (or Ctrl-C) there skips the report, keeps the
    run's result and says how to write the report later."""
    original = report.write_report

    def stopped(run_dir):
        os.kill(os.getpid(), signal.SIGTERM)
        return original(run_dir)

    monkeypatch.setattr(report, "write_report", stopped)
    result = esper_fx.run(tiny(controller="wait", n_episodes=2), run_dir=tmp_path / "r")
    assert result.report_path is None and [h.batch for h in result.history] == [0]
    assert (tmp_path / "r" / "summary.json").exists() and (tmp_path / "r" / "checkpoints" / "final").exists()
    assert not (tmp_path / "r" / report.REPORT_NAME).exists()
    assert f"report not written (SIGTERM): python -m esper_fx.report {tmp_path / 'r'}" in capsys.readouterr().err
    monkeypatch.undo()
    assert report.main([str(tmp_path / "r")]) == 0


# ----------------------------------------------------------------------------------------------
# a real browser
# ----------------------------------------------------------------------------------------------


def find_browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


IMAGE_PROBE = """<script>
window.addEventListener("load", () => {
  const imgs = Array.from(document.images);
  document.title = "rendered " + imgs.filter(i => i.complete && i.naturalWidth > 0).length + " of " + imgs.length;
});
</script>"""


def test_report_renders_its_images_in_a_headless_browser(finished, tmp_path):
    browser = find_browser()
    if browser is None:
        pytest.skip("no headless browser (chromium / google-chrome) installed")
    _, run_dir, _ = finished
    page = tmp_path / "probe.html"
    page.write_text((run_dir / report.REPORT_NAME).read_text(encoding="utf-8").replace("</body>",
                                                                                        IMAGE_PROBE + "</body>"))
    n_images = len(parse_page(run_dir / report.REPORT_NAME).images)
    proc = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                           f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 and "<html" not in proc.stdout:
        pytest.skip(f"{browser} could not start here: {proc.stderr.strip()[-300:]}")
    assert f"<title>rendered {n_images} of {n_images}</title>" in proc.stdout
    assert n_images == 7


def test_the_reports_config_table_shows_values_as_config_json_writes_them():
    """Issue 37: the table mixed Python's True with JSON's null."""
    from esper_fx.outputs import report

    page = report.config_section({"tensorboard": True, "report": False, "run_dir": None, "slots": ["r0c0", "r0c1"],
                                  "task": "shapes16", "lr": 0.0003})
    for shown in (">true<", ">false<", ">null<", '>[&quot;r0c0&quot;, &quot;r0c1&quot;]<', ">shapes16<", ">0.0003<"):
        assert shown in page
    assert "True" not in page and "None" not in page
    nested = report.config_section({"task": "shapes16", "ppo": {"lr": 0.0003}, "heuristic": {"blend": "linear"}})
    assert ">ppo.lr<" in nested and ">0.0003<" in nested and ">heuristic.blend<" in nested and ">linear<" in nested
