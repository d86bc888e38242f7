"""The model description read from config.json, validated against what the exporter builds.

Invariants: unsupported architectures or features (a RoPE scaling we do not implement, sliding
windows) are refused here with a ``ConfigError`` naming the key, never silently ignored. The raw dict
stays available (``raw``) for layer kinds that read more keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError

# Architectures the exporter builds, by config "architectures"[0]. Families beyond the dense model
# register themselves in SUPPORTED_ARCHITECTURES from their own modules.
SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",  # layers/moe.py
    "Qwen3NextForCausalLM": "qwen3_next",  # layers/qwen3_next.py (Gated DeltaNet: layers/gdn.py)
}


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool
    attention_bias: bool
    max_position_embeddings: int
    raw: dict = field(repr=False, compare=False, hash=False, default_factory=dict)

    @property
    def family(self) -> str:
        return SUPPORTED_ARCHITECTURES[self.architecture]


def _get(raw: dict, key: str, kind, where: Path | str, default=None):
    if key not in raw or raw[key] is None:
        if default is not None:
            return default
        raise ConfigError(f"{where}: missing required key {key!r}")
    value = raw[key]
    try:
        if kind is bool:
            if not isinstance(value, bool):
                raise TypeError
            return value
        out = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: key {key!r}: expected {kind.__name__}, found {value!r}") from None
    if kind is int and out <= 0:
        raise ConfigError(f"{where}: key {key!r}: expected a positive integer, found {value!r}")
    return out


def _rope_theta(raw: dict, where) -> float:
    params = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    if not isinstance(params, dict):
        raise ConfigError(f"{where}: key 'rope_parameters': expected an object, found {params!r}")
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ("default", None):
        raise ConfigError(
            f"{where}: RoPE type {rope_type!r} is not supported (only the default RoPE); "
            "remove the scaling from config.json to export without it"
        )
    theta = params.get("rope_theta", raw.get("rope_theta"))
    if theta is None:
        raise ConfigError(f"{where}: missing 'rope_theta' (top level or in 'rope_parameters')")
    return float(theta)


def parse_config(raw: dict, where: Path | str = "config.json") -> ModelConfig:
    """Validate a config.json dict and return the fields the layers need."""
    archs = raw.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs else None
    if arch not in SUPPORTED_ARCHITECTURES:
        supported = ", ".join(sorted(SUPPORTED_ARCHITECTURES))
        if arch is None:
            by_type = {family: a for a, family in SUPPORTED_ARCHITECTURES.items()}.get(raw.get("model_type"))
            hint = (f"; model_type is {raw.get('model_type')!r}: add \"architectures\": [\"{by_type}\"]"
                    if by_type else "")
            raise ConfigError(f"{where}: no 'architectures' entry naming the model class; expected one of "
                              f"{supported}{hint}")
        raise ConfigError(
            f"{where}: architecture {arch!r} is not supported; supported: {supported}"
        )
    if raw.get("use_sliding_window"):
        raise ConfigError(f"{where}: 'use_sliding_window' is true; sliding-window attention is not supported")
    hidden = _get(raw, "hidden_size", int, where)
    heads = _get(raw, "num_attention_heads", int, where)
    kv_heads = _get(raw, "num_key_value_heads", int, where, default=heads)
    if heads % kv_heads:
        raise ConfigError(
            f"{where}: num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}"
        )
    return ModelConfig(
        architecture=arch,
        vocab_size=_get(raw, "vocab_size", int, where),
        hidden_size=hidden,
        intermediate_size=_get(raw, "intermediate_size", int, where),
        num_hidden_layers=_get(raw, "num_hidden_layers", int, where),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=_get(raw, "head_dim", int, where, default=hidden // heads),
        rms_norm_eps=_get(raw, "rms_norm_eps", float, where, default=1e-6),
        rope_theta=_rope_theta(raw, where),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        attention_bias=bool(raw.get("attention_bias", False)),
        max_position_embeddings=_get(raw, "max_position_embeddings", int, where, default=32768),
        raw=raw,
    )
