"""A safetensors checkpoint's files, headers and config.json, read without torch: the main job's
up-front checks (``preflight``) run on these before torch is imported, and ``checkpoint.Checkpoint``
is built on them.

Invariants:
- Headers are untrusted: every number is checked against the file's real size before anything is
  allocated, so a hostile header cannot make the reader allocate more than the file holds.
- Every failure is a ``CheckpointError`` (or ``ConfigError``) naming the file (and tensor) and what
  was expected.
- ``nonfinite_tensor`` streams the data a bounded chunk at a time (numpy on the raw bits), so its
  memory does not grow with the checkpoint.
- Nothing here imports more than the standard library and numpy.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from ..errors import CheckpointError, ConfigError

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
# A safetensors header larger than this is refused before it is read (safetensors' own limit).
MAX_HEADER_BYTES = 100 * 1024 * 1024
# No real tensor has more dimensions or a larger dimension; refused before any arithmetic on them.
MAX_NDIM = 8
MAX_DIM = 1 << 48
# Bytes per element of each safetensors dtype the exporter reads.
ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
            "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
# Float dtypes: (unsigned view, the bits that are all ones exactly for NaN and inf (the exponent);
# F8_E4M3 has no inf and NaN is S.1111.111).
_NONFINITE = {"F64": ("<u8", 0x7FF0000000000000, 0x7FF0000000000000), "F32": ("<u4", 0x7F800000, 0x7F800000),
              "F16": ("<u2", 0x7C00, 0x7C00), "BF16": ("<u2", 0x7F80, 0x7F80),
              "F8_E4M3": ("u1", 0x7F, 0x7F), "F8_E5M2": ("u1", 0x7C, 0x7C)}
_CHUNK = 1 << 24  # bytes per read of the finite check


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def read_header(path: Path) -> tuple[dict, int]:
    """Parse and check a safetensors header without trusting its numbers.

    Returns the header and the absolute offset of the data section.
    """
    header, n, size = _parse_header(path)
    data_len = size - 8 - n
    spans = []
    for name, entry in header.items():
        if name != "__metadata__":
            start, end = _check_entry(f"{path}: tensor {name!r}", entry, data_len)
            spans.append((start, end, name))
    spans.sort()
    for (s0, e0, n0), (s1, e1, n1) in zip(spans, spans[1:]):
        if s1 < e0:
            raise CheckpointError(f"{path}: tensors {n0!r} and {n1!r} overlap in the file")
    return header, 8 + n


def _parse_header(path: Path) -> tuple[dict, int, int]:
    """(the header JSON object, its byte length, the file's size), the length checked against the
    size before the header is read."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise CheckpointError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
            (n,) = struct.unpack("<Q", raw)
            if n > MAX_HEADER_BYTES or n + 8 > size:
                raise CheckpointError(
                    f"{path}: corrupt safetensors header: it claims {n} header bytes in a file of {size} bytes"
                )
            text = f.read(n)
        header = json.loads(text)
    except CheckpointError:
        raise
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as e:
        raise CheckpointError(f"{path}: not a readable safetensors file ({type(e).__name__}: {e})"[:2000]) from e
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: corrupt safetensors header: expected a JSON object")
    if not isinstance(header.get("__metadata__", {}), dict):
        raise CheckpointError(f"{path}: corrupt safetensors header: '__metadata__' is not an object")
    return header, n, size


def _check_dtype(where: str, dtype) -> None:
    if not isinstance(dtype, str) or dtype not in ITEMSIZE:
        raise CheckpointError(
            f"{where}: unsupported dtype {dtype!r}"[:300] + f"; expected one of {', '.join(ITEMSIZE)}"
        )


def _check_shape(where: str, dtype, shape) -> None:
    _check_dtype(where, dtype)
    if not isinstance(shape, list) or len(shape) > MAX_NDIM or not all(_is_int(d) for d in shape):
        raise CheckpointError(f"{where}: malformed shape {shape!r}: expected a list of at most {MAX_NDIM} integers"[:400])
    if any(d < 0 for d in shape):
        raise CheckpointError(f"{where}: negative dimension in shape {shape}")
    if any(d > MAX_DIM for d in shape):
        raise CheckpointError(f"{where}: absurd shape {shape}: a dimension exceeds 2^48")


def _check_entry(where: str, entry, data_len: int) -> tuple[int, int]:
    """The [start, end) data span of one tensor's header entry, after checking its dtype, shape and
    offsets against the ``data_len`` bytes of the data section."""
    if not isinstance(entry, dict) or set(entry) - {"dtype", "shape", "data_offsets"}:
        raise CheckpointError(f"{where}: malformed header entry (expected dtype, shape, data_offsets): {entry!r}"[:500])
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    _check_shape(where, dtype, shape)
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) for o in offsets):
        raise CheckpointError(f"{where}: malformed data_offsets {offsets!r}: expected [start, end] integers"[:400])
    start, end = offsets
    _check_span(where, dtype, shape, start, end, data_len)
    return start, end


def _check_span(where: str, dtype: str, shape: list[int], start: int, end: int, data_len: int) -> None:
    """``CheckpointError`` unless [start, end) lies inside the ``data_len`` data bytes and holds
    exactly a ``dtype`` tensor of ``shape``; the message says when the file looks truncated."""
    numel = 1
    for d in shape:
        numel *= d
    nbytes = numel * ITEMSIZE[dtype]
    if 0 <= start <= end <= data_len and end - start == nbytes:
        return
    truncated = 0 <= start <= end and end - start == nbytes and end > data_len
    raise CheckpointError(
        f"{where}: data offsets [{start}, {end}) do not hold a {dtype} tensor of "
        f"shape {shape} ({nbytes} bytes) inside the {data_len} data bytes"
        + ("; the file ends early (truncated: an interrupted download or copy?), fetch it again"
           if truncated else "")
    )


def checkpoint_files(path: Path) -> tuple[Path, list[Path], Path | None]:
    """(root, safetensors files, index or None) of a .safetensors file, a checkpoint directory or a
    model.safetensors.index.json; the index's shards are checked to exist."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such file or directory")
    if path.is_dir():
        if (path / INDEX_NAME).exists():
            path = path / INDEX_NAME
        elif (path / SINGLE_NAME).exists():
            return path, [path / SINGLE_NAME], None
        else:
            files = sorted(path.glob("*.safetensors"))
            if not files:
                raise CheckpointError(
                    f"{path}: no {INDEX_NAME}, {SINGLE_NAME} or *.safetensors file in this directory"
                )
            return path, files, None
    if path.name.endswith(".index.json"):
        weight_map = read_index(path)
        return path.parent, sorted({path.parent / f for f in weight_map.values()}), path
    if path.suffix == ".safetensors":
        return path.parent, [path], None
    raise CheckpointError(
        f"{path}: expected a .safetensors file, a checkpoint directory or a "
        f"{INDEX_NAME}, found a file of another kind"
    )


def read_headers(files: list[Path]) -> dict[Path, tuple[dict, int]]:
    """Each file's checked header and data offset (read_header), read once for a whole job:
    ``nonfinite_tensor`` and ``Checkpoint`` take this instead of reading them again."""
    return {file: read_header(file) for file in files}


def header_of(file: Path, headers: dict[Path, tuple[dict, int]] | None) -> tuple[dict, int]:
    """``file``'s header and data offset: from ``headers`` (read_headers) where it is there, else read."""
    return headers[file] if headers and file in headers else read_header(file)


def has_nonfinite(values, dtype: str) -> bool:
    """Whether ``values`` (bytes or a uint8 array, the raw data of a ``dtype`` tensor) holds a NaN or
    an infinity: its exponent bits all set (``_NONFINITE``), one masked compare per element."""
    import numpy as np

    view, mask, bad = _NONFINITE[dtype]
    return bool(((np.frombuffer(values, dtype=view) & mask) == bad).any())


def nonfinite_tensor(files: list[Path], wanted=lambda name: True,
                     headers: dict[Path, tuple[dict, int]] | None = None) -> tuple[Path, str] | None:
    """The first (file, tensor) whose float data holds a NaN or an infinity, else None, among the
    tensors ``wanted(name)`` accepts: the raw bytes streamed through numpy, ``_CHUNK`` bytes at a
    time (no torch, no tensor-sized buffer). ``headers``: read_headers' result, where already read."""
    import numpy as np

    for file in files:
        header, data_start = header_of(file, headers)
        entries = sorted(((e["data_offsets"], e["dtype"], name) for name, e in header.items()
                          if name != "__metadata__" and e["dtype"] in _NONFINITE and wanted(name)))
        with file.open("rb") as f:
            for (start, end), dtype, name in entries:
                step = _CHUNK - _CHUNK % ITEMSIZE[dtype]
                f.seek(data_start + start)
                for pos in range(start, end, step):
                    raw = f.read(min(step, end - pos))
                    if len(raw) % ITEMSIZE[dtype]:
                        raise CheckpointError(f"{file}: tensor {name!r}: the file ends inside its data (truncated?)")
                    if has_nonfinite(raw, dtype):
                        return file, name
    return None


def read_index(index: Path) -> dict[str, str]:
    """The index's weight map (tensor -> shard file name), checked: every shard a plain file name
    in the index's directory that exists."""
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        raise CheckpointError(f"{index}: not a readable safetensors index (expected a 'weight_map' object): {e}") from e
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index}: 'weight_map' must be a non-empty object of tensor name -> shard file")
    for name, shard in weight_map.items():
        if not _is_plain_file_name(shard):
            raise CheckpointError(
                f"{index}: tensor {name!r}: shard {shard!r} is not a file name in {index.parent} "
                "(paths outside the checkpoint directory are refused)"
            )
    for shard in sorted(set(weight_map.values())):
        if not (index.parent / shard).is_file():
            raise CheckpointError(f"{index}: names shard {shard}, which does not exist in {index.parent}")
    return weight_map


def _is_plain_file_name(shard) -> bool:
    """Whether an index's shard entry is a non-empty string naming a file in the index's directory."""
    return isinstance(shard, str) and bool(shard) and Path(shard).name == shard and shard not in (".", "..")


def read_json_object(path: Path, error: type[Exception] = ConfigError) -> dict:
    """The JSON object in ``path``; ``error`` (a one-line message naming the file) when it is not
    readable JSON or not an object."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise error(f"{path}: not readable JSON ({e})") from e
    if not isinstance(value, dict):
        raise error(f"{path}: expected a JSON object")
    return value


def read_config(root: Path) -> dict:
    path = root / "config.json"
    if not path.exists():
        raise ConfigError(f"{path}: missing; a checkpoint needs its config.json beside the weights")
    return read_json_object(path)
