"""The graph a build starts from, read once: an ONNX file, optionally inside an export directory,
and the facts the plan needs of it (its metrale projections, inputs, weight bytes, what the
row-invariance promise covers, the sha256 of its files).

Invariants: ``resolve_source`` is the only I/O of planning; it reads ONNX headers (weights stay on
disk, each external data file checked to be there and long enough) and hashes files, nothing else.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from ..errors import InputError
from ..exporter.external_data import external_data_files
from ..hashing import sha256_file
from ..invariance import audit
from . import nodes


@dataclass
class Source:
    """The graph to build: an ONNX file, optionally inside an export directory, and its facts."""

    onnx_path: Path
    export_manifest: dict | None = None
    files: list[Path] = field(default_factory=list)  # the ONNX file and its external data
    ops: list = field(default_factory=list)  # nodes.OpInfo of every metrale node
    inputs: dict = field(default_factory=dict)  # graph input name -> dims (int, name or None)
    sha256: str = ""  # over every file in ``files``
    audit: dict = field(default_factory=dict)  # invariance.audit: what the promise covers, what is left
    # Bytes of its weights (the ONNX file's external data, else the file): an upper bound of the
    # lowered graph's weights file (float32 tables become bfloat16, INT4 stays INT4).
    weight_bytes: int = 0

    @property
    def largest_op_weights(self) -> int:
        """Weights (elements) of the largest metrale projection: what the lowering holds at once."""
        return max((op.n * op.k for op in self.ops), default=0)

    @property
    def model_max_positions(self) -> int | None:
        value = ((self.export_manifest or {}).get("model") or {}).get("max_position_embeddings")
        return int(value) if value else None


def sha256_files(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0" + sha256_file(p).encode())
    return h.hexdigest()


def input_shapes(model: onnx.ModelProto) -> dict[str, list]:
    """Graph input name -> dims (an int, a symbolic name, or None), initializers left out."""
    init = {t.name for t in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in init:
            continue
        dims = []
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            else:
                dims.append(d.dim_param or None)
        out[vi.name] = dims
    return out


def resolve_source(path: Path, hash_files: bool = True) -> Source:
    """An ONNX file, or an export directory holding ``model.onnx`` and ``manifest.json``."""
    path = Path(path)
    if path.is_dir():
        onnx_path = path / "model.onnx"
        if not onnx_path.is_file():
            raise InputError(f"{path}: expected an export directory with model.onnx, found none")
        manifest = None
        if (path / "manifest.json").is_file():
            try:
                manifest = json.loads((path / "manifest.json").read_text())
            except json.JSONDecodeError as e:
                raise InputError(f"{path / 'manifest.json'}: not valid JSON ({e})") from e
    elif path.is_file():
        onnx_path, manifest = path, None
    else:
        raise InputError(f"{path}: no such ONNX file or export directory")
    try:
        header = onnx.load(str(onnx_path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - onnx raises several types for a bad file
        raise InputError(f"{onnx_path}: not a readable ONNX model ({e})") from e
    files = [onnx_path, *external_data_files(header, onnx_path)]  # each there and long enough
    weight_bytes = sum(p.stat().st_size for p in files[1:]) or onnx_path.stat().st_size
    return Source(onnx_path, manifest, files, nodes.metrale_ops(header), input_shapes(header),
                  sha256_files(files) if hash_files else "", audit(header.graph), weight_bytes)
