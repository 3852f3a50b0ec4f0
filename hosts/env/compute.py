"""Training compute of one env's episode: FLOPs of the host and of each seed per stage, from layer shapes.

`ModelCosts` holds the per-sample forward FLOPs (`hosts.models.flops`) of the host, of the host after each
slot (what a counterfactual branch recomputes) and of each seed, measured once per host and once per
seed on the meta device. `ComputeMeter` adds them up as the episode runs:

- a training step of B samples costs B·(1 + BACKWARD_FACTOR)·F for the host and for every seed in an
  active stage, each seed's share booked under its stage: `isolated` (TRAINING: the seed learns on the
  host's features, its output not yet mixed in), `blending` (BLENDING) or `grown` (PROBATIONARY and
  FOSSILIZED: part of the network);
- validation of n samples costs n·F (forward only) for the host and its active seeds (`validation`);
- the counterfactual passes cost, per counterfactual slot, n·(host after that slot + the active seeds after
  it) (`counterfactual`), counted apart from validation and from training.

`training_flops` is the host's and the seeds' training steps; `total_flops` adds both evaluation kinds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from esper_fx.contracts.stages import ACTIVE_STAGES, SeedStage
from hosts.models.flops import BACKWARD_FACTOR, META_BATCH, forward_flops, meta_input, traced_flops

STAGE_BUCKETS = {SeedStage.TRAINING: "isolated", SeedStage.BLENDING: "blending",
                 SeedStage.PROBATIONARY: "grown", SeedStage.FOSSILIZED: "grown"}
TRAINING_PARTS = ("host_train_flops", "seed_isolated_flops", "seed_blending_flops", "seed_grown_flops")
BOOKED = TRAINING_PARTS + ("validation_flops", "counterfactual_flops")  # what the meter adds up
FLOP_FIELDS = TRAINING_PARTS + ("training_flops", "validation_flops", "counterfactual_flops", "total_flops")


@dataclass
class ModelCosts:
    """Per-sample forward FLOPs of a MorphogeneticModel's host, host tails and seeds."""

    host: int
    host_after: dict[str, int]  # slot -> the host's work after that slot (segments and head)
    activation: dict[str, tuple[int, ...]]  # slot -> the shape (no batch) of the features it sees
    seeds: dict[tuple[str, str], int] = field(default_factory=dict)  # (slot, seed_id) -> seed forward

    @classmethod
    def of(cls, model, input_shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> "ModelCosts":
        host = model.host
        host_fwd = forward_flops(host, input_shape, dtype)
        activation, after = {}, {}
        x = meta_input((META_BATCH, *input_shape), dtype)
        for slot_id in model.slot_order:
            shapes = []
            traced_flops(host, lambda m: shapes.append(tuple(m.forward_to_segment(slot_id, x).shape[1:])))
            activation[slot_id] = shapes[0]
            h = meta_input((META_BATCH, *shapes[0]))
            after[slot_id] = traced_flops(host, lambda m: m.forward_from_segment(slot_id, h))
        return cls(host_fwd, after, activation)

    def seed(self, model, slot_id: str) -> int:
        """The forward FLOPs of the seed now in `slot_id` (measured once per seed)."""
        slot = model.slot(slot_id)
        key = (slot_id, slot.state.seed_id)
        if key not in self.seeds:
            self.seeds[key] = forward_flops(slot.seed, self.activation[slot_id])
        return self.seeds[key]


def _active(model) -> list[str]:
    out = []
    for slot_id in model.slot_order:
        slot = model.slot(slot_id)
        if slot.is_active and slot.state.stage in ACTIVE_STAGES:
            out.append(slot_id)
    return out


def model_costs(model, x: torch.Tensor) -> ModelCosts | None:
    """The host's costs for inputs like `x` (a batch), or None where a layer has no count (then the run
    reports no FLOPs rather than a wrong number)."""
    try:
        return ModelCosts.of(model, tuple(x.shape[1:]), x.dtype)
    except (ValueError, RuntimeError, NotImplementedError):
        return None


@dataclass
class ComputeMeter:
    """One env's FLOP counters for one episode (plain ints; nothing touches a device)."""

    costs: ModelCosts
    counts: dict[str, int] = field(default_factory=lambda: {k: 0 for k in BOOKED})  # the sums derive in totals
    train_steps: int = 0
    train_samples: int = 0

    def train_step(self, model, batch: int) -> None:
        self.train_steps += 1
        self.train_samples += batch
        per = 1 + BACKWARD_FACTOR
        self.counts["host_train_flops"] += batch * per * self.costs.host
        for slot_id in _active(model):
            bucket = STAGE_BUCKETS[model.slot(slot_id).state.stage]
            self.counts[f"seed_{bucket}_flops"] += batch * per * self.costs.seed(model, slot_id)

    def active_seeds(self, model) -> dict[str, int]:
        """Slot -> forward FLOPs per sample of each seed in an active stage (measured once per seed)."""
        return {slot_id: self.costs.seed(model, slot_id) for slot_id in _active(model)}

    def validation(self, model, cf_slots, n: int) -> None:
        seeds = self.active_seeds(model)
        self.counts["validation_flops"] += n * (self.costs.host + sum(seeds.values()))
        order = list(model.slot_order)
        for cf in cf_slots:
            later = [s for s in seeds if order.index(s) > order.index(cf)]
            self.counts["counterfactual_flops"] += n * (self.costs.host_after[cf] + sum(seeds[s] for s in later))

    def seed_share(self, model) -> float:
        """The seeds' share of a training step now: Σ forward FLOPs of the seeds in an active stage over the
        host's (a training step's backward scales both alike). A reward's FLOP rent reads it each epoch."""
        return sum(self.active_seeds(model).values()) / self.costs.host

    @classmethod
    def fresh(cls, host_costs: ModelCosts) -> "ComputeMeter":
        """A meter for a new env sharing the host's measured costs (seeds are measured per env)."""
        return cls(ModelCosts(host_costs.host, host_costs.host_after, host_costs.activation))

    def units(self, model) -> dict[str, float]:
        """What a compute-matched rebuild needs: the host's forward FLOPs per sample ("host"), each seed
        now held ("slot=blueprint"), and the episode's training steps and samples."""
        out = {"host": float(self.costs.host), "train_steps": float(self.train_steps),
               "train_samples": float(self.train_samples)}
        for slot_id, flops in self.active_seeds(model).items():
            out[f"{slot_id}={model.slot(slot_id).state.blueprint_id}"] = float(flops)
        return out

    def totals(self) -> dict[str, int]:
        c = dict(self.counts)
        c["training_flops"] = sum(c[k] for k in TRAINING_PARTS)
        c["total_flops"] = c["training_flops"] + c["validation_flops"] + c["counterfactual_flops"]
        return {k: c[k] for k in FLOP_FIELDS}
