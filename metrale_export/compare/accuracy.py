"""Compare ONNX Runtime (reference ops) against the PyTorch model of the same export, through
Polygraphy's Comparator and DataLoader, for a prefill case and a decode case with a KV cache.

Three checks from one ONNX Runtime run per case (the verification graph also returns the residual
stream between decoder layers and every metrale op's input and output, taps.py):
- per op: each metrale op's output against the PyTorch model's projection on ONNX Runtime's own
  input to that op (teacher_forcing.check_ops), bound ``tolerances.op_bound``;
- per layer: each decoder layer of the PyTorch model run on ONNX Runtime's input to that layer,
  its update of the residual stream and its new state against ONNX Runtime's
  (teacher_forcing.check_layers), bound ``tolerances.teacher_forced_layer_bound``;
- end to end: logits and every state output, relative error (plus cosine similarity, top-1
  agreement and KL divergence of the logits), bound ``tolerances.end_to_end_bound`` of the depth
  at which the output is computed and of the activation formats.

Invariants: the same seeded inputs feed both runners; a result above its bound is a failed check,
never an error; the weights are never loaded into the graph proto (ops/ort.py), so exports past
2 GiB compare too; the failure message names the first layer and op out of bounds.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from polygraphy.backend.onnxrt import OnnxrtRunner
from polygraphy.common import TensorMetadata
from polygraphy.comparator import Comparator, DataLoader

from .. import contract
from ..errors import InputError
from ..exporter.session import ModelSession
from ..ops import tolerances
from ..ops.ort import load_graph, reference_session
from . import metrics
from .runners import TorchRunner, open_export_model, torch_model_factory
from .taps import GraphTaps, find_taps
from .teacher_forcing import LayerRow, OpRow, check_layers, check_ops, layer_formats


@dataclass(frozen=True)
class Case:
    name: str
    batch: int
    seq: int
    past: int


DEFAULT_CASES = (Case("prefill", 2, 7, 0), Case("decode", 3, 1, 9))


@dataclass
class Row:
    """One output of the end-to-end run."""

    case: str
    output: str
    rel_error: float
    max_abs: float
    tolerance: float
    layer: int | None = None  # the layer whose state this is (None: logits)
    cosine: float | None = None
    top1: float | None = None
    kl: float | None = None

    @property
    def ok(self) -> bool:
        return bool(np.isfinite(self.rel_error)) and self.rel_error <= self.tolerance

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None or k == "layer"} | {"ok": self.ok}


def _ratio(r) -> float:
    bound = getattr(r, "bound", None) or getattr(r, "tolerance", 0.0)
    return r.rel_error / bound if bound > 0 else float("inf")


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)  # end to end
    ops: list[OpRow] = field(default_factory=list)
    layers: list[LayerRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # How it ran: "mode" (streamed: segment by segment; whole-graph), "segments", and
    # "resident_layers_peak" (most decoder layers whose PyTorch weights were in memory at once).
    run: dict = field(default_factory=dict)
    # Static activation scales only: the export's logits (ONNX Runtime) against the same model with
    # dynamic scales (PyTorch), per case: what calibration costs. Reported, not judged.
    static_vs_dynamic: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in (*self.rows, *self.ops, *self.layers))

    def by_layer(self) -> list[dict]:
        """One summary per decoder layer (and 'head' for ops outside them), worst first: the worst
        op and the worst layer output over every case, each as error / bound."""
        groups: dict = {}
        _keep_worst(groups, self.ops, "op")
        _keep_worst(groups, self.layers, "out")
        for g in groups.values():
            held = [x for x in (g["op"], g["out"]) if x is not None]
            g["ratio"] = max(_ratio(x) for x in held)
            g["ok"] = all(x.ok for x in held)
        return sorted(groups.values(), key=lambda g: -g["ratio"])

    def first_failure(self) -> str | None:
        """The first piece out of bounds, in layer order (an op before its layer's outputs), then
        the end-to-end outputs; None when everything holds."""
        first_op, first_layer = _first_out_of_bounds(self.ops), _first_out_of_bounds(self.layers)
        if first_op is not None and (first_layer is None
                                     or _layer_order(first_op.layer) <= _layer_order(first_layer.layer)):
            return _op_failure(first_op)
        if first_layer is not None:
            return _layer_failure(first_layer)
        bad = [r for r in self.rows if not r.ok]
        return _rows_failure(bad) if bad else None

    def summary(self) -> str:
        """One line for the main job's progress."""
        logits = [r for r in self.rows if r.output == "logits"]
        worst = max(logits, key=lambda r: r.rel_error / r.tolerance) if logits else None
        text = (f"{len(self.ops)} op and {len(self.layers)} layer checks on ONNX Runtime's own inputs "
                f"{'within' if all(r.ok for r in (*self.ops, *self.layers)) else 'NOT within'} bounds")
        if worst is not None:
            text += (f"; logits relative error {worst.rel_error:.2e} (bound {worst.tolerance:.1e}), "
                     f"top-1 agreement {min(r.top1 for r in logits):.3f}")
        if self.static_vs_dynamic:
            w = max(self.static_vs_dynamic, key=lambda r: r["rel_error"])
            text += (f"; static activation scales vs dynamic: logits relative error {w['rel_error']:.2e}, "
                     f"top-1 agreement {min(r['top1'] for r in self.static_vs_dynamic):.3f}")
        return text

    def to_json(self) -> str:
        extra = {"static_vs_dynamic": self.static_vs_dynamic} if self.static_vs_dynamic else {}
        return json.dumps({"ok": self.ok, "first_failure": self.first_failure(), "notes": self.notes,
                           "run": self.run, **extra,
                           "rows": [r.as_dict() for r in self.rows],
                           "layers": [r.as_dict() for r in self.layers],
                           "ops": [r.as_dict() for r in self.ops]}, indent=2, default=float)


def _layer_order(layer: int | None) -> float:
    """Decoder layers in order, the head (None) after them."""
    return float("inf") if layer is None else layer


def _keep_worst(groups: dict, rows, slot: str) -> None:
    """Keep in ``groups[layer][slot]`` the row of ``rows`` with the largest error / bound per layer."""
    for r in rows:
        g = groups.setdefault(r.layer, {"layer": r.layer, "op": None, "out": None})
        if g[slot] is None or _ratio(r) > _ratio(g[slot]):
            g[slot] = r


def _first_out_of_bounds(rows):
    """The row out of bounds in the first layer (None: every row holds)."""
    return min((r for r in rows if not r.ok), key=lambda r: _layer_order(r.layer), default=None)


def _op_failure(r) -> str:
    where = "head" if r.layer is None else f"layer {r.layer}"
    fmt = f"{r.activation_format} activations, " if r.activation_format else ""
    return (f"{where}: {r.projection} ({r.op_type}, {fmt}{r.case}) differs "
            f"from the PyTorch op on ONNX Runtime's own input by {r.rel_error:.2e} > "
            f"{r.bound:.0e}: the export's weights, scales or attributes of this op are not "
            "the checkpoint's")


def _layer_failure(r) -> str:
    return (f"layer {r.layer}: {r.output} ({r.case}) differs from the "
            f"PyTorch layer run on ONNX Runtime's input by {r.rel_error:.2e} > "
            f"{r.bound:.1e}, while every op of the layer is within its bound")


def _rows_failure(bad: list) -> str:
    worst = ", ".join(f"{r.case}/{r.output} {r.rel_error:.2e} > {r.tolerance:.1e}" for r in bad[:4])
    more = f" and {len(bad) - 4} more" if len(bad) > 4 else ""
    return f"end to end only (every op and layer within bounds): {worst}{more}"


def load_manifest(export_dir: Path) -> dict:
    """The export's manifest (``exporter.session.read_manifest``: its format_version checked)."""
    from ..exporter.session import read_manifest

    return read_manifest(export_dir)


def _metadata(manifest: dict, case: Case) -> TensorMetadata:
    dims = {"batch": case.batch, "seq": case.seq, "past": case.past}
    meta = TensorMetadata()
    for inp in manifest["inputs"]:
        shape = [dims[d] if isinstance(d, str) else d for d in inp["shape"]]
        meta.add(inp["name"], np.dtype(inp["dtype"]), shape)
    return meta


def _end_to_end_rows(case: Case, ort_out: dict, torch_out: dict, model, taps: GraphTaps,
                     tolerance: float | None) -> list[Row]:
    formats = set().union(*layer_formats(taps).values()) if taps.ops else {"none"}
    depth = {f"{s.output}.{i}": (j + 1, i)
             for j, i in enumerate(model.layer_ids) for s in model.states[i]}
    rows = []
    for name, ref in torch_out.items():
        got = ort_out[name]
        d, layer = depth.get(name, (len(model.layer_ids) + 1, None))
        bound = tolerance if tolerance is not None else tolerances.end_to_end_bound(formats, d)
        row = Row(case.name, name, metrics.rel_error(got, ref), metrics.max_abs(got, ref), bound, layer)
        if name == "logits":
            row.cosine, row.top1, row.kl = metrics.cosine(got, ref), metrics.top1_agreement(got, ref), \
                metrics.kl_divergence(got, ref)
        rows.append(row)
    return rows


def _resolve_checkpoint(export_dir: Path, manifest: dict, checkpoint):
    if isinstance(checkpoint, ModelSession):
        return checkpoint
    if checkpoint is None:
        recorded = (manifest.get("model") or {}).get("checkpoint_path")
        if not recorded:
            raise InputError(f"{export_dir}: manifest.json records no checkpoint path; pass --checkpoint PATH")
        checkpoint = Path(recorded)
        if not checkpoint.exists():
            raise InputError(f"{export_dir}: the checkpoint it was exported from, {checkpoint} (manifest.json), "
                             "is not there any more; pass --checkpoint PATH")
    return Path(checkpoint)


def _feed(manifest: dict, case: Case, seed: int) -> dict:
    """The case's seeded inputs (Polygraphy's DataLoader), the same for both runtimes."""
    loader = DataLoader(seed=seed, iterations=1, input_metadata=_metadata(manifest, case),
                        val_range={"input_ids": (0, manifest["model"]["vocab_size"] - 1),
                                   "position_ids": (0, 4096), "": (-1.0, 1.0)})
    return loader[0]


def compare_export(export_dir: Path, checkpoint: Path | ModelSession | None = None, cases=DEFAULT_CASES,
                   tolerance: float | None = None, seed: int = 0, progress=None,
                   streaming: bool = True) -> Report:
    """Run both runtimes on seeded inputs; check every op, every layer (teacher-forced) and every
    output end to end. ``tolerance`` replaces the end-to-end bounds.

    ``streaming`` (the default): segment by segment, one layer's weights in memory at a time
    (streaming.py), where the graph's residual stream can be followed; otherwise, or with False,
    one run of the whole graph. ``progress``: an object with ``start(total)`` and ``update(name)``
    (and ``close()``), told of each segment done. ``checkpoint``: its path (default: the one in
    manifest.json), or a session open on it (the main job's: its headers are not read again)."""
    export_dir = Path(export_dir)
    manifest = load_manifest(export_dir)
    checkpoint = _resolve_checkpoint(export_dir, manifest, checkpoint)
    graph = load_graph(export_dir / "model.onnx")
    contract.check_model(graph, str(export_dir / "model.onnx"))  # an older op contract: re-export
    taps = find_taps(graph.graph)
    feeds = {case.name: _feed(manifest, case, seed) for case in cases}
    logits: dict = {}  # case -> ONNX Runtime's logits (the static-vs-dynamic report)
    report = Report()
    if taps.reason:
        report.notes.append(f"per-layer check skipped: {taps.reason}")
    streamed = streaming and not taps.reason and _compare_streaming(
        export_dir, checkpoint, manifest, graph, taps, cases, feeds, tolerance, progress, report, logits)
    if not streamed:
        _compare_whole_graph(export_dir, checkpoint, manifest, graph, taps, cases, feeds, tolerance, report, logits)
    if (manifest.get("activation_scales") or {}).get("mode") == "static":
        report.static_vs_dynamic = _static_vs_dynamic(checkpoint, manifest, cases, feeds, logits)
        report.notes.append("static activation scales (manifest.json activation_scales): the logits are also "
                            "compared with the same model on dynamic scales (static_vs_dynamic; not judged)")
    return report


def _run_with_progress(progress, total: int, run):
    """``run(update)`` with ``progress`` (None: no progress) started for ``total`` steps and closed
    afterwards, where it can be."""
    if progress is None:
        return run(None)
    progress.start(total)
    try:
        return run(progress.update)
    finally:
        if hasattr(progress, "close"):
            progress.close()


def _compare_streaming(export_dir, checkpoint, manifest, graph, taps, cases, feeds, tolerance, progress,
                       report: Report, logits: dict) -> bool:
    import torch

    from ..exporter.export import DTYPES
    from .segments import plan_segments
    from .streaming import run_segments

    session = open_export_model(checkpoint, manifest)
    with torch.device("meta"):  # a skeleton: each part is loaded when its segment runs
        model = session.model(DTYPES[manifest["dtype"]], manifest["layers"]).eval()
    states = {i: [f"{s.output}.{i}" for s in model.states[i]] for i in model.layer_ids}
    segments = plan_segments(graph.graph, taps, states)
    if isinstance(segments, str):
        report.notes.append(f"compared as one graph: {segments}")
        return False
    run = _run_with_progress(progress, len(segments), lambda update: run_segments(
        export_dir, graph, segments, taps, model, session.source, cases, feeds, update))
    for case in cases:
        report.rows += _end_to_end_rows(case, run.ort_out[case.name], run.torch_out[case.name], model, taps,
                                        tolerance)
        logits[case.name] = run.ort_out[case.name]["logits"]
    for case in cases:
        report.ops += run.ops[case.name]
    for case in cases:
        report.layers += run.layers[case.name]
    report.run = {"mode": "streamed", "segments": len(segments), "resident_layers_peak": run.resident_peak}
    return True


def _compare_whole_graph(export_dir, checkpoint, manifest, graph, taps, cases, feeds, tolerance,
                         report: Report, logits: dict) -> Report:
    """One ONNX Runtime run of the whole verification graph per case and the whole PyTorch model
    (one thread each, as streamed: float32 sums then run in the same order, so both give the same
    numbers)."""
    from ..ops.w4a16 import one_thread

    model = torch_model_factory(export_dir, checkpoint, manifest)().eval()
    ort_runner = OnnxrtRunner(lambda: reference_session(graph, threads=1, base_dir=export_dir,
                                                        extra_outputs=taps.values(), prepack=False),
                              name="onnxrt-reference")
    with one_thread():
        return _run_whole_graph(model, ort_runner, manifest, taps, cases, feeds, tolerance, report, logits)


def _run_whole_graph(model, ort_runner, manifest, taps, cases, feeds, tolerance, report: Report,
                     logits: dict) -> Report:
    for case in cases:
        meta = _metadata(manifest, case)
        torch_runner = TorchRunner(lambda: model, meta, name="torch-reference")
        feed = feeds[case.name]
        results = Comparator.run([ort_runner, torch_runner], data_loader=[feed])
        ort_out, torch_out = dict(results[0][1][0].items()), dict(results[1][1][0].items())
        report.rows += _end_to_end_rows(case, ort_out, torch_out, model, taps, tolerance)
        # An op may read a graph input (the GDN ops' states): the feed is among its values.
        report.ops += check_ops(model, taps, {**feed, **ort_out}, case.name)
        report.layers += check_layers(model, taps, ort_out, feed, case.name, case.past)
        logits[case.name] = ort_out["logits"]
    report.run = {"mode": "whole-graph", "segments": 1, "resident_layers_peak": len(model.layer_ids)}
    return report


def _static_vs_dynamic(checkpoint, manifest: dict, cases, feeds: dict, logits: dict) -> list[dict]:
    """The export's logits (ONNX Runtime, ``logits`` by case) against the same model with dynamic
    activation scales (PyTorch), per case, run layer by layer like the streamed comparison: one
    decoder layer's weights in memory at a time."""
    import torch

    from ..exporter.export import DTYPES

    session = open_export_model(checkpoint, manifest, static_scales=False)
    with torch.device("meta"):
        model = session.model(DTYPES[manifest["dtype"]], manifest["layers"]).eval()
    source = session.source
    with torch.no_grad():
        model.load_part(source, "model.rotary_emb")
        model.load_part(source, "model.embed_tokens")
        streams = {}
        for c in cases:
            ids, pos = (torch.from_numpy(feeds[c.name][n]) for n in ("input_ids", "position_ids"))
            streams[c.name] = model.embed(ids, pos)
        model.free_part("model.embed_tokens")
        for i in model.layer_ids:
            path = f"model.layers.{i}"
            model.load_part(source, path)
            for c in cases:
                x, cos, sin = streams[c.name]
                states = [torch.from_numpy(np.ascontiguousarray(feeds[c.name][f"{s.name}.{i}"]))
                          for s in model.states[i]]
                streams[c.name] = (model.layer(i, x, cos, sin, states)[0], cos, sin)
            model.free_part(path)
        model.load_part(source, "model.norm")
        model.load_part(source, "lm_head")
        rows = []
        for c in cases:
            ref = model.head(streams[c.name][0]).float().numpy()
            got = logits[c.name]
            rows.append({"case": c.name, "rel_error": metrics.rel_error(got, ref), "cosine": metrics.cosine(got, ref),
                         "top1": metrics.top1_agreement(got, ref), "kl": metrics.kl_divergence(got, ref)})
    return rows
