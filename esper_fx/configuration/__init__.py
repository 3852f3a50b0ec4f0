"""`esper_fx.config`'s parts by job: the choices, the checks, the derived facts, the keys on disk and on the command line."""
