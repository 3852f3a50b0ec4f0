"""The named choices of the run's own settings (the hosts' are in `esper_fx.contracts.run_settings`), and what
earlier versions accepted and no longer do."""

from __future__ import annotations

from enum import StrEnum
from typing import Mapping


class WandbMode(StrEnum):
    """Weights & Biases logging (`esper_fx.outputs.wandb_log`): none, live, or files for `wandb sync` later."""

    OFF = "off"
    ONLINE = "online"
    OFFLINE = "offline"


class TelemetryLevel(StrEnum):
    """What the run writes to events.jsonl: `debug` adds every reward component of every epoch."""

    NORMAL = "normal"
    DEBUG = "debug"


# env_workers' default: the number of Ray env workers is decided when the run starts (distributed.auto)
AUTO = "auto"

# Fields of earlier versions that changed nothing a run did. A config file that names one is refused with
# this reason; a saved config (a checkpoint's manifest, a run's config.json) drops them (`upgrade_saved`).
RETIRED_FIELDS: Mapping[str, str] = {
    "plateau_threshold": "nothing read it",
    "improvement_threshold": "nothing read it",
    "chunk_length": "it always equalled max_epochs",
}
# Telemetry levels of earlier versions: "minimal" did what "normal" does; "off" also set use_telemetry to
# false, which changes the observation size. A config file naming one is refused with this line.
RETIRED_TELEMETRY_LEVELS: Mapping[str, str] = {
    "minimal": "telemetry_level 'minimal' was removed: it did what 'normal' does (use 'normal')",
    "off": "telemetry_level 'off' was removed: set use_telemetry to false to drop the gradient features "
           "from the observation (this changes the observation size: a checkpoint records it)",
}
