"""`python -m esper_fx.doctor --full --device cuda:0 --json PATH`: the GPU check, one command (issue 55, item 4).

The first thing to run when a GPU is lent. Four parts, each a child process with a timeout, in this order:

    checks      the doctor's checks on the device (`python -m esper_fx.doctor --device DEV`)
    quickstart  README's main command on the device (`python -m esper_fx.train --device DEV`), with the
                breakdown of its time (summary.json's `timing.breakdown`) and each batch's wall and
                compilation seconds
    gpu_tests   the tests marked `gpu` (`python -m pytest -m gpu`), when the tests folder is there
    bench       the benchmarks, quick (`python -m esper_fx.bench --quick --device cpu|cuda`)

The quickstart runs second: its breakdown is what the check is for, so it gets the time first. Every part's
timeout comes out of one budget (`BUDGET_S`, 8 minutes): a part gets at most its own cap and never the time
the parts after it need at least. A part that fails or runs out of time (SIGTERM to its process group, then
SIGKILL after `GRACE_S`; a stopped quickstart checkpoints, and its finished batches are read back) is recorded,
and the next one runs. Each child's output is echoed with its part's name, and one line says how each part
ended. The JSON file holds every part's status, exit code, wall time, timeout, command, result and last
lines of output, and the quickstart's breakdown at its top level, written whole or not at all. Exit 0 when no
part failed or timed out. Ctrl-C or SIGTERM stops the running part (SIGTERM to its group, SIGKILL after
`GRACE_S`), removes the temporary folder and writes the JSON of the parts that ran, the stopped one marked
`stopped` (exit 130 / 143).

`--tiny` is the form CI and the tests run on the CPU in well under a minute: the checks without the training
run, whose workload (`training_run.SMALL_RUN`: one batch of 2 envs at the test suite's sizes) the quickstart
part runs instead, without its report; the bridge benchmark only; and no gpu tests (which skip on the CPU
anyway).
"""

from __future__ import annotations

import collections
import datetime
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from esper_fx.doctor.training_run import SMALL_RUN
from esper_fx.outputs.durable import write_whole
from esper_fx.stopping import deferred_stops, exit_code, sigterm_stops, stop_signal

ROOT = Path(__file__).resolve().parents[2]  # the checkout (or site-packages) that holds esper_fx
BUDGET_S = 480.0  # the whole check on one H100: 8 minutes
GRACE_S = 10.0  # after SIGTERM at a part's timeout, before SIGKILL (a stopped run checkpoints meanwhile)
TAIL_LINES = 40
MIN_TIMEOUT_S = 10.0  # a part the budget leaves less is not run
PASSED, FAILED, TIMED_OUT, NOT_RUN, STOPPED = "passed", "failed", "timed out", "not run", "stopped"
TRAINING_CHECKS = ("cli_run", "checkpoint", "gpu_checkpoint_on_cpu")  # the checks that train (left out by --tiny)


@dataclass
class Part:
    """One part of the check: its command (None: not run, `why_not` says why), its timeout cap, the least time
    it needs (`floor_s`: the earlier parts leave it that much of the budget), and how its result is read."""

    name: str
    argv: list[str] | None
    cap_s: float
    floor_s: float
    why_not: str = ""
    env: dict[str, str] = field(default_factory=dict)  # set in the child's environment
    read: Callable[["PartResult"], None] | None = None  # fills `result` and `detail` from the part's files


@dataclass
class PartResult:
    name: str
    status: str
    detail: str = ""
    exit_code: int | None = None
    wall_s: float = 0.0
    timeout_s: float | None = None
    command: list[str] | None = None
    result: dict[str, Any] = field(default_factory=dict)
    output_tail: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------
# the parts
# ----------------------------------------------------------------------------------------------


def plan(device: str, scratch: Path, *, tiny: bool = False, quickstart_dir: Path | None = None,
         tests_dir: Path | None = None) -> list[Part]:
    """The four parts on `device` (cpu or cuda:N), their files under `scratch`."""
    python = sys.executable
    cuda = device.startswith("cuda")
    # the benchmarks and the gpu tests use the first GPU they see: cuda:N is made that one
    first_gpu = {"CUDA_VISIBLE_DEVICES": device.split(":", 1)[1]} if cuda and device != "cuda:0" else {}
    checks_json, bench_json = scratch / "checks.json", scratch / "bench.json"
    run_dir = quickstart_dir or scratch / "quickstart"
    tests = tests_dir if tests_dir is not None else ROOT / "tests"
    checks = [python, "-m", "esper_fx.doctor", "--device", device, "--json", str(checks_json)]
    if tiny:
        checks += ["--skip", *TRAINING_CHECKS]
    quickstart = [python, "-m", "esper_fx.train", "--device", device, "--run-dir", str(run_dir)]
    if tiny:  # the cli_run check's workload (the test suite's sizes, so its programs are in its cache), no report
        (scratch / "tiny.json").write_text(json.dumps(SMALL_RUN))
        quickstart += ["--config", str(scratch / "tiny.json"), "--env-workers", "0", "--no-report"]
    gpu_tests = None if tiny or not tests.is_dir() else \
        [python, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-n", str(min(4, os.cpu_count() or 1)),
         str(tests)]
    bench = [python, "-m", "esper_fx.bench", "--quick", "--device", "cuda" if cuda else "cpu",
             "--json", str(bench_json)]
    bench += ["--only", "bridge"] if tiny else []
    return [
        Part("checks", checks, cap_s=150, floor_s=40, read=lambda r: read_checks(r, checks_json)),
        Part("quickstart", quickstart, cap_s=330, floor_s=120, read=lambda r: read_quickstart(r, run_dir)),
        Part("gpu_tests", gpu_tests, cap_s=150, floor_s=30, env=first_gpu, read=read_pytest,
             why_not="--tiny: left out (on the CPU they skip)" if tiny else f"no tests folder at {tests}"),
        Part("bench", bench, cap_s=120, floor_s=30, env=first_gpu, read=lambda r: read_bench(r, bench_json)),
    ]


def read_checks(part: PartResult, path: Path) -> None:
    report = _json(path)
    if not report:
        return
    checks = report.get("checks", [])
    part.result = {"checks": checks}
    counts = collections.Counter(c["status"] for c in checks)
    failed = [c["name"] for c in checks if c["status"] == FAILED]
    part.detail = ", ".join(f"{n} {status}" for status, n in counts.items())
    part.detail += f"; failed: {', '.join(failed)}" if failed else ""


def read_quickstart(part: PartResult, run_dir: Path) -> None:
    """The run's summary and breakdown, and each batch's wall and compilation seconds (from its checkpoint's
    history, so a run stopped at its timeout still says how far it got and how its batches went)."""
    from esper_fx.outputs.time_breakdown import closing_line, shares

    result: dict[str, Any] = {"run_dir": str(run_dir)}
    summary = _json(run_dir / "summary.json")
    history = batch_history(run_dir)
    if history:
        result["batches_done"] = len(history)
        result["batch_wall_s"] = [round(float(h.get("wall_time_s") or 0.0), 3) for h in history]
        result["batch_compile_s"] = [round(float((h.get("timing") or {}).get("compile_s", 0.0)), 3) for h in history]
    if summary:
        timing = summary.get("timing") or {}
        result.update({k: summary.get(k) for k in ("episodes", "batches", "final_avg_accuracy", "wall_time_s")})
        result.update(first_action_s=timing.get("first_action_s"), env_workers=timing.get("env_workers"))
        breakdown = timing.get("breakdown")
        if breakdown:
            result["breakdown"] = breakdown
            result["shares"] = {k: round(v, 4) for k, v in shares(breakdown).items()}
            part.detail = closing_line(breakdown) or ""
    elif history:
        part.detail = f"{len(history)} batches finished (no summary.json: the run did not end)"
    part.result = result


def batch_history(run_dir: Path) -> list[dict[str, Any]]:
    """The batches of the run's latest checkpoint ([] without one)."""
    from esper_fx.outputs.checkpoint import read_manifest

    try:
        return list(read_manifest(run_dir)["history"])
    except Exception:  # noqa: BLE001 - no checkpoint yet, or none readable: nothing to say
        return []


PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)")


def read_pytest(part: PartResult) -> None:
    for line in reversed(part.output_tail):
        counts = PYTEST_COUNT.findall(line)
        if counts:
            part.result = {name: int(n) for n, name in counts}
            part.detail = line.strip(" =")
            return


def read_bench(part: PartResult, path: Path) -> None:
    report = _json(path)
    if not report:
        return
    results = {name: r for name, r in report.items() if name != "meta" and isinstance(r, dict)}
    part.result = {"meta": report.get("meta", {}),
                   **{name: r.get("error") or r.get("headline") for name, r in results.items()}}
    errors = [name for name, r in results.items() if "error" in r]
    part.detail = f"{len(results) - len(errors)} of {len(results)} benchmarks ran" + \
        (f"; failed: {', '.join(errors)}" if errors else "")


def _json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


# ----------------------------------------------------------------------------------------------
# running them
# ----------------------------------------------------------------------------------------------


def run_part(part: Part, timeout_s: float, say: Callable[[str], None] = print, grace_s: float = GRACE_S) -> PartResult:
    """Run one part as a child process (its own process group) with `timeout_s`, echoing its output."""
    result = PartResult(part.name, NOT_RUN, part.why_not, command=part.argv, timeout_s=round(timeout_s, 1))
    if part.argv is None:
        return result
    env = {**os.environ, **part.env, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                               os.environ.get("PYTHONPATH")]))}
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    started = time.perf_counter()
    try:
        proc = subprocess.Popen(part.argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True)
    except OSError as exc:
        result.status, result.detail = FAILED, f"could not start: {exc}"
        return result

    def echo() -> None:
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            say(f"  {part.name} | {line}")

    reader = threading.Thread(target=echo, daemon=True)
    reader.start()
    try:
        result.exit_code = proc.wait(timeout=timeout_s)
        result.status = PASSED if result.exit_code == 0 else FAILED
    except subprocess.TimeoutExpired:
        result.status = TIMED_OUT
        result.exit_code = _stop_group(proc, grace_s)
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM to the doctor itself: its part stops too, and says so
        with deferred_stops(reraise=False):
            result.status, result.exit_code = STOPPED, _stop_group(proc, grace_s)
            reader.join(timeout=5)
            result.wall_s = round(time.perf_counter() - started, 2)
            result.output_tail = list(tail)
            result.detail = f"stopped by {signal.Signals(stop_signal(stop)).name} after {result.wall_s:.0f} s"
        stop.partial = result
        raise
    finally:
        if proc.poll() is None:  # (anything else that leaves early: the child goes too)
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        reader.join(timeout=5)
    result.wall_s = round(time.perf_counter() - started, 2)
    result.output_tail = list(tail)
    ending = {FAILED: f"exit {result.exit_code}", TIMED_OUT: f"stopped after {timeout_s:.0f} s"}.get(result.status)
    if part.read is not None:
        try:
            part.read(result)
        except Exception as exc:  # noqa: BLE001 - a result that cannot be read is said, never a crash
            result.detail = f"its result could not be read: {type(exc).__name__}: {exc}"
    if ending:
        result.detail = f"{ending}; {result.detail}" if result.detail else ending
    return result


def _stop_group(proc: subprocess.Popen, grace_s: float) -> int:
    """SIGTERM to the part's process group (a quickstart checkpoints), SIGKILL after `grace_s`; its exit code."""
    _signal_group(proc, signal.SIGTERM)
    try:
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        return proc.wait()


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def run_parts(parts: Sequence[Part], budget_s: float = BUDGET_S, say: Callable[[str], None] = print,
              grace_s: float = GRACE_S) -> list[PartResult]:
    """Every part in order, each with the timeout the budget leaves it: at most its cap, never the floors of
    the parts after it (nor their grace); a part left under MIN_TIMEOUT_S is not run."""
    started = time.perf_counter()
    results: list[PartResult] = []
    try:
        _run_each(parts, budget_s, say, grace_s, started, results)
    except KeyboardInterrupt as stop:  # the parts that finished, and the one stopped, go with the stop
        stopped = getattr(stop, "partial", None)
        stop.partial = results + ([stopped] if isinstance(stopped, PartResult) else [])
        raise
    return results


def _run_each(parts: Sequence[Part], budget_s: float, say: Callable[[str], None], grace_s: float, started: float,
              results: list[PartResult]) -> None:
    for i, part in enumerate(parts):
        later = [p for p in parts[i + 1:] if p.argv is not None]
        left = budget_s - (time.perf_counter() - started) - sum(p.floor_s + grace_s for p in later) - grace_s
        timeout = min(part.cap_s, left)
        if part.argv is not None and timeout < MIN_TIMEOUT_S:
            result = PartResult(part.name, NOT_RUN, f"no time left in the {budget_s:.0f} s budget",
                                command=part.argv)
        else:
            if part.argv is not None:
                say(f"[{i + 1}/{len(parts)}] {part.name}: {' '.join(_short(a) for a in part.argv)} "
                    f"(timeout {timeout:.0f} s)")
            result = run_part(part, timeout, say, grace_s)
        say(f"[{i + 1}/{len(parts)}] {part.name}: {result.status}"
            + (f" in {result.wall_s:.1f} s" if result.status in (PASSED, FAILED, TIMED_OUT) else "")
            + (f": {result.detail}" if result.detail else ""))
        results.append(result)


def _short(arg: str) -> str:
    return "python" if arg == sys.executable else arg


def full_check(device: str, json_path: str | None, *, tiny: bool = False, budget_s: float = BUDGET_S,
               quickstart_dir: str | None = None, argv: Sequence[str] = (), say: Callable[[str], None] = print) -> int:
    """The whole check on `device` (cpu or cuda:N, resolved); writes `json_path` if given (`argv`: the
    doctor's command line, recorded in it). Exit 0 when no part failed or timed out, 1 otherwise."""
    started_utc = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    load_start = list(os.getloadavg())
    say(f"GPU check on {device}{' (tiny)' if tiny else ''}: {platform.node()}, {os.cpu_count()} cores, "
        f"load average {load_start[0]:.2f}; budget {budget_s:.0f} s")
    started, stop = time.perf_counter(), None
    with sigterm_stops():
        try:
            with tempfile.TemporaryDirectory(prefix="esper_fx_full_") as scratch:
                parts = plan(device, Path(scratch), tiny=tiny,
                             quickstart_dir=Path(quickstart_dir) if quickstart_dir else None)
                results = run_parts(parts, budget_s, say)
        except KeyboardInterrupt as stopped:  # Ctrl-C or SIGTERM: the parts that finished are kept in the JSON
            stop, results = stopped, list(getattr(stopped, "partial", None) or [])
        with deferred_stops(reraise=False):
            return _report(device, json_path, results, stop, tiny=tiny, budget_s=budget_s, argv=argv, say=say,
                           started=(started, started_utc, load_start))


def _report(device: str, json_path: str | None, results: list[PartResult], stop: BaseException | None, *,
            tiny: bool, budget_s: float, argv: Sequence[str], say: Callable[[str], None],
            started: tuple[float, str, list[float]]) -> int:
    """The JSON file (written whole or not at all) and the closing line; the exit code: 0 when no part failed
    or timed out, 1 when one did, 2 when the JSON file could not be written, 130 / 143 when stopped."""
    started, started_utc, load_start = started
    bad = [r.name for r in results if r.status in (FAILED, TIMED_OUT)]
    quickstart = next((r for r in results if r.name == "quickstart"), None)
    report = {
        "command": ["python", "-m", "esper_fx.doctor", *argv],
        "device": device, "tiny": tiny, "started_utc": started_utc, "host": platform.node(),
        "cpu_count": os.cpu_count(), "load_average_start": load_start, "load_average_end": list(os.getloadavg()),
        "budget_s": budget_s, "wall_s": round(time.perf_counter() - started, 2), "ok": not bad and stop is None,
        "breakdown": (quickstart.result.get("breakdown") if quickstart else None),
        "parts": {r.name: asdict(r) for r in results},
    }
    if stop is not None:
        report["stopped"] = signal.Signals(stop_signal(stop)).name
    if json_path:
        try:
            write_whole(Path(json_path), json.dumps(report, indent=2) + "\n")
        except OSError as exc:
            print(f"esper_fx.doctor: error: cannot write --json {json_path}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    if stop is not None:
        say(f"\nGPU check stopped ({report['stopped']}) after {report['wall_s']:.0f} s, in its part "
            f"{results[-1].name if results else 'setup'}" + (f"; JSON of those: {json_path}" if json_path else ""))
        return exit_code(stop_signal(stop))
    say(f"\nGPU check: {len(results) - len(bad)} of {len(results)} parts did not fail in {report['wall_s']:.0f} s"
        + (f"; failed: {', '.join(bad)}" if bad else "") + (f"; JSON: {json_path}" if json_path else ""))
    return 1 if bad else 0
