"""The controller registry: every controller name's constructor, and the public face (`get`, `register`, `names`,
`build`).

A constructor takes a `ControllerSpec` and returns a `Controller` bundle (`controllers/protocol.py`). A built-in
controller's module (`controllers/ppo.py`, `controllers/heuristic.py`, `controllers/baselines.py`,
`controllers/reinforce.py`, named in
`esper_fx/controller_names.py`) is imported when its name is first asked for. The names themselves live in
`esper_fx/controller_names.py`, which the configuration reads without importing this module or jax.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from esper_fx.controller_names import BUILT_IN, NAMES
from esper_fx.controllers.protocol import Controller, ControllerSpec

Constructor = Callable[[Any], Any]
_constructors: dict[str, Constructor] = {}  # the names asked for or registered so far


def get(name: str) -> Constructor:
    """The constructor registered under `name` (`ppo` is an alias of `ppo_lstm`)."""
    key = NAMES.canonical(name)
    if key not in _constructors:
        module, constructor = BUILT_IN[key]
        _constructors[key] = getattr(importlib.import_module(module), constructor)
    return _constructors[key]


def register(name: str, constructor: Constructor | Controller) -> None:
    """Register a constructor `spec -> Controller` (or a ready Controller bundle) under `name`."""
    if isinstance(constructor, Controller):
        bundle = constructor
        constructor = lambda spec, _b=bundle: _b  # noqa: E731 - a ready bundle ignores the spec
    if not callable(constructor):
        raise TypeError(f"controller constructor for {name!r} must be callable")
    NAMES.add(name)
    _constructors[name] = constructor


def names() -> list[str]:
    return NAMES.names()


def build(controller: str | Controller | Constructor, spec: ControllerSpec) -> Controller:
    """Resolve a name, a constructor or a bundle into a ready Controller for `spec`."""
    if isinstance(controller, Controller):
        return controller
    if isinstance(controller, str):
        return get(controller)(spec)
    if callable(controller):
        bundle = controller(spec)
        if not isinstance(bundle, Controller):
            raise TypeError(f"controller constructor returned {type(bundle).__name__}, expected Controller")
        return bundle
    raise TypeError(f"controller must be a name, a Controller or a constructor (got {controller!r})")
