"""The signals pytree: everything the controller sees of the hosts (BEHAVIOUR §7.3 step 8, §8, §9).

    assembly.py       assemble_signals: E envs' views -> the SIGNAL_FIELDS dict of device tensors (stacked,
                      one host->device copy per group of fields); pack_signals
    observation.py    the raw observation of one env (base features, slot and telemetry blocks)
    masks.py          the four action masks of one env
    tracker.py        SignalTracker: plateau, stabilization, best values of one env's training curve
    slots.py          which slots hold a seed, seed counts and parameters, one env's `slot_*` fields
"""
