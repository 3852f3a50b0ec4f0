"""A warm start: JAX's persistent compilation cache for the CLI, `prove` and notebooks.

Every run builds the same jitted programs (the controller's init, its step, its update): a run that finds
them in the persistent cache loads them instead of compiling them again with XLA. `enable()` points JAX at
the cache directory; call it before the first jitted call of the process (the CLI does; `esper_fx.run` and
`esper_fx.compare` call `enable_once()`, which keeps a choice the process already made; it also works
later, then taking effect from the next compilation).

Where the cache lives, in order:

    enable(directory=...)                 an explicit directory (the CLI's --compile-cache-dir)
    ESPER_FX_COMPILE_CACHE_DIR            this project's variable
    JAX_COMPILATION_CACHE_DIR             JAX's own variable (the test suite sets it)
    $XDG_CACHE_HOME/esper_fx/jax          the user's cache directory (default ~/.cache/esper_fx/jax)

`enable(enabled=False)`, the CLI's --no-compile-cache, or ESPER_FX_COMPILE_CACHE=0 (also off / false / no)
turn it off. JAX caches only programs that took at least `jax_persistent_cache_min_compile_time_secs` (1 s
by default) to compile; `enable` lowers that to MIN_COMPILE_TIME_S (every program) unless JAX's own variable
sets it.

Imports nothing heavy at module level: jax loads inside `enable` and `counting`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping

ENV_SWITCH = "ESPER_FX_COMPILE_CACHE"
ENV_DIR = "ESPER_FX_COMPILE_CACHE_DIR"
JAX_ENV_DIR = "JAX_COMPILATION_CACHE_DIR"
OFF_VALUES = frozenset({"0", "off", "false", "no"})
CACHE_SUBDIR = ("esper_fx", "jax")
# Cache every program, however quickly it compiled and however small: JAX's default (1 s) skips most of
# the controller's programs on CPU. A tiny run makes 55 programs (under 1 MB); with a 0.1 s threshold
# only 8 of them were kept and the warm run reached its first action 1.5 s later.
MIN_COMPILE_TIME_S = 0.0
MIN_ENTRY_SIZE_BYTES = 0
# JAX's variables for the two thresholds: when the user sets one, it wins over ours.
JAX_ENV_THRESHOLDS = {
    "jax_persistent_cache_min_compile_time_secs": ("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", MIN_COMPILE_TIME_S),
    "jax_persistent_cache_min_entry_size_bytes": ("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", MIN_ENTRY_SIZE_BYTES),
}
HIT_EVENT = "/jax/compilation_cache/cache_hits"
REQUEST_EVENT = "/jax/compilation_cache/compile_requests_use_cache"
MISS_EVENT = "/jax/compilation_cache/cache_misses"  # recorded as a compiled program is written to the cache


def default_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The user's cache directory for this project's JAX programs."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, *CACHE_SUBDIR)


def switched_on(environ: Mapping[str, str] | None = None) -> bool:
    """False when ESPER_FX_COMPILE_CACHE says off."""
    environ = os.environ if environ is None else environ
    return environ.get(ENV_SWITCH, "").strip().lower() not in OFF_VALUES


def resolve_dir(directory: str | os.PathLike | None = None, enabled: bool | None = None,
                environ: Mapping[str, str] | None = None) -> Path | None:
    """The cache directory a run uses, or None when the cache is off (see the module docstring).

    enabled None follows ESPER_FX_COMPILE_CACHE; an explicit `directory` turns the cache on unless
    `enabled` is False."""
    environ = os.environ if environ is None else environ
    if enabled is False:
        return None
    if directory is not None:
        return Path(directory).expanduser().absolute()
    if enabled is None and not switched_on(environ):
        return None
    for name in (ENV_DIR, JAX_ENV_DIR):
        if environ.get(name):
            return Path(environ[name]).expanduser().absolute()
    return default_dir(environ).absolute()


_chosen: list[Path | None] = []  # the process's choice, once `enable` has made one


def enable(directory: str | os.PathLike | None = None, *, enabled: bool | None = None,
           environ: Mapping[str, str] | None = None) -> Path | None:
    """Point JAX's persistent compilation cache at the resolved directory and return it (None: off).

    A directory that cannot be created or written warns once and leaves the cache off (JAX would otherwise
    warn once per program it fails to save): a cache never stops a run."""
    path = _enable(directory, enabled, os.environ if environ is None else environ)
    _chosen[:] = [path]
    return path


def enable_once() -> Path | None:
    """`enable()` with the default resolution, unless this process already chose (the command line's
    --compile-cache-dir or --no-compile-cache, or a notebook's own `enable` call): what `esper_fx.run` and
    `esper_fx.compare` call, so a notebook starts warm like the command line."""
    return _chosen[0] if _chosen else enable()


def _enable(directory: str | os.PathLike | None, enabled: bool | None, environ: Mapping[str, str]) -> Path | None:
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    path = resolve_dir(directory, enabled, environ)
    if path is not None:
        problem = _unwritable(path)
        if problem is not None:
            warnings.warn(f"compilation cache off: {problem}", stacklevel=2)
            path = None
    if path is None:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    for option, (variable, value) in JAX_ENV_THRESHOLDS.items():
        if variable not in environ:
            jax.config.update(option, value)
    compilation_cache.reset_cache()  # the next compilation opens the cache at `path`
    return path


def _unwritable(path: Path) -> str | None:
    """Why the cache directory cannot be created or written (None: it can), probed by creating (and at once
    removing) a file in it: a read-only mount refuses even the root user, whom permissions do not stop."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=path, prefix=".probe-")
        probe.close()
    except OSError as exc:
        return f"cannot write to {path} ({exc.strerror or exc})"
    return None


@dataclass
class CacheStats:
    """Compilations that asked the persistent cache, and how many it answered, while `counting` was open."""

    requests: int = 0
    hits: int = 0
    misses: int = 0
    on_first_miss: Callable[[], None] | None = None  # called once, when the first program missed the cache

    def record(self, event: str, **_: object) -> None:
        if event == REQUEST_EVENT:
            self.requests += 1
        elif event == HIT_EVENT:
            self.hits += 1
        elif event == MISS_EVENT:
            self.misses += 1
            if self.misses == 1 and self.on_first_miss is not None:
                self.on_first_miss()

    def describe(self, directory: Path | None) -> str:
        if directory is None:
            return "Compilation cache: off"
        if self.requests == 0:
            return f"Compilation cache: {directory} (no program compiled)"
        return (f"Compilation cache: {self.hits} of {self.requests} programs loaded from {directory} "
                f"({'warm' if self.hits else 'cold'} start)")


_counting: list[CacheStats] = []  # the stats of the `counting` block the process is in, if any


@contextlib.contextmanager
def counting(on_first_miss: Callable[[], None] | None = None) -> Iterator[CacheStats]:
    """Count JAX's cache requests, hits and misses inside the block (a JAX monitoring listener, removed after);
    `on_first_miss` is called when the first program was compiled, not loaded (a cold cache: the command line
    says so before the larger programs compile)."""
    from jax import monitoring

    stats = CacheStats(on_first_miss=on_first_miss)
    monitoring.register_event_listener(stats.record)
    _counting.append(stats)
    try:
        yield stats
    finally:
        _counting.remove(stats)
        with contextlib.suppress(Exception):
            monitoring.unregister_event_listener(stats.record)


def start_note(directory: Path | None) -> str | None:
    """The line a command prints before its first compilation when every program will be compiled: the cache
    is off (a cold cache is said at its first miss instead: `counting`'s `on_first_miss`)."""
    if directory is None:
        return "compiling the controller (the compilation cache is off: every run compiles it)"
    return None


def first_miss_note(directory: Path) -> str:
    """What the command line prints when the first program missed the cache in `directory`."""
    return f"compiling the controller (once; cached in {directory})"


def cold_note(what: str) -> str | None:
    """'compiling the controller's WHAT (once; cached in DIR)' when a compilation of this process missed the
    persistent cache so far (inside `counting`: the command line's run), so the next program will be compiled
    too; None when every one was loaded, or nothing is counted."""
    if not _counting or _counting[-1].misses == 0:
        return None
    where = f"cached in {_chosen[0]}" if _chosen and _chosen[0] is not None else "the cache is off"
    return f"compiling the controller's {what} (once; {where})"
