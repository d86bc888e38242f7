"""One export session: a checkpoint opened once, its config parsed, the weight request resolved
and the projection source chosen, for the export, the comparison and the CLI alike.

``open_model(path, request)`` owns the ``auto`` rule (declared for a checkpoint that declares a
quantization format, else w4a16); ``request_from_manifest`` is the reverse mapping, from an export's
``manifest.json`` back to the request that made it (so ``compare`` rebuilds the same model);
``read_manifest`` reads that file and refuses a ``format_version`` it does not know.

Invariants: a session reads the checkpoint's header once; ``request_from_manifest`` inverts
``manifest.build_manifest``'s ``weight_quantization`` for every request (tested round trip).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from ..errors import InputError
from .checkpoint import Checkpoint
from .config import ModelConfig, parse_config
from .manifest import FORMAT_VERSION, MANIFEST_NAME
from .projection_source import ProjectionSource
from .quant_options import AUTO, request_fields_from_manifest
from .quantization import FloatSource, QuantRequest


@dataclass
class ModelSession:
    """An opened checkpoint with its config, the resolved request and the projection source."""

    path: Path
    checkpoint: Checkpoint
    config: ModelConfig
    request: QuantRequest
    source: ProjectionSource  # FloatSource, a declared format's (exporter/formats/), or StaticScales

    def model(self, dtype, layers: list[int] | None = None):
        """A ``CausalLM`` of the session on the current default device (``meta`` to trace); with the
        ``hidden_states`` output when the checkpoint has an MTP head."""
        from .layers.model import CausalLM

        return CausalLM(self.config, self.source, dtype, layers, hidden_output=self.has_mtp)

    @property
    def has_mtp(self) -> bool:
        """Whether the checkpoint holds an MTP head (any ``mtp.*`` tensor; ``layers/mtp.py``)."""
        from .layers import mtp

        return self.config.family == "qwen3_next" and mtp.has_mtp(self.checkpoint)

    def mtp_model(self, dtype):
        """The ``MtpHead`` of the session (refused, naming the tensor, when incomplete)."""
        from .layers.mtp import MtpHead

        return MtpHead(self.config, self.source, dtype)


def resolve_weight(weight: str, ckpt: Checkpoint) -> str:
    """``auto``: declared for a checkpoint that declares a quantization format, else w4a16."""
    if weight != AUTO:
        return weight
    from .formats import detect

    return "declared" if detect(ckpt) is not None else "w4a16"


def select_source(ckpt: Checkpoint, request: QuantRequest):
    """The projection source for this checkpoint: the reader of the quantization format it declares
    (``formats.detect``; a request it cannot honour is refused there), else its float weights
    quantized as requested."""
    from .formats import declared_source

    source = declared_source(ckpt, request)
    if source is not None:
        return source
    if request.weight == "declared":
        raise InputError(
            f"{ckpt.root}: --weight-quantization declared: the checkpoint declares no quantization format "
            "(no quantization_config in config.json, no hf_quant_config.json); it holds float weights: "
            "choose none, w4a16, w8a8 or w4a4"
        )
    return FloatSource(ckpt, request)


def open_model(path: str | Path, request: QuantRequest | Mapping | None = None,
               headers: dict | None = None) -> ModelSession:
    """Open ``path`` (a .safetensors file, a checkpoint directory or a sharded index) for export.

    ``request`` is a ``QuantRequest`` or a mapping of its fields in which ``weight`` may be
    ``auto``; None requests the default (``QuantRequest()``). ``headers``: the safetensors headers
    already read (``safetensors_files.read_headers``), so that they are not read again.
    """
    ckpt = Checkpoint.open(path, headers)
    config = parse_config(ckpt.config, ckpt.root / "config.json")
    if request is None:
        request = QuantRequest()
    elif isinstance(request, Mapping):
        known = {f.name for f in fields(QuantRequest)}
        unknown = sorted(set(request) - known)
        if unknown:
            raise TypeError(f"open_model: unknown request fields {unknown}; expected some of {sorted(known)}")
        request = QuantRequest(**{**request, "weight": resolve_weight(request.get("weight", "none"), ckpt)})
    return ModelSession(Path(path), ckpt, config, request, select_source(ckpt, request))


def request_from_manifest(manifest: Mapping) -> QuantRequest:
    """The request an export was made with, from its manifest's ``weight_quantization`` (the
    inverse of manifest.weight_quantization, both made from quant_options.OPTIONS)."""
    return QuantRequest(**request_fields_from_manifest(manifest["weight_quantization"]))


def read_manifest(export_dir: str | Path) -> dict:
    """An export directory's ``manifest.json``, refused when missing, unreadable or of a
    ``format_version`` this version does not read."""
    path = Path(export_dir) / MANIFEST_NAME
    if not path.is_file():
        raise InputError(f"{export_dir}: not an export directory (no {MANIFEST_NAME}); run 'metrale-export export' first")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: not a readable manifest ({e})") from e
    version = manifest.get("format_version") if isinstance(manifest, dict) else None
    if version is None and isinstance(manifest, dict) and "engines" in manifest:  # engines/manifest.json
        source = (manifest.get("source") or {}).get("path")
        export = f"the export it was built from, {Path(source).parent}" if source else "the export directory"
        raise InputError(f"{export_dir}: an engine directory (metrale-export build wrote it), not an export; "
                         f"pass {export}")
    if version != FORMAT_VERSION:
        raise InputError(
            f"{path}: format_version {version!r}; this metrale-export reads format_version {FORMAT_VERSION} "
            "(re-export the model with this version)"
        )
    return manifest
