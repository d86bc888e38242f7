"""The comparison run segment by segment (segments.py: the embedding, each decoder layer, the head),
so memory holds one segment's weights whatever the depth.

For each segment, in order: ONNX Runtime runs it for every case on the values earlier segments
gave (its session reads only the segment's weights from the export's data file), then the PyTorch
model loads the same part from the checkpoint (``CausalLM.load_part``), runs it end to end on its
own stream, checks the segment's ops and layer teacher-forced on ONNX Runtime's values
(teacher_forcing.py), and releases it. Every quantized weight is expanded once per segment
(``ops.weight_cache.reuse``), shared by both runtimes where the tensors are equal. The next layer's
PyTorch weights are read and quantized on a second thread while this one computes.

Invariants: the same checks, bounds and rows, in the same order, as the whole-graph comparison
(accuracy.py; tested equal on the small models); values no later segment reads are dropped; at
most two decoder layers' PyTorch weights (this one, the next one being read) are resident; no kept
value is a view of ONNX Runtime's memory (a session's arena is freed with its segment).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..ops import weight_cache
from ..ops.w4a16 import one_thread
from ..ops.ort import reference_session
from .segments import Segment, segment_model, value_infos
from .taps import GraphTaps
from .teacher_forcing import LayerRow, OpRow, check_layers, check_ops


@dataclass
class Streamed:
    """What the run leaves for the report: per case, both runtimes' graph outputs and the checks."""

    ort_out: dict[str, dict] = field(default_factory=dict)  # case -> output name -> array
    torch_out: dict[str, dict] = field(default_factory=dict)  # case -> output name -> array (model order)
    ops: dict[str, list[OpRow]] = field(default_factory=dict)
    layers: dict[str, list[LayerRow]] = field(default_factory=dict)
    resident_peak: int = 0  # most decoder layers holding PyTorch weights at once


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()


def _part_paths(seg: Segment) -> list[str]:
    if seg.name == "embedding":
        return ["model.embed_tokens"]
    if seg.layer is not None:
        return [f"model.layers.{seg.layer}"]
    return ["model.norm", "lm_head"]


class _Parts:
    """The PyTorch parts of the segments, each loaded once, the next decoder layer on a thread."""

    def __init__(self, model, source, segments: list[Segment]):
        self.model, self.source, self.segments = model, source, segments
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compare-load")
        self.pending: dict[int, Future] = {}
        self.peak = 0
        self.lock = threading.Lock()

    def _load(self, s: int) -> None:
        for path in _part_paths(self.segments[s]):
            self.model.load_part(self.source, path)
        with self.lock:
            self.peak = max(self.peak, self.resident_layers())

    def resident_layers(self) -> int:
        """Decoder layers of the model whose buffers are in memory now (not on ``meta``)."""
        return sum(any(not b.is_meta for b in self.model.model.layers[str(i)].buffers())
                   for i in self.model.layer_ids)

    def get(self, s: int) -> None:
        """Segment ``s``'s parts loaded (and the next decoder layer's started)."""
        future = self.pending.pop(s, None)
        if future is not None:
            future.result()
        else:
            self._load(s)
        nxt = s + 1
        # Only decoder layers are read ahead: the embedding and the head are the largest tensors.
        if nxt < len(self.segments) and self.segments[nxt].layer is not None and nxt not in self.pending:
            self.pending[nxt] = self.pool.submit(self._load, nxt)

    def free(self, s: int) -> None:
        for path in _part_paths(self.segments[s]):
            self.model.free_part(path)

    def close(self) -> None:
        for future in self.pending.values():
            future.cancel()
        self.pool.shutdown(wait=True)


def run_segments(export_dir: Path, graph_model, segments: list[Segment], taps: GraphTaps, model, source,
                 cases, feeds: dict[str, dict], progress: Callable[[str], None] | None = None,
                 ) -> Streamed:
    """Run every segment in ONNX Runtime and PyTorch for every case (see the module docstring)."""
    infos = value_infos(graph_model)
    outputs = [o.name for o in graph_model.graph.output]
    last_use = _last_use(segments)
    out = Streamed()
    ort_vals = {c.name: {} for c in cases}
    x_torch, rope, presents = {}, {}, {c.name: {} for c in cases}
    for c in cases:
        out.ops[c.name], out.layers[c.name] = [], []
    model.load_part(source, "model.rotary_emb")
    parts = _Parts(model, source, segments)
    try:
        # torch on one thread: the loader thread quantizes on one core, this one computes on the
        # other, and float32 sums keep one order (the whole-graph run does the same).
        with one_thread():
            for s, seg in enumerate(segments):
                with weight_cache.reuse():
                    _ort_segment_all(export_dir, segment_model(graph_model, seg, infos), seg, cases, ort_vals,
                                     feeds)
                    parts.get(s)
                    for c in cases:
                        _torch_segment(model, seg, taps, c, feeds[c.name], ort_vals[c.name], x_torch, rope,
                                       presents[c.name], out)
                    parts.free(s)
                for c in cases:
                    _drop_read(ort_vals[c.name], last_use, s, outputs)
                if progress is not None:
                    progress(seg.name)
    finally:
        parts.close()
    out.resident_peak = parts.peak
    _keep_outputs(out, cases, ort_vals, presents, outputs, model.output_names())
    return out


def _keep_outputs(out: Streamed, cases, ort_vals: dict, presents: dict, outputs: list[str],
                  torch_outputs: list[str]) -> None:
    """Per case, the graph's outputs from ONNX Runtime and the model's from PyTorch."""
    for c in cases:
        out.ort_out[c.name] = {n: ort_vals[c.name][n] for n in outputs}
        out.torch_out[c.name] = {n: presents[c.name][n] for n in torch_outputs}


def _last_use(segments: list[Segment]) -> dict[str, int]:
    """The last segment reading each value: a value is dropped after it."""
    last_use = {}
    for s, seg in enumerate(segments):
        for v in seg.inputs:
            last_use[v] = s
    return last_use


def _ort_segment_all(export_dir: Path, seg_model, seg: Segment, cases, ort_vals: dict, feeds: dict) -> None:
    """Run one segment in ONNX Runtime for every case; its session is gone when this returns."""
    session = reference_session(seg_model, threads=1, base_dir=export_dir, prepack=False)
    for c in cases:
        _ort_segment(session, seg, ort_vals[c.name], feeds[c.name])


def _ort_segment(session, seg: Segment, store: dict, feed: dict) -> None:
    """Run one segment in ONNX Runtime for one case, its inputs from ``store`` or the feed."""
    got = session.run(list(seg.outputs), {v: store[v] if v in store else feed[v] for v in seg.inputs})
    # Copies: ONNX Runtime's arrays are views of its buffers, and one kept array holds its session's
    # whole CPU arena (the segment's activations), so the outputs kept to the end (the presents,
    # logits) held one arena per segment: +22 MiB a layer at 32B (benchmarks/results/compare-rss-*).
    store.update(zip(seg.outputs, (np.array(g, copy=True) for g in got)))


def _drop_read(store: dict, last_use: dict[str, int], s: int, outputs: list[str]) -> None:
    """Drop the values no segment after ``s`` reads (the graph's outputs stay)."""
    for v in [v for v in store if last_use.get(v, -1) <= s and v not in outputs]:
        del store[v]


@torch.no_grad()
def _torch_segment(model, seg: Segment, taps: GraphTaps, case, feed: dict, values: dict, x_torch: dict,
                   rope: dict, presents: dict, out: Streamed) -> None:
    """The PyTorch side of one segment for one case: end to end on its own stream, and the
    teacher-forced checks on ONNX Runtime's ``values``."""
    name = case.name
    if seg.name == "embedding":
        ids, pos = (torch.from_numpy(feed[n]) for n in ("input_ids", "position_ids"))
        x_torch[name], *rope[name] = model.embed(ids, pos)
        return
    ops = GraphTaps(ops=[t for t in taps.ops if t.layer == seg.layer])
    if seg.layer is not None:
        i = seg.layer
        states = [torch.from_numpy(np.ascontiguousarray(feed[f"{s.name}.{i}"])) for s in model.states[i]]
        x_torch[name], *new = model.layer(i, x_torch[name], *rope[name], states)
        for spec, t in zip(model.states[i], new):
            presents[f"{spec.output}.{i}"] = _numpy(t)
        out.ops[name] += check_ops(model, ops, {**feed, **values}, name)  # the GDN ops read the state inputs
        layer_taps = GraphTaps(ops=ops.ops, layers={i: taps.layers[i]})
        out.layers[name] += check_layers(model, layer_taps, values, feed, name, case.past)
    else:
        presents["logits"] = _numpy(model.head(x_torch[name]))
        if model.hidden_output:
            presents["hidden_states"] = _numpy(model.model.norm(x_torch[name]))
        out.ops[name] += check_ops(model, ops, values, name)
