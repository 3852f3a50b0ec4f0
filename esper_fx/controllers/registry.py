"""The controller registry: every controller name and its constructor, in one place, without jax.

`TrainingConfig` checks `controller` against this registry before jax loads, so the built-in
controllers are registered by import path ("module:function") and imported on their first use. A
constructor takes a `ControllerSpec` and returns a `Controller` bundle (`esper_fx.controllers.protocol`, which is
the public face of this registry: `register`, `get`, `names`, `build`).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

Constructor = Callable[[Any], Any]

BUILT_IN: dict[str, str] = {
    "ppo_lstm": "esper_fx.controllers.ppo:build_ppo_lstm",
    "ppo_mlp": "esper_fx.controllers.ppo:build_ppo_mlp",
    "heuristic": "esper_fx.controllers.heuristic:build_heuristic",
    "random": "esper_fx.controllers.baselines:build_random",
    "wait": "esper_fx.controllers.baselines:build_wait",
    "oracle": "esper_fx.controllers.baselines:build_oracle",
    "static_final": "esper_fx.controllers.baselines:build_static_final",
}
ALIASES: dict[str, str] = {"ppo": "ppo_lstm"}


class ControllerRegistry:
    """Name -> constructor (or "module:function" path, imported on first `get`); aliases on top."""

    def __init__(self, built_in: dict[str, str], aliases: dict[str, str]) -> None:
        self._entries: dict[str, Constructor | str] = dict(built_in)
        self._aliases = dict(aliases)

    def register(self, name: str, constructor: Constructor, *, overwrite: bool = True) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("controller name must be a non-empty string")
        if not overwrite and name in self._entries:
            raise ValueError(f"controller {name!r} is already registered")
        if not callable(constructor):
            raise TypeError(f"controller constructor for {name!r} must be callable")
        self._entries[name] = constructor

    def canonical(self, name: str) -> str:
        """The registered name `name` stands for (an alias resolves); ValueError for an unknown name."""
        key = self._aliases.get(name, name)
        if not isinstance(key, str) or key not in self._entries:
            raise ValueError(f"controller must be one of {self.choices()} (got {name!r})")
        return key

    def get(self, name: str) -> Constructor:
        key = self.canonical(name)
        entry = self._entries[key]
        if isinstance(entry, str):
            module, _, attr = entry.partition(":")
            entry = self._entries[key] = getattr(importlib.import_module(module), attr)
        return entry

    def names(self) -> list[str]:
        return sorted(self._entries)

    def choices(self) -> list[str]:
        """Every accepted name, aliases included."""
        return self.names() + sorted(self._aliases)


REGISTRY = ControllerRegistry(BUILT_IN, ALIASES)
