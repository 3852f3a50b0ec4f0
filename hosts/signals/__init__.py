"""The signals pytree: everything the controller sees of the hosts (BEHAVIOUR §7.3 step 8, §8, §9).

    assembly.py       assemble_signals: E envs' views -> the SIGNAL_FIELDS dict of device tensors
    observation.py    the raw observation of one env (base features, slot and telemetry blocks)
    masks.py          the four action masks of one env
    tracker.py        SignalTracker: plateau, stabilization, best values of one env's training curve
    slot_fields.py    the per-slot `slot_*` fields of E envs
    occupancy.py      which slots hold a seed, seed counts and seed parameters (shared by the above)
    device_upload.py  packed host-side tables -> fresh contiguous device tensors, one copy each
"""
