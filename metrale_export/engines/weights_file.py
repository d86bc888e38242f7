"""The lowered graph's weights file: the one copy of the weights that every engine of a build uses.

A build lowers its source graph without loading the source's weights into Python: the source is
read as a header (``onnx.load(..., load_external_data=False)``), each source tensor is read from
its file when the lowering uses it and dropped with the node it belongs to (``attach``), every
tensor the lowering makes is appended to the weights file as soon as it is made (``constant``),
and the source tensors the lowered graph keeps (embedding, norms, lm_head) are copied in at the
end in bounded chunks (``adopt``). The lowered ONNX file is then a small header whose
initializers are external data in ``<graph>.onnx.data``: ONNX Runtime, Polygraphy and TensorRT's
parser (and its refitter) read it from its path.

``shared_inputs_graph`` writes the graph an engine with shared weights is built from: the same
header with every external initializer turned into a graph input of the same name, dtype and shape
(docs/engines.md, "Engine weights"). TensorRT then parses no weights at all.

Invariants: each tensor's bytes are written once, at an offset aligned to ``ALIGN``, and the file
holds no bytes that no tensor of the lowered graph names (but the alignment padding) (so a runtime
may map the file and hand out aligned pointers); ``sha256`` is over the whole file as written;
tensors below ``INLINE_BYTES`` stay in the header; nothing here imports TensorRT.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper, numpy_helper
from onnx.external_data_helper import uses_external_data
from onnx_graphsurgeon.ir.tensor import LazyValues

ALIGN = 64
INLINE_BYTES = 1024  # smaller tensors stay in the graph (shapes, axes, scalars): build-time constants
CHUNK_BYTES = 64 << 20  # copies and conversions of source tensors go through buffers of this size


def _external(tensor: onnx.TensorProto) -> dict:
    return {e.key: e.value for e in tensor.external_data}


def read_array(tensor: onnx.TensorProto, base_dir: Path) -> np.ndarray:
    """A tensor's values, from its external file (relative to ``base_dir``) or its raw data; the
    tensor itself is not changed. The file is read here rather than by onnx, whose reader refuses
    a data file with several hard links (an export shared by linking it elsewhere)."""
    if not uses_external_data(tensor):
        return numpy_helper.to_array(tensor)
    loaded = onnx.TensorProto()
    loaded.CopyFrom(tensor)  # the header only: no data to copy
    del loaded.external_data[:]
    loaded.data_location = onnx.TensorProto.DEFAULT
    loaded.raw_data = b"".join(c.tobytes() for c in iter_chunks(tensor, base_dir, np.uint8))
    return numpy_helper.to_array(loaded)


class FileValues(LazyValues):
    """gs's lazily loaded values for a tensor stored in a file beside its graph, not the cwd."""

    def __init__(self, tensor: onnx.TensorProto, base_dir: Path):
        super().__init__(tensor)
        self.base_dir = Path(base_dir)

    def load(self) -> np.ndarray:
        return np.array(read_array(self.tensor, self.base_dir))


def attach(graph: gs.Graph, base_dir: Path) -> None:
    """Make every externally stored constant of ``graph`` load from its file under ``base_dir``.
    gs caches loaded values on the constant, so they live only as long as the node that uses them."""
    for t in graph.tensors().values():
        values = getattr(t, "_values", None)
        if isinstance(t, gs.Constant) and type(values) is LazyValues and uses_external_data(values.tensor):
            t._values = t._lazy = FileValues(values.tensor, base_dir)


def iter_chunks(tensor: onnx.TensorProto, base_dir: Path, dtype, chunk_bytes: int = CHUNK_BYTES):
    """The raw values of an external tensor as flat arrays of ``dtype``, ``chunk_bytes`` at a time."""
    info = _external(tensor)
    path = Path(base_dir) / info["location"]
    offset, length = int(info.get("offset", 0)), int(info["length"])
    step = max(1, chunk_bytes // np.dtype(dtype).itemsize)
    with open(path, "rb") as f:
        f.seek(offset)
        left = length // np.dtype(dtype).itemsize
        while left:
            n = min(step, left)
            out = np.fromfile(f, dtype=dtype, count=n)
            if out.size != n:
                raise OSError(f"{path}: tensor {tensor.name}: expected {length} bytes at offset {offset}, "
                              f"the file ends first")
            left -= n
            yield out


class WeightsFile:
    """The external data of one lowered graph, written as the graph is lowered.

    ``path`` is the data file (``<graph>.onnx.data``); the header that names it must be saved in
    the same directory. ``source_dir`` is where the source graph's external data lives.
    """

    def __init__(self, path: Path, source_dir: Path):
        self.path, self.source_dir = Path(path), Path(source_dir)
        self.location = self.path.name
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "wb")
        self._hash = hashlib.sha256()
        self.offset = 0
        self.count = 0
        self.inline_bytes = INLINE_BYTES
        # float32 tensors the lowering makes wait in a scratch file beside this one: a bf16-exact one
        # is then written here once, in bfloat16 (weights.float_weights_in_bf16), and the rest are
        # moved in by ``adopt``. Written here directly, a converted table stayed as dead bytes (the
        # 8B model's transposed float32 lm_head: 2.37 GB of an 8.9 GB weights file).
        self.scratch_path = self.path.with_name(self.path.name + ".scratch")
        self._scratch = None
        self._scratch_offset = 0

    def attach(self, graph: gs.Graph) -> None:
        """``attach`` for the source graph this file's tensors come from."""
        attach(graph, self.source_dir)

    @staticmethod
    def release(tensors) -> None:
        """Drop the loaded values of source constants once their node is lowered. gs caches them
        on the constant, and a constant sits in a reference cycle with its own consumer list, so
        without this they would wait for a full garbage collection (at 8B: gigabytes)."""
        for t in tensors:
            values = getattr(t, "_values", None)
            lazy = getattr(t, "_lazy", None)
            if isinstance(t, gs.Constant) and lazy is not None and values is not lazy:
                t._values = lazy

    def chunks(self, tensor: onnx.TensorProto, dtype):
        """``iter_chunks`` of an external tensor, from the source's files or from this file (a
        tensor the lowering already wrote here, such as an expansion's float weight: flushed
        first, so that what it reads is on disk)."""
        location = _external(tensor).get("location")
        if location == self.location:
            self._file.flush()
            return iter_chunks(tensor, self.path.parent, dtype)
        if location == self.scratch_path.name:
            self._scratch.flush()
            return iter_chunks(tensor, self.path.parent, dtype)
        return iter_chunks(tensor, self.source_dir, dtype)

    # -- writing --
    def _write(self, data) -> None:
        self._file.write(data)
        self._hash.update(data)
        self.offset += len(data) if isinstance(data, (bytes, bytearray)) else memoryview(data).nbytes

    def _begin(self, tensor: onnx.TensorProto) -> int:
        pad = -self.offset % ALIGN
        if pad:
            self._write(b"\0" * pad)
        return self.offset

    def _point(self, tensor: onnx.TensorProto, start: int) -> None:
        _point_at(tensor, self.location, start, self.offset - start)
        self.count += 1

    def write_tensor(self, tensor: onnx.TensorProto) -> onnx.TensorProto:
        """Move an in-memory tensor's raw data into the file; ``tensor`` then points there (its
        arena keeps the bytes: for tensors that were in memory already, small sources)."""
        start = self._begin(tensor)
        self._write(tensor.raw_data)
        self._point(tensor, start)
        return tensor

    def write_chunks(self, tensor: onnx.TensorProto, chunks) -> onnx.TensorProto:
        """Write ``tensor``'s values from an iterable of arrays (its raw layout, in order)."""
        start = self._begin(tensor)
        for c in chunks:
            self._write(np.ascontiguousarray(c).tobytes())
        self._point(tensor, start)
        return tensor

    def constant(self, name: str, array: np.ndarray) -> gs.Constant:
        """A gs constant for a tensor the lowering made, its bytes already on disk: in this file, or
        for float32 in the scratch file until ``adopt``."""
        # A fresh header proto: protobuf (upb) keeps a cleared raw_data's bytes in the message's
        # arena for as long as the message lives, so a proto that ever held the data would keep it.
        full = numpy_helper.from_array(np.asarray(array), name)
        proto = onnx.TensorProto(name=name, data_type=full.data_type, dims=list(full.dims))
        if full.data_type == onnx.TensorProto.FLOAT:
            if self._scratch is None:
                self._scratch = open(self.scratch_path, "wb")
            _point_at(proto, self.scratch_path.name, self._scratch_offset, len(full.raw_data))
            self._scratch.write(full.raw_data)
            self._scratch_offset += len(full.raw_data)
        else:
            start = self._begin(proto)
            self._write(full.raw_data)
            self._point(proto, start)
        del full
        return gs.Constant(name, FileValues(proto, self.path.parent))

    def adopt(self, model: onnx.ModelProto) -> None:
        """Bring every initializer of ``model`` that is not yet in this file and not small into it:
        external source tensors are copied in chunks, in-memory ones moved."""
        for t in initializers(model.graph):
            if uses_external_data(t):
                if _external(t).get("location") == self.location:
                    continue
                self.write_chunks(t, self.chunks(t, np.uint8))
            elif t.HasField("raw_data") and len(t.raw_data) >= INLINE_BYTES:
                self.write_tensor(t)
            elif not t.HasField("raw_data") and _typed_bytes(t) >= INLINE_BYTES:
                t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t), t.name))
                self.write_tensor(t)

    def close(self) -> dict:
        """Flush and sync the file; its ``file`` name, ``bytes``, ``sha256`` and ``tensors``."""
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        self._drop_scratch()
        return {"file": self.location, "bytes": self.offset, "sha256": self._hash.hexdigest(),
                "tensors": self.count}

    def discard(self) -> None:
        if not self._file.closed:
            self._file.close()
        self.path.unlink(missing_ok=True)
        self._drop_scratch()

    def _drop_scratch(self) -> None:
        if self._scratch is not None and not self._scratch.closed:
            self._scratch.close()
        self.scratch_path.unlink(missing_ok=True)


def _point_at(tensor: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    """Make ``tensor`` external data at ``offset`` (``length`` bytes) of ``location``, its raw data dropped."""
    tensor.ClearField("raw_data")
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        tensor.external_data.append(onnx.StringStringEntryProto(key=key, value=value))
    tensor.data_location = onnx.TensorProto.EXTERNAL


def _typed_bytes(t: onnx.TensorProto) -> int:
    """Bytes of a tensor kept in typed fields (float_data, int64_data, ...), roughly."""
    return sum(len(getattr(t, f)) * 4 for f in ("float_data", "int32_data")) + \
        sum(len(getattr(t, f)) * 8 for f in ("int64_data", "double_data", "uint64_data"))


def initializers(graph: onnx.GraphProto):
    """Every initializer of ``graph`` and of its subgraphs (If, Loop, Scan bodies)."""
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                yield from initializers(g)


def save_header(model: onnx.ModelProto, path: Path) -> None:
    """Write a graph whose large tensors are external (no data is written or read)."""
    Path(path).write_bytes(model.SerializeToString())


def shared_inputs_graph(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of the lowered header in which every external initializer of the main graph is a
    graph input (same name, dtype, shape): the engine then binds the weights instead of holding
    them. Returns the graph and the names of those inputs, in initializer order."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    names, kept = [], []
    for t in graph.initializer:
        if uses_external_data(t):
            graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
            names.append(t.name)
        else:
            kept.append(t)
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return out, names
