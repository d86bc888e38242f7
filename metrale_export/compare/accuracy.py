"""Compare ONNX Runtime (reference ops) against the PyTorch model of the same export, through
Polygraphy's Comparator and DataLoader, for a prefill case and a decode case with a KV cache.

Invariants: the metric is the relative Frobenius error per output (docs/ops.md's tolerances); the
same seeded inputs feed both runners; a result above tolerance is a failed check, never an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from polygraphy.common import TensorMetadata
from polygraphy.comparator import Comparator, DataLoader

from ..errors import InputError
from ..ops import versions
from .runners import TorchRunner, onnxrt_runner, torch_model_factory

# docs/ops.md: ONNX Runtime vs the PyTorch reference of the same model.
TOLERANCE = {"none": 1e-4, "quantized": 1e-3}


@dataclass(frozen=True)
class Case:
    name: str
    batch: int
    seq: int
    past: int


DEFAULT_CASES = (Case("prefill", 2, 7, 0), Case("decode", 3, 1, 9))


@dataclass
class Row:
    case: str
    output: str
    rel_error: float
    max_abs: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return bool(np.isfinite(self.rel_error)) and self.rel_error <= self.tolerance


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    def to_json(self) -> str:
        return json.dumps({"ok": self.ok, "rows": [r.__dict__ | {"ok": r.ok} for r in self.rows]}, indent=2)


def load_manifest(export_dir: Path) -> dict:
    path = Path(export_dir) / "manifest.json"
    if not path.exists():
        raise InputError(f"{export_dir}: not an export directory (no manifest.json); run 'metrale-export export' first")
    return json.loads(path.read_text())


def _metadata(manifest: dict, case: Case) -> TensorMetadata:
    dims = {"batch": case.batch, "seq": case.seq, "past": case.past}
    meta = TensorMetadata()
    for inp in manifest["inputs"]:
        shape = [dims[d] if isinstance(d, str) else d for d in inp["shape"]]
        meta.add(inp["name"], np.dtype(inp["dtype"]), shape)
    return meta


def compare_export(export_dir: Path, checkpoint: Path | None = None, cases=DEFAULT_CASES,
                   tolerance: float | None = None, seed: int = 0) -> Report:
    """Run both runtimes on seeded inputs and report the error of every output."""
    export_dir = Path(export_dir)
    manifest = load_manifest(export_dir)
    graph = export_dir / "model.onnx"
    if graph.is_file():  # an older op contract is refused before either runtime reads a weight
        versions.check_model(onnx.load(str(graph), load_external_data=False), str(graph))
    checkpoint = Path(checkpoint or manifest["model"]["checkpoint_path"])
    quantized = manifest["weight_quantization"]["format"] != "none"
    tol = tolerance if tolerance is not None else TOLERANCE["quantized" if quantized else "none"]
    factory = torch_model_factory(export_dir, checkpoint, manifest)
    vocab = manifest["model"]["vocab_size"]
    report = Report()
    for case in cases:
        meta = _metadata(manifest, case)
        runners = [onnxrt_runner(export_dir / "model.onnx"), TorchRunner(factory, meta, name="torch-reference")]
        loader = DataLoader(seed=seed, iterations=1, input_metadata=meta,
                            val_range={"input_ids": (0, vocab - 1), "position_ids": (0, 4096),
                                       "": (-1.0, 1.0)})
        results = Comparator.run(runners, data_loader=loader)
        ort_out, torch_out = results[0][1][0], results[1][1][0]
        for name in torch_out.keys():
            a, b = np.asarray(ort_out[name], dtype=np.float64), np.asarray(torch_out[name], dtype=np.float64)
            denom = np.linalg.norm(b)
            rel = float(np.linalg.norm(a - b) / denom) if denom > 0 else float(np.linalg.norm(a - b))
            report.rows.append(Row(case.name, name, rel, float(np.abs(a - b).max(initial=0.0)), tol))
    return report
