"""What follows from a run's settings: its topology, menu, slots, observation size, lifecycle clock, cull
age, canonical controller name and entropy schedule (`DerivedFacts`, a mixin of
`esper_fx.config.TrainingConfig`, so each reads `config.menu`), and its paths made absolute."""

from __future__ import annotations

import os
from typing import Any

from esper_fx.contracts.blueprints import BLUEPRINT_MENUS
from esper_fx.contracts.lifecycle import LifecycleTimings, lifecycle_timings
from esper_fx.contracts.observation import obs_dim
from esper_fx.contracts.slots import sort_slot_ids
from esper_fx.contracts.tasks import DEFAULT_DATA_ROOT, task_facts, task_slot_ids
from esper_fx.controller_names import NAMES
from rl.config import entropy_coefficient


class DerivedFacts:
    """The facts a `TrainingConfig` derives from its fields."""

    @property
    def static_seed_map(self) -> dict[str, str]:
        """`static_seeds` as slot -> blueprint (enabled slots, menu blueprints, one seed per slot)."""
        out: dict[str, str] = {}
        for entry in self.static_seeds:
            slot, sep, blueprint = str(entry).partition("=")
            if not sep or slot not in self.enabled_slots or blueprint not in self.menu[1:] or slot in out:
                raise ValueError(f"static_seeds entries are 'slot=blueprint' with an enabled slot {list(self.enabled_slots)}, "
                                 f"a menu blueprint {list(self.menu[1:])} and one seed per slot (got {entry!r})")
            out[slot] = blueprint
        return out

    @property
    def topology(self) -> str:
        return task_facts(self.task).topology

    @property
    def menu(self) -> tuple[str, ...]:
        """The effective blueprint menu (blueprint-head index -> name)."""
        return self.blueprint_menu or BLUEPRINT_MENUS[self.topology]

    @property
    def num_blueprints(self) -> int:
        return len(self.menu)

    @property
    def slot_ids(self) -> tuple[str, ...]:
        """Every host injection point in canonical order (the slot head)."""
        return task_slot_ids(self.task)

    @property
    def num_slots(self) -> int:
        return len(self.slot_ids)

    @property
    def enabled_slots(self) -> tuple[str, ...]:
        return tuple(sort_slot_ids(self.slots))

    @property
    def state_dim(self) -> int:
        return obs_dim(self.num_slots, self.use_telemetry, self.num_blueprints, self.observe_fit_gap)

    @property
    def lifecycle_timings(self) -> LifecycleTimings:
        """The run's stage durations (BEHAVIOUR §2.14): its lifecycle at T = max_epochs for its task's horizon,
        with `fossil_release` when set."""
        timings = lifecycle_timings(self.lifecycle, self.max_epochs, task_facts(self.task).lifecycle_horizon)
        if self.fossil_release is None:
            return timings
        return timings._replace(release_on_fossilize=bool(self.fossil_release))

    @property
    def cull_age(self) -> int:
        """The minimum age of a seed a controller may CULL: `min_cull_age`, or the lifecycle's earliest
        fossilize age at the standard tempo."""
        return self.min_cull_age if self.min_cull_age is not None else self.lifecycle_timings.earliest_fossilize_age()

    @property
    def controller_name(self) -> str:
        """Canonical controller name (an alias such as `ppo` resolves to `ppo_lstm`)."""
        return NAMES.canonical(self.controller)

    def entropy_coefficient(self, train_steps: int) -> float:
        """β after `train_steps` completed updates (BEHAVIOUR §11.8; `rl.config.entropy_coefficient`)."""
        return entropy_coefficient(self.ppo, self.n_envs, train_steps)


def absolute_paths(config: Any) -> Any:
    """The run directory, the resume path and a data folder the run was given resolved once, against the
    directory the run started from (orbax needs absolute paths, a later chdir must not move the run, and a
    resume from another folder reads the same data). The default data folder stays `./data`: it names the
    task's own default place (fashion_mnist's is the dataset package's folder)."""
    changes = {name: os.path.abspath(getattr(config, name)) for name in ("run_dir", "resume_path")
               if getattr(config, name)}
    if config.data_root and os.path.normpath(config.data_root) != os.path.normpath(DEFAULT_DATA_ROOT):
        changes["data_root"] = os.path.abspath(config.data_root)
    changes = {name: value for name, value in changes.items() if value != getattr(config, name)}
    return config.replace(**changes) if changes else config
