"""`RayEnvPool`: the env pool as N Ray actors, behind the in-process pool's interface (issue 15).

    pool = RayEnvPool(settings, n_workers)    # N actors, each an EnvPool over a slice of envs
    signals = pool.begin(b, n_active)         # the same calls as hosts.env.EnvPool, the same results
    result, signals = pool.step(actions)
    pool.close()                              # kill the actors; stop the local Ray the pool started

Worker w owns the contiguous envs `worker_slices(E, N)[w]`. Per epoch the driver sends each running worker
its rows of the actions (the loop's numpy integer array [E, 5], sliced to [E_w, 5]; the worker's pool checks
their indices) and gets back its signals as numpy arrays through the object
store; here they become torch tensors on the policy device (concatenated in env order), so
`training.bridged_pool.BridgedPool` and the loop see exactly what the in-process pool gives them. Envs keep their
global index inside a worker, so on the CPU both pools give bitwise-identical runs.

Failures: a worker that dies (killed, out of memory, its node lost) raises `EnvWorkerLost` naming the worker
and its envs (a RunFailure: the last checkpoint is intact, `--resume` continues); a Python exception in a
worker raises `EnvWorkerError` carrying the worker's traceback, but a `SetupError` (a dataset the worker
cannot load, or that does not fit the configuration) is raised as itself: the in-process run's one line.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any, Callable, Sequence

import numpy as np
import torch

from esper_fx.errors import DeviceUnavailableError, RunFailure, SetupError
from esper_fx.distributed.runtime import RaySession, RayStartError, require_ray, worker_logs  # noqa: F401
from esper_fx.distributed.worker import EnvWorker, WorkerStep, worker_settings
from esper_fx.stopping import deferred_stops, stops_kept
from hosts.env import ApplyResult
from hosts.env.actions import check_action_form
from hosts.settings import PoolSettings

READY_TIMEOUT_S = 300.0  # actors not placed by then: the cluster lacks the CPUs / GPUs asked for


class EnvWorkerError(RuntimeError):
    """A Python exception inside an env worker; the message holds the worker's traceback."""


class EnvWorkerLost(RunFailure, RuntimeError):
    """An env worker died mid-run (killed, out of memory, node lost); the message names it and its envs."""


def worker_slices(n_envs: int, n_workers: int) -> list[range]:
    """Contiguous env slices, the first `n_envs % n_workers` one env longer: 5 envs, 2 workers -> [0:3], [3:5]."""
    if not 1 <= n_workers <= n_envs:
        raise ValueError(f"env_workers must be in [1, n_envs={n_envs}] (got {n_workers})")
    size, extra = divmod(n_envs, n_workers)
    bounds = [0]
    for w in range(n_workers):
        bounds.append(bounds[-1] + size + (w < extra))
    return [range(bounds[w], bounds[w + 1]) for w in range(n_workers)]


def describe(w: int, envs: range) -> str:
    return f"env worker {w} (envs {envs.start}–{envs.stop - 1})"


def merge_signals(parts: Sequence[dict[str, np.ndarray]], device: torch.device) -> dict[str, torch.Tensor]:
    """Per-worker numpy signals -> one dict of fresh torch tensors [E, ...] on `device`, envs in order."""
    names = parts[0].keys()
    return {name: torch.from_numpy(np.concatenate([p[name] for p in parts])).to(device) for name in names}


def signal_bytes(signals: dict[str, np.ndarray] | None) -> int:
    return 0 if signals is None else sum(a.nbytes for a in signals.values())


class RayEnvPool:
    """`settings`: the run's pool settings (each worker's EnvPool gets them, with its devices set:
    `worker.worker_settings`); `n_workers` actors; `ray_address`: the cluster to join (None: a local Ray);
    `say`: a progress line before Ray starts (`RaySession.open`)."""

    def __init__(self, settings: PoolSettings, n_workers: int, ray_address: str | None = None, *,
                 nan_faults: Sequence[tuple[int, int]] = (), say: Callable[[str], None] | None = None) -> None:
        ray = require_ray()
        self.settings = settings
        self.n_workers = int(n_workers)
        self.slices = worker_slices(settings.n_envs, self.n_workers)
        self.max_epochs = settings.max_epochs
        self.policy_device = settings.policy_device
        # bytes through the object store (signals in, actions out), round trips, and for the steps their
        # driver-side wall time and the slowest worker's own time: the difference is Ray's overhead
        self.stats = {"bytes_in": 0, "bytes_out": 0, "calls": 0, "step_wall_s": 0.0, "step_worker_s": 0.0,
                      "step_worker_cpu_s": 0.0}  # (the workers' CPU time, summed over workers)
        # the slowest worker's own time in each begin and step, summed: its pool's env builds, training and
        # validation phases and the whole call (`worker.phase_delta`); the loop's time breakdown reads them
        self.phase_s = {"build_s": 0.0, "train_s": 0.0, "validate_s": 0.0, "work_s": 0.0}
        self._session = RaySession.open(ray_address, self.n_workers, say)
        self._ray = ray
        self._actors: list[Any] = []
        self._running: list[int] = []  # the workers with envs in this episode batch (set by begin)
        self._n_active = 0
        self.epoch = 0  # as EnvPool.epoch: the epoch the envs last trained
        try:
            gpu = any(device.type == "cuda" for device in settings.env_devices)
            gpus = gpu_share(ray.cluster_resources().get("GPU", 0), self.n_workers) if gpu else 0
            actor = ray.remote(EnvWorker).options(num_cpus=1, num_gpus=gpus, max_restarts=0)
            on_worker, threads, faults = worker_settings(settings), torch.get_num_threads(), tuple(nan_faults)
            self._actors = [actor.remote(on_worker, tuple(envs), threads, faults) for envs in self.slices]
        except BaseException:
            self.close()
            raise
        # The actors start in the background (some 2 s: a process, torch, the data): the driver meanwhile
        # builds its controller; the first call that needs them (or `wait_ready`) waits for their answer.
        self._ready = [a.info.remote() for a in self._actors]
        self._workers: list[dict[str, Any]] | None = None
        self._prefetched: tuple[tuple[int, int], list[Any]] | None = None  # ((b, n), begin refs) sent ahead
        self._results: list[Any] | None = None  # episode_results refs sent before a prefetched begin

    def wait_ready(self) -> list[dict[str, Any]]:
        """Each worker's `info` once it is up (pid, host, K); the first failure (or a worker not placed in
        READY_TIMEOUT_S) names its worker. The actors are closed when one fails."""
        if self._workers is None:
            try:
                self._workers = self._gather(self._ready, range(self.n_workers), timeout=READY_TIMEOUT_S)
            except BaseException:
                self.close()
                raise
        return self._workers

    @property
    def workers(self) -> list[dict[str, Any]]:
        return self.wait_ready()

    @property
    def steps_per_epoch(self) -> int:
        return self.wait_ready()[0]["steps_per_epoch"]

    # ---------------------------------------------------------------- the pool interface
    @property
    def n_envs(self) -> int:
        return self.settings.n_envs

    def begin(self, batch_index: int, n_active: int | None = None) -> dict[str, torch.Tensor]:
        n = self._check_active(n_active)
        self.wait_ready()
        prefetched, self._prefetched, self._results = self._prefetched, None, None  # (unread results: stale now)
        self._running = self._running_for(n)
        self._n_active, self.epoch = n, 1
        if prefetched is not None and prefetched[0] == (int(batch_index), n):
            answers = self._gather(prefetched[1], self._running)
        else:  # (a begin sent ahead for other envs only built them: this one builds them afresh)
            answers = self._call("begin", [(batch_index, n)] * len(self._running))
        self._add_phases([phases for _, phases in answers])
        return self._merge([signals for signals, _ in answers])

    def prefetch(self, batch_index: int, n_active: int | None = None) -> None:
        """Send batch `batch_index`'s `begin` ahead, so the workers build its envs (and run its first epoch)
        while the driver updates the controller; the next `begin` with these arguments takes the answer.
        The running batch's `episode_results` are asked for first (a worker answers in order)."""
        n = self._check_active(n_active)
        if self._running:
            self._results = [self._actors[w].episode_results.remote() for w in self._running]
        running = self._running_for(n)
        self._prefetched = ((int(batch_index), n), [self._actors[w].begin.remote(batch_index, n) for w in running])
        self.stats["calls"] += 1

    def _check_active(self, n_active: int | None) -> int:
        n = self.n_envs if n_active is None else int(n_active)
        if not 1 <= n <= self.n_envs:
            raise ValueError(f"n_active must be in [1, n_envs={self.n_envs}] (got {n_active})")
        return n

    def _running_for(self, n: int) -> list[int]:
        return [w for w, envs in enumerate(self.slices) if envs.start < n]

    def step(self, actions: np.ndarray, bootstrap: bool = True) -> tuple[ApplyResult, dict[str, torch.Tensor] | None]:
        """As `EnvPool.step`: `actions` a numpy integer array [n_active, 5]; each worker gets its rows."""
        if not self._running:
            raise RuntimeError("RayEnvPool.step called before begin(b)")
        check_action_form(actions, self._n_active)
        args = [(actions[self.slices[w].start:min(self.slices[w].stop, self._n_active)], bootstrap)
                for w in self._running]
        self.stats["bytes_out"] += actions.nbytes
        started = time.perf_counter()
        steps: list[WorkerStep] = self._call("step", args)
        boot = [s.bootstrap for s in steps]
        signals = [s.signals for s in steps]
        executed = np.concatenate([s.actions for s in steps])
        executed.flags.writeable = False
        result = ApplyResult(executed, tuple(x for s in steps for x in s.success),
                             tuple(e for s in steps for e in s.events),
                             None if boot[0] is None else self._merge(boot))
        merged = None if signals[0] is None else self._merge(signals)
        self.stats["step_wall_s"] += time.perf_counter() - started
        self.stats["step_worker_s"] += max(s.compute_s for s in steps)
        self.stats["step_worker_cpu_s"] += sum(s.cpu_s for s in steps)
        self._add_phases([s.phases for s in steps])
        self.epoch += merged is not None
        return result, merged

    def _add_phases(self, per_worker: Sequence[dict[str, float] | None]) -> None:
        """The slowest worker's phases of one call (the one the driver waited for) into `phase_s`."""
        known = [p for p in per_worker if p]
        if known:
            slowest = max(known, key=lambda p: p["work_s"])
            for key in self.phase_s:
                self.phase_s[key] += slowest[key]

    def episode_results(self) -> list:
        refs, self._results = self._results, None
        parts = self._call("episode_results", [()] * len(self._running)) if refs is None else \
            self._gather(refs, self._running)
        return [r for part in parts for r in part]

    # ---------------------------------------------------------------- lifetime
    def close(self) -> None:
        """Kill the actors and leave Ray (a local instance the pool started is shut down). Idempotent; a
        Ctrl-C meanwhile is dropped (the run is stopping)."""
        with deferred_stops(reraise=False):
            for actor in self._actors:
                try:
                    self._ray.kill(actor)
                except Exception:  # already dead, or Ray already down
                    pass
            self._actors = []
        self._session.close()

    def __enter__(self) -> "RayEnvPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- round trips
    def _call(self, method: str, args: Sequence[tuple]) -> list:
        refs = [getattr(self._actors[w], method).remote(*a) for w, a in zip(self._running, args)]
        self.stats["calls"] += 1
        return self._gather(refs, self._running)

    def _gather(self, refs: list, workers: Sequence[int], timeout: float | None = None) -> list:
        """Each worker's result in order; the first failure names its worker and envs."""
        return [get_or_explain(self._ray, ref, describe(w, self.slices[w]), timeout)
                for w, ref in zip(workers, refs)]

    def _merge(self, parts: Sequence[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
        self.stats["bytes_in"] += sum(signal_bytes(p) for p in parts)
        return merge_signals(parts, self.policy_device)


def get_or_explain(ray: Any, ref: Any, where: str, timeout: float | None = None) -> Any:
    """`ray.get(ref)`; a failure becomes EnvWorkerError (a Python exception, with the remote traceback) or
    EnvWorkerLost (the process died, or was never placed), its message starting with `where`. A `SetupError`
    (a dataset that cannot be loaded, a device) is raised as itself: one line, exit 2, as in process. The
    others name the folder of Ray's logs where the worker's own output is (`runtime.worker_logs`): it is
    not printed on the driver's console."""
    exceptions = ray.exceptions
    try:
        with stops_kept():
            return ray.get(ref, timeout=timeout)
    except exceptions.RayTaskError as exc:
        cause = exc.cause if isinstance(exc.cause, BaseException) else None
        if isinstance(cause, SetupError):  # a data or device problem: the one line of an in-process run
            raise cause from None
        raise EnvWorkerError(f"{where} raised {_one_line(cause or exc)}{_output_in()}\nthe worker's traceback:\n"
                             f"{_plain_text(getattr(exc, 'traceback_str', '') or str(exc))}") from cause
    except (exceptions.RayActorError, exceptions.WorkerCrashedError) as exc:
        raise EnvWorkerLost(f"{where} died: {_first_line(exc)}{_output_in()}") from None
    except exceptions.GetTimeoutError:
        raise EnvWorkerLost(f"{where} was not placed within {timeout:.0f} s: the Ray cluster lacks the "
                            f"CPUs/GPUs asked for ({ray.cluster_resources()})") from None


def gpu_share(cluster_gpus: float, n_workers: int) -> float:
    """The GPU fraction each worker asks for: one GPU each when the cluster has enough, else an equal share
    (1/2, 1/3, ...) so that every worker is placed: 4 workers on 2 GPUs -> 0.5 (two per GPU)."""
    gpus = int(cluster_gpus)
    if gpus < 1:
        raise DeviceUnavailableError("the envs run on CUDA but the Ray cluster has no GPU "
                                     "(set env_devices/device to cpu, or join a cluster with GPUs)")
    return 1.0 / math.ceil(n_workers / gpus)


def _output_in() -> str:
    """'; its output: FOLDER' (Ray's log folder of the session's workers), or '' when Ray cannot name it."""
    folder = worker_logs()
    return "" if folder is None else f"; the workers' own output is in {folder} (worker-*.out, worker-*.err)"


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:500] or type(exc).__name__


def _plain_text(text: str) -> str:
    """Ray's traceback without its terminal colour codes."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {_first_line(exc)}"
