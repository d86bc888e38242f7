"""The external-data files of an ONNX graph, checked against the graph's references before any
weight is read: each file is there and long enough for every ``offset + length`` it is cited with.

A truncated or damaged ``model.onnx.data`` (a copy cut short, a full disk) is then refused in one
line naming the file, its size and the tensor past its end, instead of ONNX's or ONNX Runtime's
traceback deep in a load ("External data length ... exceeds"). Used by ``compare``
(``ops.ort.load_graph``), ``build`` (``engines.plan.resolve_source``) and ``inspect``.

Invariants: it reads the graph proto only (loaded with ``load_external_data=False``) and one
``stat`` per file; importing it imports neither torch nor onnx.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError

_EXTERNAL = 1  # onnx.TensorProto.EXTERNAL


def _initializers(graph):
    """Every initializer of ``graph`` and of its subgraphs (If/Loop bodies)."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                yield from _initializers(sub)


def external_data_files(model, onnx_path: Path) -> list[Path]:
    """The external-data files ``model`` (read from ``onnx_path`` without its weights) cites, in
    order; ``InputError`` when one is missing or shorter than a tensor's ``offset + length``."""
    onnx_path = Path(onnx_path)
    ends: dict[Path, tuple[int, str]] = {}  # file -> the furthest byte cited, and by which tensor
    for tensor in _initializers(model.graph):
        if tensor.data_location != _EXTERNAL:
            continue
        data, end = _cited_range(tensor, onnx_path)
        if data not in ends or end > ends[data][0]:
            ends[data] = (end, tensor.name)
    for data, (end, name) in ends.items():
        _check_covers(data, end, name, onnx_path)
    return list(ends)


def _cited_range(tensor, onnx_path: Path) -> tuple[Path, int]:
    """The file an external ``tensor`` cites and the byte its data ends at (``offset + length``)."""
    ext = {e.key: e.value for e in tensor.external_data}
    if "location" not in ext:
        raise InputError(f"{onnx_path}: initializer {tensor.name} has external data but no location; "
                         "the graph is damaged: re-export it")
    try:
        end = int(ext.get("offset", 0)) + int(ext.get("length", 0))
    except ValueError:
        raise InputError(f"{onnx_path}: initializer {tensor.name}: external data offset/length "
                         f"{ext.get('offset')!r}/{ext.get('length')!r} are not numbers; re-export it") from None
    return onnx_path.parent / ext["location"], end


def _check_covers(data: Path, end: int, name: str, onnx_path: Path) -> None:
    """``InputError`` unless the file ``data`` exists and holds at least ``end`` bytes."""
    try:
        size = data.stat().st_size
    except FileNotFoundError:
        raise InputError(f"{onnx_path}: initializer {name}: external data {data} is missing") from None
    if size < end:
        raise InputError(
            f"{data}: {size} bytes, but {onnx_path.name} needs {end} (initializer {name} ends there): "
            "the weights file is truncated or damaged; copy it again or re-export")
