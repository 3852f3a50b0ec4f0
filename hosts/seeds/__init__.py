"""Seeds: the modules a host grows, and everything that decides their fate (BEHAVIOUR §2, §4, §5).

    slot.py            SeedSlot: one injection point holding at most one seed, its forward per stage
    lifecycle.py       SeedState, SeedMetrics and the quality gates G0–G5; dwell and probation timing
    blending.py        blend schedules (linear, sigmoid, gated) that ramp a seed's alpha in
    blueprints.py      the registry of seed architectures per topology
    gradient_ratio.py  the seed/host gradient-activity ratio G2 reads, and its EMA
    governor.py        Governor: the watchdog that rolls a host back after a loss blow-up
    slot_report.py     SlotReport: the plain snapshot of a slot the signals are built from
"""
