"""The topologies, every registered blueprint per topology and the default menus (BEHAVIOUR §4.3, §4.4)."""

from __future__ import annotations

from typing import Mapping

TOPOLOGIES: tuple[str, ...] = ("cnn", "transformer")

# Every registered blueprint per topology (BEHAVIOUR §4.3–§4.5). hosts.seeds.blueprints registers exactly these.
BLUEPRINT_NAMES: Mapping[str, tuple[str, ...]] = {
    "cnn": (
        "noop", "norm", "attention", "depthwise", "bottleneck", "conv_small", "conv_light", "conv_heavy",
        "copy_block", "widen",
    ),
    "transformer": (
        "noop", "norm", "lora", "lora_large", "attention", "flex_attention", "mlp_small", "mlp",
    ),
}

# Default blueprint menus (index 0 is always noop, and noop is always masked). [fix] one per topology.
BLUEPRINT_MENUS: Mapping[str, tuple[str, ...]] = {
    "cnn": ("noop", "conv_light", "attention", "norm", "depthwise"),
    "transformer": ("noop", "lora", "attention", "norm", "mlp_small"),
}


# The default menu size B.
DEFAULT_NUM_BLUEPRINTS = 5
