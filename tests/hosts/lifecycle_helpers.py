"""Drive a SeedSlot through its lifecycle with the public API, as the loop would (BEHAVIOUR §7.3)."""

from esper_fx.contracts.stages import SeedStage
from esper_fx.contracts.lifecycle import lifecycle_timings
from hosts.seeds.lifecycle import SeedClock

# the reference's clock of a 25-epoch task: dwell 2, G2 and G3 at 3 epochs, blend 5 epochs, probation timeout 5
CIFAR_CLOCK = SeedClock.for_run(lifecycle_timings("reference", 25, 25), 0)


def epoch(slot, acc, contribution=None, ratio=0.2, decide=None):
    """One epoch after the action phase: record, contribution (if α > 0 at validation), ratio, decide, step."""
    alpha_at_validation = slot.alpha
    slot.record_accuracy(acc)
    if contribution is not None and alpha_at_validation > 0:
        slot.set_contribution(contribution)
    slot.set_gradient_ratio(ratio)
    result = decide(slot) if decide is not None else None
    auto_culled = slot.step_epoch()
    return auto_culled, result


def drive_to(slot, stage, blueprint="conv_light", blend="sigmoid", contribution=2.0):
    """Germinate (if empty) and run epochs with every gate passing until `stage` is reached."""
    if slot.state is None:
        slot.germinate(blueprint, blend=blend)
        slot.step_epoch()
    acc = 50.0
    for _ in range(40):
        if slot.stage == stage:
            return slot
        if stage == SeedStage.FOSSILIZED and slot.stage == SeedStage.PROBATIONARY:
            slot.record_accuracy(acc)
            slot.set_contribution(contribution)
            assert slot.fossilize().passed
            continue
        acc += 1.0
        epoch(slot, acc, contribution=contribution)
    raise AssertionError(f"could not reach {stage}, stuck at {slot.stage}")
