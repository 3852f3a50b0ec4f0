"""Two rules of the run loop, and the audit that checks them over a real run (issue 55; docs/PERFORMANCE.md).

- **No host sync inside an epoch** but the reads on `HOST_SYNCS`: every value the loop needs on the host is
  read there, once per epoch (or once per batch), and everything else stays on its device.
- **No recompilation after the first batch**: batch 0 obtains every XLA program the run needs; later
  batches reuse them.

    audit = audit_run(audit_config("cpu"))   # a 3-batch tiny quickstart in process, everything counted
    audit.sync_violations()                  # [] when every host read is a HOST_SYNCS site, within its count
    audit.programs_after_first_batch()       # [] when batches 1.. obtained no program

While `audit_run` runs, every device-to-host conversion is counted at the project function that asked for
it (the innermost frame in hosts/, rl/, bridge/ or esper_fx/; a comprehension counts as its function):
torch's `.item()`, `.tolist()`, `.cpu()`, `.to("cpu")`, `.numpy()`, `float()`, `int()`, `bool()`,
`operator.index()` and `np.asarray` / `np.array` of a tensor; JAX's `float()`, `int()`, `bool()`,
`operator.index()`, `.item()`, `.tolist()`, `np.asarray` / `np.array` and `jax.device_get` of an array. A
conversion inside another counts once. On the CPU these copy nothing, but each is a host synchronisation
on a GPU, so the CPU suite enforces the rule (tests/esper_fx/training/test_epoch_audit.py). On CUDA the
audit also runs the epochs (from the end of a batch's `begin` to its `episode_results`) under torch's sync
debug mode and counts each synchronising torch operation at its site the same way (an H2D copy from
pageable memory, a `nonzero`, ...): what no wrapper sees. Programs are counted with JAX's
`/jax/core/compile/backend_compile_duration` event, which fires for a program compiled by XLA and for one
loaded from the persistent compilation cache alike, so the cache may stay on (it makes the audit cheap).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, NamedTuple

import jax
import numpy as np
import torch

from esper_fx.config import TrainingConfig
from esper_fx.training.clock import BACKEND_COMPILE_EVENT  # one name for the event the run's clock reads too


class SyncSite(NamedTuple):
    """A function allowed to read device values back to the host, and how often."""

    where: str  # "path/from/the/repository/root.py:function"
    times: int  # the most reads it makes per `per`
    per: str  # "epoch" or "batch" (a batch-level read happens outside the epochs, once per batch)
    reason: str


# The whitelist: every host read of a run's batches, with why it is needed there.
HOST_SYNCS: tuple[SyncSite, ...] = (
    SyncSite("hosts/env/epoch_compute.py:read_back", 1, "epoch",
             "every env's losses, correct counts and gradient ratios, one copy per env device after the barrier"),
    SyncSite("hosts/env/epoch_compute.py:epoch_barrier", 1, "epoch",
             "on CUDA, the host waits for each env device's caller stream (every env stream's epoch) before it"),
    SyncSite("esper_fx/training/epoch.py:run_epoch", 1, "epoch",
             "the step's [E, 6] decision: the actions the pool executes, and whether each was valid"),
    SyncSite("esper_fx/training/epoch.py:host_field", 2, "batch",
             "the last epoch's seed and host parameter counts, for the batch's row"),
    SyncSite("esper_fx/training/epoch.py:finish", 1, "batch", "the episodes' reward sums, for the batch's row"),
    SyncSite("esper_fx/training/epoch.py:episode_component_means", 1, "batch",
             "every epoch's reward components, read together for the batch's row"),
    SyncSite("esper_fx/training/batch.py:run_batch", 1, "batch",
             "the controller's update count, for the entropy schedule"),
    SyncSite("esper_fx/training/batch.py:end_of_batch", 4, "batch",
             "whether to update, the normalisers' skip counts and the update's metrics"),
    SyncSite("rl/rollout.py:check_rollout", 1, "batch", "the rollout's overflow check before the update"),
)

# the audit's run: the quickstart preset at the tiny size of the end-to-end tests, three batches, in process
AUDIT_RUN = dict(n_envs=2, max_epochs=3, n_episodes=6, synthetic_train_samples=256, synthetic_test_samples=64,
                 batch_size_per_env=32, max_train_batches=2, seed=3, tensorboard=False, report=False,
                 env_workers=0)
CUDA_SYNC_WARNING = "called a synchronizing CUDA operation"  # torch's message in sync debug mode "warn"
ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("hosts", "rl", "bridge", "esper_fx")


def audit_config(device: str = "cpu") -> TrainingConfig:
    return TrainingConfig.preset("quickstart", **AUDIT_RUN, device=device)


def violations(counts: Mapping[str, int], epochs: int, batches: int,
               sites: tuple[SyncSite, ...] = HOST_SYNCS, kinds: Mapping[str, Counter] | None = None) -> list[str]:
    """One line per site that read device values back without being on `sites`, or more often than its
    count allows over `epochs` epochs in `batches` batches."""
    allowed = {s.where: s.times * (epochs if s.per == "epoch" else batches) for s in sites}
    out = []
    for where, n in sorted(counts.items()):
        calls = "" if kinds is None else f" ({', '.join(f'{k} x{c}' for k, c in sorted(kinds[where].items()))})"
        if where not in allowed:
            out.append(f"{where}: {n} host syncs{calls} in {epochs} epochs of {batches} batches, and it is not on "
                       f"HOST_SYNCS (esper_fx/training/epoch_audit.py): keep the value on its device until the "
                       f"epoch's one read, or add the site there with its reason")
        elif n > allowed[where]:
            out.append(f"{where}: {n} host syncs{calls} in {epochs} epochs of {batches} batches; HOST_SYNCS "
                       f"allows {allowed[where]}")
    return out


# ----------------------------------------------------------------------------------------------
# counting host syncs
# ----------------------------------------------------------------------------------------------


_SITES: dict[Any, str | None] = {}  # code object -> "path:function" (None: not a project frame)


def _project_file(code: Any) -> str | None:
    if code not in _SITES:
        path, where = Path(code.co_filename), None
        if path.is_absolute() and path.parts[: len(ROOT.parts)] == ROOT.parts and path != Path(__file__):
            rel = path.relative_to(ROOT)
            if rel.parts and rel.parts[0] in PACKAGES:
                where = rel.as_posix()
        _SITES[code] = where
    return _SITES[code]


def calling_site(frame: Any) -> str | None:
    """"path:function" of the innermost project frame from `frame` outwards (a comprehension, generator
    expression or lambda is counted at the function around it); None when no project code is on the stack."""
    while frame is not None:
        path = _project_file(frame.f_code)
        if path is not None:
            while frame.f_code.co_name.startswith("<") and frame.f_code.co_name != "<module>" and \
                    frame.f_back is not None and _project_file(frame.f_back.f_code) == path:
                frame = frame.f_back
            return f"{path}:{frame.f_code.co_name}"
        frame = frame.f_back
    return None


@dataclass
class SyncCounter:
    """Host reads by site while `counting` is open; `window` is True while torch's sync debug warnings count."""

    counts: Counter = field(default_factory=Counter)
    kinds: dict = field(default_factory=lambda: defaultdict(Counter))
    window: bool = False
    _inside: threading.local = field(default_factory=threading.local)

    def record(self, kind: str, frame: Any) -> None:
        where = calling_site(frame)
        if where is not None:
            self.counts[where] += 1
            self.kinds[where][kind] += 1

    @contextlib.contextmanager
    def converting(self, kind: str, frame: Any) -> Iterator[None]:
        """Count one conversion at `frame`'s site unless it runs inside another (counted already)."""
        if getattr(self._inside, "on", False):
            yield
            return
        self.record(kind, frame)
        self._inside.on = True
        try:
            yield
        finally:
            self._inside.on = False

    def on_warning(self, message: Any, frame: Any) -> bool:
        """A torch sync debug warning while the window is open counts at its site (not inside a counted
        conversion, which it is part of); True when it was one."""
        if CUDA_SYNC_WARNING not in str(message):
            return False
        if self.window and not getattr(self._inside, "on", False):
            self.record("cuda sync", frame)
        return True


def _names_the_cpu(args: tuple, kwargs: dict) -> bool:
    """Whether `tensor.to(*args, **kwargs)` names the CPU ("cpu"): a copy to the host. A device passed as a
    variable is the run's device, which the CPU run cannot tell from a copy back (an upload on a GPU)."""
    return any(isinstance(value, str) and value.split(":")[0] == "cpu" for value in (*args, *kwargs.values()))


def _device_value(args: tuple, kwargs: dict) -> bool:
    return bool(args) and isinstance(args[0], (jax.Array, torch.Tensor))


def _has_array(args: tuple, kwargs: dict) -> bool:
    return any(isinstance(leaf, jax.Array) for leaf in jax.tree_util.tree_leaves(args))


def _conversions() -> list[tuple[Any, str, str, Callable[[tuple, dict], bool] | None]]:
    """(owner, attribute, kind, when) of every conversion counted; `when(args, kwargs)` (args without self)
    says whether a call converts."""
    array_type = type(jax.numpy.zeros(()))
    torch_methods = [(torch.Tensor, name, f"torch.{name}", None) for name in
                     ("item", "tolist", "cpu", "numpy", "__array__", "__float__", "__int__", "__bool__", "__index__")]
    jax_methods = [(array_type, name, f"jax.{name}", None) for name in
                   ("item", "tolist", "__array__", "__float__", "__int__", "__bool__", "__index__")]
    return torch_methods + jax_methods + [
        (torch.Tensor, "to", "torch.to('cpu')", lambda a, k: _names_the_cpu(a[1:], k)),
        (np, "asarray", "np.asarray", _device_value), (np, "array", "np.array", _device_value),
        (jax, "device_get", "jax.device_get", _has_array),
    ]


@contextlib.contextmanager
def counting() -> Iterator[SyncCounter]:
    """Count every device-to-host conversion (the module docstring's list) by site inside the block, and
    torch's sync debug warnings while `counter.window` is open; everything is restored after."""
    counter = SyncCounter()
    restore = []
    for owner, name, kind, when in _conversions():
        original = getattr(owner, name)
        own = name in vars(owner)

        def wrapper(*args, __original=original, __kind=kind, __when=when, **kwargs):
            if __when is not None and not __when(args, kwargs):
                return __original(*args, **kwargs)
            with counter.converting(__kind, sys._getframe(1)):
                return __original(*args, **kwargs)

        setattr(owner, name, wrapper)
        restore.append((owner, name, original, own))
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if not counter.on_warning(message, sys._getframe(1)):
            shown(message, category, filename, lineno, file, line)

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("always", message=f".*{CUDA_SYNC_WARNING}")
            warnings.showwarning = show
            yield counter
    finally:
        for owner, name, original, own in reversed(restore):
            if own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)


@contextlib.contextmanager
def sync_window(counter: SyncCounter) -> Iterator[None]:
    """Torch's sync debug warnings count inside the block (on CUDA: the sync debug mode is `warn` there)."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    counter.window = True
    if cuda:
        torch.cuda.set_sync_debug_mode("warn")
    try:
        yield
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
        counter.window = False


# ----------------------------------------------------------------------------------------------
# counting compiled programs
# ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def programs() -> Iterator[list[str]]:
    """The names of the XLA programs obtained inside the block (compiled, or loaded from the persistent
    cache), in order (a JAX monitoring listener, removed after)."""
    from jax import monitoring

    names: list[str] = []

    def listen(event: str, duration: float, **kwargs: Any) -> None:
        if event == BACKEND_COMPILE_EVENT:
            names.append(str(kwargs.get("fun_name", "?")))

    monitoring.register_event_duration_secs_listener(listen)
    try:
        yield names
    finally:
        with contextlib.suppress(Exception):
            monitoring.unregister_event_duration_secs_listener(listen)


# ----------------------------------------------------------------------------------------------
# the audit of a run
# ----------------------------------------------------------------------------------------------


@dataclass
class Audit:
    """What a run read back and compiled: host reads by site, and the programs with each batch's start."""

    config: TrainingConfig
    syncs: Counter
    kinds: dict
    programs: list[str]
    batch_starts: list[int]  # len(programs) when each batch began
    batch_ends: list[int]  # len(programs) when each batch's update was done (its `episode_results`)

    @property
    def batches(self) -> int:
        return len(self.batch_starts)

    @property
    def epochs(self) -> int:
        return self.batches * self.config.max_epochs

    def sync_violations(self) -> list[str]:
        return violations(self.syncs, self.epochs, self.batches, kinds=self.kinds)

    def first_batch_programs(self) -> list[str]:
        """The programs obtained from the run's start to the end of batch 0."""
        return self.programs[: self.batch_starts[1] if self.batches > 1 else len(self.programs)]

    def problems(self) -> list[str]:
        """Both rules' failures, one line each (the doctor's `epoch_audit` check raises them)."""
        late = self.programs_after_first_batch()
        return ([f"{len(late)} programs compiled after batch 0: {', '.join(sorted(set(late)))}"] if late else []) + \
            self.sync_violations()

    def programs_after_first_batch(self) -> list[str]:
        """The programs batches 1.. obtained (from the start of batch 1 to the end of the last batch's update;
        what the run does after its batches is not a batch's)."""
        return self.programs[self.batch_starts[1]:self.batch_ends[-1]] if self.batches > 1 else []


class _Watched:
    """The run's pool, seen by the audit: marks each batch's start and opens the sync window over its epochs
    (from the end of `begin` to `episode_results`, which the batch calls after its last epoch). Every other
    member of `contracts.pool.EpisodePool` is the pool's own."""

    def __init__(self, pool: Any, counter: SyncCounter, names: list[str], starts: list[int], ends: list[int]):
        self.pool, self._counter, self._names, self._starts, self._ends = pool, counter, names, starts, ends
        self._window: contextlib.ExitStack | None = None

    @property
    def steps_per_epoch(self) -> int:
        return self.pool.steps_per_epoch

    @property
    def n_workers(self) -> int:
        return self.pool.n_workers

    @property
    def phase_s(self) -> dict[str, float]:
        return self.pool.phase_s

    @property
    def stats(self) -> dict[str, float]:
        return self.pool.stats

    def prefetch(self, batch_index: int, n_active: int | None = None) -> None:
        self.pool.prefetch(batch_index, n_active)

    def wait_ready(self) -> Any:
        return self.pool.wait_ready()

    def close(self) -> None:
        self.pool.close()

    def begin(self, batch_index: int, n_active: int | None = None) -> Any:
        self._close()
        self._starts.append(len(self._names))
        signals = self.pool.begin(batch_index, n_active)
        self._window = contextlib.ExitStack()
        self._window.enter_context(sync_window(self._counter))
        return signals

    def step(self, actions: Any, bootstrap: bool = True) -> Any:
        return self.pool.step(actions, bootstrap=bootstrap)

    def episode_results(self) -> list:
        self._close()
        self._ends.append(len(self._names))
        return self.pool.episode_results()

    def _close(self) -> None:
        if self._window is not None:
            self._window.close()
            self._window = None


def audit_run(config: TrainingConfig | None = None) -> Audit:
    """Run `config` (default: `audit_config()`, on the CPU) in process through the real run loop, writing
    nothing, with every host read and every program counted."""
    from esper_fx.training.pools import build_pool
    from esper_fx.training.run import run

    config = (audit_config() if config is None else config).replace(env_workers=0)
    pool = build_pool(config, say=lambda line: None)
    starts: list[int] = []
    ends: list[int] = []
    try:
        with counting() as counter, programs() as names:
            watched = _Watched(pool, counter, names, starts, ends)
            try:
                run(config, run_dir=False, quiet=True, pool=watched)
            finally:
                watched._close()
    finally:
        pool.close()
    return Audit(config, Counter(counter.counts), {k: Counter(v) for k, v in counter.kinds.items()}, list(names),
                 starts, ends)
