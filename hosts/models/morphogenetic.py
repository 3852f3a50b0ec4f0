"""MorphogeneticModel: a host plus its seed slots, routed in position order (BEHAVIOUR §3.3, §3.4)."""

from __future__ import annotations

import torch
from torch import nn

from esper_fx.contracts.actions import DEFAULT_TEMPO
from esper_fx.contracts.blueprints import TOPOLOGIES
from esper_fx.contracts.slots import sort_slot_ids
from esper_fx.contracts.stages import SeedStage
from hosts.layout import to_layout
from hosts.seeds.blending import DEFAULT_BLEND
from hosts.seeds.lifecycle import GateResult, SeedClock
from hosts.seeds.slot_report import SlotReport
from hosts.seeds.slot import SeedSlot


class MorphogeneticModel(nn.Module):
    """`host` must provide injection_specs(), forward_to_segment() and forward_from_segment().
    `slots` are the enabled slot ids; each gets a SeedSlot of that injection point's width. A CNN host is
    put in the channels_last layout (`hosts.layout`), and its slots place their seeds the same way.
    `clock`: the run's seed clock, shared by every slot (None: the reference's without a task)."""

    def __init__(self, host: nn.Module, slots, topology: str, *, clock: SeedClock | None = None) -> None:
        super().__init__()
        if topology not in TOPOLOGIES:
            raise ValueError(f"unknown topology {topology!r}; expected one of {list(TOPOLOGIES)}")
        self.host, self.topology = to_layout(host, topology), topology
        specs = {spec.slot_id: spec for spec in host.injection_specs()}
        for slot_id in slots:
            if slot_id not in specs:
                raise ValueError(f"slot {slot_id!r} is not an injection point of this host; available: {list(specs)}")
        ordered = sorted(dict.fromkeys(slots), key=lambda s: specs[s].position)
        self.slot_order = ordered  # position (routing) order
        self.canonical_slots = sort_slot_ids(ordered)  # row-major order of slot heads and observations
        self.slots = nn.ModuleDict(
            {s: SeedSlot(s, specs[s].channels, topology, clock) for s in ordered}
        )
        first = next(host.parameters(), None)
        if first is not None:
            self.slots.to(first.device)

    # ---------------------------------------------------------------- routing
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.slot_order:
            return self.host(x)
        prev = None
        for slot_id in self.slot_order:
            x = self.slots[slot_id](self.host.forward_to_segment(slot_id, x, prev))
            prev = slot_id
        return self.host.forward_from_segment(prev, x)

    def forward_with_counterfactuals(self, x: torch.Tensor, cf_slots) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The real output and, per slot in `cf_slots`, the output with that slot's seed left out (what
        `force_alpha(0.0)` on it gives), from one pass.

        The host up to the first counterfactual slot runs once. At each counterfactual slot the input the
        slot received on the real branch joins the batch as a new branch that skips the slot; from there
        on every branch runs stacked along the batch dimension (a seed, a blend gate and an eval-mode host
        act on each sample alone, so stacking changes nothing but float reassociation).
        """
        wanted = set(cf_slots)
        if not wanted:
            return self(x), {}
        n, prev, branches = x.shape[0], None, []
        for slot_id in self.slot_order:
            h = self.host.forward_to_segment(slot_id, x, prev)
            x = self.slots[slot_id](h)
            if slot_id in wanted:
                x = torch.cat([x, h[:n]])
                branches.append(slot_id)
            prev = slot_id
        outputs = self.host.forward_from_segment(prev, x).split(n)
        return outputs[0], dict(zip(branches, outputs[1:]))

    def slot(self, slot_id: str) -> SeedSlot:
        """The SeedSlot of an enabled slot id; unknown ids raise ValueError listing the enabled ones."""
        if slot_id not in self.slots:
            raise ValueError(f"unknown slot {slot_id!r}; available slots: {list(self.slot_order)}")
        return self.slots[slot_id]

    # ---------------------------------------------------------------- lifecycle delegation
    def germinate(self, slot: str, blueprint: str, blend: str | int = DEFAULT_BLEND, seed_id: str | None = None,
                  *, tempo: int = DEFAULT_TEMPO, accuracy: float | None = None) -> GateResult:
        return self.slot(slot).germinate(blueprint, seed_id, blend, host_param_count=self.host_param_count(),
                                         tempo=tempo, accuracy=accuracy, source=self.neighbour_block(slot))

    def neighbour_block(self, slot: str) -> nn.Module | None:
        """The host block a host-initialised seed in `slot` copies (the host's `neighbour_block`), or None for
        a host without one (BEHAVIOUR §4.5)."""
        find = getattr(self.host, "neighbour_block", None)
        return None if find is None else find(slot)

    def cull(self, slot: str, reason: str = "") -> bool:
        return self.slot(slot).cull(reason)

    def fossilize(self, slot: str) -> GateResult:
        return self.slot(slot).fossilize()

    # ---------------------------------------------------------------- parameters (BEHAVIOUR §3.4)
    def host_parameters(self) -> list[nn.Parameter]:
        """Unique trainable host parameters (a tied weight appears once)."""
        return [p for p in self.host.parameters() if p.requires_grad]

    def seed_parameters(self, slot: str | None = None) -> list[nn.Parameter]:
        """Trainable seed-module parameters of one slot or of every slot (canonical order); no gates."""
        if slot is not None:
            return self.slot(slot).seed_parameters()
        return [p for s in self.canonical_slots for p in self.slots[s].seed_parameters()]

    def gate_parameters(self, slot: str) -> list[nn.Parameter]:
        return self.slot(slot).gate_parameters()

    def host_param_count(self) -> int:
        return sum(p.numel() for p in self.host_parameters())

    def seed_param_count(self, slot: str) -> int:
        return self.slot(slot).seed_param_count()

    def active_seed_params(self) -> int:
        """Σ seed params over every slot holding a seed, fossils included."""
        return sum(s.seed_param_count() for s in self.slots.values() if s.is_active)

    def total_params(self) -> int:
        return self.host_param_count() + self.active_seed_params()

    # ---------------------------------------------------------------- counts and reports
    def count_active_seeds(self) -> int:
        """Seeds present and not FOSSILIZED."""
        return sum(1 for s in self.slots.values() if s.is_active and s.stage != SeedStage.FOSSILIZED)

    def count_fossilized_seeds(self) -> int:
        return sum(1 for s in self.slots.values() if s.is_active and s.stage == SeedStage.FOSSILIZED)

    def total_seeds(self) -> int:
        return self.count_active_seeds() + self.count_fossilized_seeds()

    def slot_reports(self) -> dict[str, SlotReport]:
        """slot id -> SlotReport for every slot whose state is not None, in canonical order."""
        return {s: self.slots[s].report() for s in self.canonical_slots if self.slots[s].state is not None}
