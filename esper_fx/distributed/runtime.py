"""Ray for the run: is it installed, start or join it, stop what the run started (issue 15).

Imports neither torch nor jax (nor anything that does), and Ray only when asked, so the command line can reject `--env-workers`
without Ray instantly:

    require_ray()                              # ImportError with the install line when Ray is missing
    session = RaySession.open(address, cpus)   # join `address`, or start a local Ray the run owns
    session.close()                            # shut down what `open` started (a joined cluster stays)
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

from esper_fx.training.stopping import deferred_stops

INSTALL_HINT = "env workers need Ray: pip install -e '.[ray]'"


def ray_installed() -> bool:
    """True when `import ray` works (the `[ray]` extra is installed)."""
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
    """The directory holding the esper_fx package the driver runs: the workers import the same code."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class RaySession:
    """A connection to Ray for one run; `owned` when the run started a local instance (and shuts it down)."""

    owned: bool
    joined: bool  # the run connected (False: Ray was already initialised by the caller, e.g. a notebook)

    @classmethod
    def open(cls, address: str | None, min_cpus: int) -> "RaySession":
        """Join the cluster at `address`, or start a local Ray with at least `min_cpus` CPUs (one per
        worker; more than the machine has only oversubscribes it). An initialised Ray is used as is."""
        ray = require_ray()
        if ray.is_initialized():
            return cls(owned=False, joined=False)
        runtime_env = {"env_vars": {"PYTHONPATH": _pythonpath()}}
        local = address is None
        # Ctrl-C / SIGTERM are held until Ray has started (then raised): an interrupted start left Ray's
        # agents orphaned. Leaving the block also restores the SIGTERM handler that ray.init replaces.
        try:
            with deferred_stops(), warnings.catch_warnings():
                # (Ray's fork+exec of its daemons, not a fork of this process)
                warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
                if local:
                    ray.init(address="local", num_cpus=max(os.cpu_count() or 1, min_cpus), include_dashboard=False,
                             runtime_env=runtime_env, configure_logging=False)
                else:
                    ray.init(address=address, runtime_env=runtime_env, configure_logging=False)
        except BaseException:  # a failed start, or a stop held during it: leave nothing running
            with deferred_stops(reraise=False):
                ray.shutdown()
            raise
        return cls(owned=local, joined=True)

    def close(self) -> None:
        """Disconnect what `open` connected; a local instance the run started is shut down with it (a
        Ctrl-C meanwhile is dropped: the run is stopping)."""
        if self.joined:
            import ray

            with deferred_stops(reraise=False):
                if ray.is_initialized():
                    ray.shutdown()


def _pythonpath() -> str:
    """The driver's project root first, then the driver's own PYTHONPATH."""
    parts = [project_root()] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(parts))
