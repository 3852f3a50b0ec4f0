"""The controller registry: every controller name and its constructor, in one place, without jax.

`TrainingConfig` checks `controller` against this registry before jax loads, so each built-in controller is
registered by a loader: a small function below that imports its module (`controllers/ppo.py`,
`controllers/heuristic.py`, `controllers/baselines.py`) and returns the constructor, called on the first
`get`. A constructor takes a `ControllerSpec` and returns a `Controller` bundle (`controllers/protocol.py`,
which is the public face of this registry: `register`, `get`, `names`, `build`).
"""

from __future__ import annotations

from typing import Any, Callable

Constructor = Callable[[Any], Any]
Loader = Callable[[], Constructor]  # imports a built-in controller's module, returns its constructor


def _ppo_lstm() -> Constructor:
    from esper_fx.controllers.ppo import build_ppo_lstm

    return build_ppo_lstm


def _ppo_mlp() -> Constructor:
    from esper_fx.controllers.ppo import build_ppo_mlp

    return build_ppo_mlp


def _heuristic() -> Constructor:
    from esper_fx.controllers.heuristic import build_heuristic

    return build_heuristic


def _random() -> Constructor:
    from esper_fx.controllers.baselines import build_random

    return build_random


def _wait() -> Constructor:
    from esper_fx.controllers.baselines import build_wait

    return build_wait


def _oracle() -> Constructor:
    from esper_fx.controllers.baselines import build_oracle

    return build_oracle


def _static_final() -> Constructor:
    from esper_fx.controllers.baselines import build_static_final

    return build_static_final


BUILT_IN: dict[str, Loader] = {
    "ppo_lstm": _ppo_lstm,
    "ppo_mlp": _ppo_mlp,
    "heuristic": _heuristic,
    "random": _random,
    "wait": _wait,
    "oracle": _oracle,
    "static_final": _static_final,
}
ALIASES: dict[str, str] = {"ppo": "ppo_lstm"}


class ControllerRegistry:
    """Name -> constructor (a built-in one loaded by its loader on the first `get`); aliases on top."""

    def __init__(self, built_in: dict[str, Loader], aliases: dict[str, str]) -> None:
        self._loaders: dict[str, Loader] = dict(built_in)
        self._entries: dict[str, Constructor] = {}
        self._aliases = dict(aliases)

    def register(self, name: str, constructor: Constructor, *, overwrite: bool = True) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("controller name must be a non-empty string")
        if not overwrite and name in self.names():
            raise ValueError(f"controller {name!r} is already registered")
        if not callable(constructor):
            raise TypeError(f"controller constructor for {name!r} must be callable")
        self._loaders.pop(name, None)
        self._entries[name] = constructor

    def canonical(self, name: str) -> str:
        """The registered name `name` stands for (an alias resolves); ValueError for an unknown name."""
        key = self._aliases.get(name, name)
        if not isinstance(key, str) or key not in self.names():
            raise ValueError(f"controller must be one of {self.choices()} (got {name!r})")
        return key

    def get(self, name: str) -> Constructor:
        key = self.canonical(name)
        if key not in self._entries:
            self._entries[key] = self._loaders.pop(key)()
        return self._entries[key]

    def names(self) -> list[str]:
        return sorted({*self._loaders, *self._entries})

    def choices(self) -> list[str]:
        """Every accepted name, aliases included."""
        return self.names() + sorted(self._aliases)


REGISTRY = ControllerRegistry(BUILT_IN, ALIASES)
