"""Ray for the run: is it installed, start or join it, stop what the run started (issue 15).

Imports neither torch nor jax (nor anything that does), and Ray only when asked, so the command line can reject `--env-workers`
without Ray instantly:

    require_ray()                              # ImportError with the install line when Ray is missing
    session = RaySession.open(address, cpus)   # join `address`, or start a local Ray the run owns
    session.close()                            # shut down what `open` started (a joined cluster stays)

A local Ray the run starts is watched by `reaper`: if the driver is killed outright (SIGKILL), what Ray
left running is killed too.

The workers' own output (what their Python code prints, and their runtime's lines, such as abseil's
"[mutex.cc : 452] RAW: Lock blocking" on a contended CPU) is not forwarded to the driver's console
(`log_to_driver=False`): Ray keeps it in its session's log folder (`worker_logs`), which a worker's
failure names (`distributed.pool.get_or_explain`). The console holds the project's lines alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

from esper_fx.errors import SetupError
from esper_fx.stopping import deferred_stops
from esper_fx.distributed import reaper
from esper_fx.distributed.auto import usable_cores  # the cores `auto` counts: the process's affinity

INSTALL_HINT = "env workers need Ray, a dependency of the default install: pip install -e ."
# A cluster address: HOST:PORT (the head's GCS, `ray start --head`) or ray://HOST:PORT (Ray Client); "auto"
# finds the cluster this machine runs. HOST may be a name, an IPv4 address or a bracketed IPv6 address.
RAY_ADDRESS = re.compile(r"(?:ray://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(?P<port>\d{1,5})")
RAY_ADDRESS_KEYWORDS = ("auto",)
RAY_CONNECT_TIMEOUT_S = 3.0  # a reachable head answers a TCP connect at once; an unreachable one never does


class RayStartError(SetupError, RuntimeError):
    """A local Ray could not start (e.g. no usable /dev/shm in a container): `auto` falls back to the
    in-process pool; an explicit `--env-workers N` stops with this one line."""


class RayAddressError(SetupError, ConnectionError):
    """--ray-address names no cluster this machine can reach (or is not an address at all)."""


def check_ray_address(address: str | None, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """A joinable address, checked before Ray is asked (which took 24 s and 20 lines of logging to fail):
    its form, then a TCP connect to HOST:PORT within `timeout_s`. None (a local Ray) and "auto" pass."""
    if address is None or address in RAY_ADDRESS_KEYWORDS:
        return
    match = RAY_ADDRESS.fullmatch(address.strip())
    if match is None or not 0 < int(match["port"]) < 65536:
        raise RayAddressError(f"ray_address {address!r} is not a Ray address: use HOST:PORT (the head node's, "
                              f"e.g. 10.0.0.1:6379), ray://HOST:PORT or auto")
    host = match["host"].strip("[]")
    try:
        socket.create_connection((host, int(match["port"])), timeout=timeout_s).close()
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
        raise RayAddressError(f"ray_address {address!r}: no Ray cluster reachable there ({reason} within "
                              f"{timeout_s:g} s; start one with `ray start --head`)") from None


@contextlib.contextmanager
def quiet_ray_logging():
    """Ray's own loggers say only errors meanwhile (a failed join logged some 20 lines before its error)."""
    logger = logging.getLogger("ray")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


class _TokenNotice(logging.Filter):
    """Drops Ray's notice that a local cluster it starts uses token authentication ("Token authentication is
    enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out ..."), printed on stderr by every
    run: its one-line contract (and a failure's one line) were each a line longer. Token authentication
    stays on; Ray's warning that it is off is kept."""

    LOGGER = "ray._private.authentication.authentication_token_setup"

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token authentication is enabled")


@contextlib.contextmanager
def quiet_token_notice():
    """While inside, Ray's token notice is not printed (`_TokenNotice`)."""
    logger, notice = logging.getLogger(_TokenNotice.LOGGER), _TokenNotice()
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)


def ray_installed() -> bool:
    """True when `import ray` works (Ray is a dependency of the default install)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def require_ray():
    """The `ray` module, or ImportError with the one-line install hint."""
    try:
        import ray
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    return ray


def project_root() -> str:
    """The directory holding the esper_fx package the driver runs (this file is esper_fx/distributed/runtime.py):
    the workers import the same code."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class RaySession:
    """A connection to Ray for one run; `owned` when the run started a local instance (and shuts it down)."""

    owned: bool
    joined: bool  # the run connected (False: Ray was already initialised by the caller, e.g. a notebook)
    reaper: Any = field(default=None, repr=False)  # an owned Ray's `reaper` (kills what a SIGKILL leaves)

    @classmethod
    def open(cls, address: str | None, min_cpus: int, say: Callable[[str], None] | None = None) -> "RaySession":
        """Join the cluster at `address`, or start a local Ray with at least `min_cpus` CPUs (one per
        worker; more than the machine has only oversubscribes it). An initialised Ray is used as is. `say`
        gets one line before Ray starts (some 7 s on a small machine, with nothing else to show)."""
        ray = require_ray()
        if ray.is_initialized():
            return cls(owned=False, joined=False)
        check_ray_address(address)
        if say is not None:
            say(f"starting {min_cpus} Ray workers ({'a local Ray' if address is None else 'joining ' + address})")
        runtime_env = {"env_vars": {"PYTHONPATH": _pythonpath()}}
        local = address is None
        guard = reaper.start() if local else None  # before Ray's daemons, so that it sees them as new
        # Ctrl-C / SIGTERM are held until Ray has started (then raised): an interrupted start left Ray's
        # agents orphaned. Leaving the block also restores the SIGTERM handler that ray.init replaces.
        try:
            with deferred_stops(), warnings.catch_warnings():
                # (Ray's fork+exec of its daemons, not a fork of this process)
                warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
                if local:
                    with quiet_token_notice():
                        ray.init(address="local", num_cpus=max(usable_cores(), min_cpus), include_dashboard=False,
                                 runtime_env=runtime_env, configure_logging=False, log_to_driver=False)
                else:
                    with quiet_ray_logging():
                        ray.init(address=address, runtime_env=runtime_env, configure_logging=False,
                                 log_to_driver=False)
        except BaseException as exc:  # a failed start, or a stop held during it: leave nothing running
            with deferred_stops(reraise=False):
                ray.shutdown()
                reaper.stop(guard)
            if local and isinstance(exc, Exception):
                raise RayStartError(f"Ray could not start: {' '.join(str(exc).split())[:300] or type(exc).__name__}") \
                    from exc
            raise
        return cls(owned=local, joined=True, reaper=guard)

    def close(self) -> None:
        """Disconnect what `open` connected; a local instance the run started is shut down with it (a
        Ctrl-C meanwhile is dropped: the run is stopping)."""
        if self.joined:
            import ray

            with deferred_stops(reraise=False):
                if ray.is_initialized():
                    ray.shutdown()
                reaper.stop(self.reaper)


def worker_logs() -> str | None:
    """Where Ray keeps the output of this session's worker processes on this machine (`worker-*.out` and
    `.err`, named by worker, job and pid), or None when Ray is not running here or cannot say."""
    try:
        import ray

        node = ray._private.worker._global_node  # no public API names the folder
        return None if node is None else str(node.get_logs_dir_path())
    except Exception:  # noqa: BLE001 - a folder that cannot be named is left out of the message
        return None


def _pythonpath() -> str:
    """The driver's project root first, then the driver's own PYTHONPATH."""
    parts = [project_root()] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(parts))
