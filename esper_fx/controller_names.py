"""The controller names: each built-in controller's name and where its constructor lives, the aliases, and every
name registered since; it imports nothing, so the configuration checks a name without loading a controller."""

from __future__ import annotations

# name -> (module, constructor): `registry` imports the module when the name is first asked for
BUILT_IN: dict[str, tuple[str, str]] = {
    "ppo_lstm": ("esper_fx.controllers.ppo", "build_ppo_lstm"),
    "ppo_mlp": ("esper_fx.controllers.ppo", "build_ppo_mlp"),
    "heuristic": ("esper_fx.controllers.heuristic", "build_heuristic"),
    "reinforce": ("esper_fx.controllers.reinforce", "build_reinforce"),
    "random": ("esper_fx.controllers.baselines", "build_random"),
    "wait": ("esper_fx.controllers.baselines", "build_wait"),
    "oracle": ("esper_fx.controllers.baselines", "build_oracle"),
    "static_final": ("esper_fx.controllers.baselines", "build_static_final"),
}
ALIASES: dict[str, str] = {"ppo": "ppo_lstm"}


class ControllerNames:
    """The registered names (the built-in ones and every one added), and the aliases on top."""

    def __init__(self, names, aliases: dict[str, str]) -> None:
        self._names = set(names)
        self._aliases = dict(aliases)

    def add(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("controller name must be a non-empty string")
        self._names.add(name)

    def canonical(self, name: str) -> str:
        """The registered name `name` stands for (an alias resolves); ValueError for an unknown name."""
        key = self._aliases.get(name, name)
        if not isinstance(key, str) or key not in self._names:
            raise ValueError(f"controller must be one of {self.choices()} (got {name!r})")
        return key

    def names(self) -> list[str]:
        return sorted(self._names)

    def choices(self) -> list[str]:
        """Every accepted name, aliases included."""
        return self.names() + sorted(self._aliases)


NAMES = ControllerNames(BUILT_IN, ALIASES)
