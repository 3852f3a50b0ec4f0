"""Where a run is written when nobody says: `runs/<label>-<UTC time>-<hex>`, for the command line and for
`esper_fx.run` alike (the label is the preset or config file on the command line, the task from Python)."""

from __future__ import annotations

import os
import secrets
from datetime import datetime, timezone

DEFAULT_RUNS_DIR = "runs"


def default_run_dir(label: str, now: datetime | None = None) -> str:
    """runs/<label>-<UTC timestamp to the millisecond>-<8 random hex digits>: two launches in the same
    second (or millisecond) get different directories (and the run directory's lock catches the rest)."""
    now = now or datetime.now(timezone.utc)
    stamp = now.strftime("%Y%m%dT%H%M%S") + f".{now.microsecond // 1000:03d}Z"
    return os.path.join(DEFAULT_RUNS_DIR, f"{label}-{stamp}-{secrets.token_hex(4)}")
