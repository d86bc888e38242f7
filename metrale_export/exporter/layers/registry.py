"""The decoder-layer classes by config family (``ModelConfig.family``): an explicit table, no
registration on import. A new architecture is one entry here and its layer module beside these
(the decoder-layer protocol is in ``model.py``).
"""

from __future__ import annotations

from ...errors import ConfigError
from .moe import Qwen3MoeDecoderLayer
from .qwen3 import DecoderLayer
from .qwen3_next import Qwen3NextDecoderLayer

LAYERS: dict[str, type] = {
    "qwen3": DecoderLayer,
    "qwen3_moe": Qwen3MoeDecoderLayer,
    "qwen3_next": Qwen3NextDecoderLayer,
}


def has_routed_experts(family: str) -> bool:
    """Whether the family's decoder layers have routed MoE blocks (the layer's ``routed_experts``)."""
    return getattr(layer_builder(family), "routed_experts", False)


def layer_builder(family: str) -> type:
    """The decoder-layer class of a config family."""
    try:
        return LAYERS[family]
    except KeyError:
        raise ConfigError(f"no decoder layer for the model family {family!r}; known: {', '.join(LAYERS)}") from None
