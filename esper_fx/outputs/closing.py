"""What a run says when it ends, from Python and from the command line alike: the per-batch table, one line
of totals, the largest parts of its time (`time_breakdown`), and where everything is (TensorBoard, the run
directory, the report)."""

from __future__ import annotations

import os
from typing import Any

from esper_fx.outputs.console import final_table
from esper_fx.outputs.tensorboard_log import TB_SUBDIR
from esper_fx.outputs.time_breakdown import closing_line


def closing_lines(result: Any, elapsed_s: float) -> list[str]:
    """The lines after a finished run (`result`: an `esper_fx.run` RunResult)."""
    s = result.summary
    lines = ["", final_table(result.history), "",
             f"Done in {elapsed_s:.1f} s: {s['episodes']} episodes, final accuracy {s['final_avg_accuracy']:.2f}% "
             f"(best rolling {s['best_rolling_avg_accuracy']:.2f}%), seeds germinated {s['seeds_created']}, "
             f"fossilized {s['seeds_fossilized']}, culled {s['seeds_culled']}"]
    if s.get("static_host"):
        lines.append(f"Static host (no growth, trained alone in batch {s['static_host']['batch']}): "
                     f"{s['static_host']['accuracy']:.2f}%")
    time_line = closing_line((s.get("timing") or {}).get("breakdown"))
    if time_line:
        lines.append(time_line)
    return lines + where_lines(result)


def where_lines(result: Any) -> list[str]:
    """When the first action came, and where the run's files are."""
    lines = []
    first_action = (result.summary.get("timing") or {}).get("first_action_s")
    if first_action is not None:
        lines.append(f"First action after {first_action:.1f} s")
    if result.run_dir:
        if result.config is not None and result.config.tensorboard:
            lines.append(f"TensorBoard: tensorboard --logdir {os.path.join(result.run_dir, TB_SUBDIR)}")
        wandb = getattr(result.config, "wandb", "off")
        if wandb == "offline":
            offline_runs = os.path.join(result.run_dir, "wandb", "offline-run-*")
            lines.append(f"W&B (offline): upload with wandb sync {offline_runs}")
        elif wandb == "online":
            lines.append(f"W&B: project {result.config.wandb_project}, run {os.path.basename(result.run_dir)}")
        lines.append(f"Run directory: {result.run_dir}")
    if result.report_path:
        lines.append(f"Report: {result.report_path}")
    return lines
