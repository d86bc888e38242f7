"""Read safetensors checkpoints lazily: a file with config.json beside it, a directory, or a sharded
``model.safetensors.index.json``.

Invariants:
- Only headers are read up front; a tensor's data is read when ``get`` asks for it, one at a time,
  with plain positioned reads into a buffer of the header's size (no memory map, so the pages of a
  shard do not stay resident: peak memory is the largest tensor, not the largest shard).
- Headers are untrusted: every number is checked against the file's real size before anything is
  allocated, so a hostile header cannot make the reader allocate more than the file holds.
- Every failure is a ``CheckpointError`` naming the file (and tensor) and what was expected; no
  other exception escapes ``open`` or ``get`` for any file content.
- Shapes and dtypes come from headers, so they can be validated before any data is read.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import CheckpointError, ConfigError

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
# A safetensors header larger than this is refused before it is read (safetensors' own limit).
MAX_HEADER_BYTES = 100 * 1024 * 1024
# No real tensor has more dimensions or a larger dimension; refused before any arithmetic on them.
MAX_NDIM = 8
MAX_DIM = 1 << 48

_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    nbytes: int
    offset: int = 0  # absolute byte offset of the data in ``file``


def all_finite(t: torch.Tensor, chunk: int = 1 << 22) -> bool:
    """Whether every element of ``t`` is finite, checked a slice at a time (``torch.isfinite`` of a
    whole [151936, 4096] bf16 embedding widened to float32 costs about 6 GiB of temporaries)."""
    if not t.dtype.is_floating_point:
        return True
    flat = t.reshape(-1)
    for i in range(0, flat.numel(), chunk):
        if not bool(torch.isfinite(flat[i:i + chunk]).all()):
            return False
    return True


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _read_header(path: Path) -> tuple[dict, int]:
    """Parse and check a safetensors header without trusting its numbers.

    Returns the header and the absolute offset of the data section.
    """
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
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: corrupt safetensors header: '__metadata__' is not an object")
    data_len = size - 8 - n
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        where = f"{path}: tensor {name!r}"
        if not isinstance(entry, dict) or set(entry) - {"dtype", "shape", "data_offsets"}:
            raise CheckpointError(f"{where}: malformed header entry (expected dtype, shape, data_offsets): {entry!r}"[:500])
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in _DTYPES:
            raise CheckpointError(
                f"{where}: unsupported dtype {dtype!r}"[:300] + f"; expected one of {', '.join(_DTYPES)}"
            )
        if not isinstance(shape, list) or len(shape) > MAX_NDIM or not all(_is_int(d) for d in shape):
            raise CheckpointError(f"{where}: malformed shape {shape!r}: expected a list of at most {MAX_NDIM} integers"[:400])
        if any(d < 0 for d in shape):
            raise CheckpointError(f"{where}: negative dimension in shape {shape}")
        if any(d > MAX_DIM for d in shape):
            raise CheckpointError(f"{where}: absurd shape {shape}: a dimension exceeds 2^48")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) for o in offsets):
            raise CheckpointError(f"{where}: malformed data_offsets {offsets!r}: expected [start, end] integers"[:400])
        numel = 1
        for d in shape:
            numel *= d
        nbytes = numel * _DTYPES[dtype].itemsize
        start, end = offsets
        if not 0 <= start <= end <= data_len or end - start != nbytes:
            truncated = 0 <= start <= end and end - start == nbytes and end > data_len
            raise CheckpointError(
                f"{where}: data offsets [{start}, {end}) do not hold a {dtype} tensor of "
                f"shape {shape} ({nbytes} bytes) inside the {data_len} data bytes"
                + ("; the file ends early (truncated: an interrupted download or copy?), fetch it again"
                   if truncated else "")
            )
        spans.append((start, end, name))
    spans.sort()
    for (s0, e0, n0), (s1, e1, n1) in zip(spans, spans[1:]):
        if s1 < e0:
            raise CheckpointError(f"{path}: tensors {n0!r} and {n1!r} overlap in the file")
    return header, 8 + n


class Checkpoint:
    """A safetensors checkpoint and its config.json, read lazily."""

    def __init__(self, root: Path, files: list[Path], config: dict):
        self.root = root
        self.config = config
        self._infos: dict[str, TensorInfo] = {}
        for file in files:
            header, data_start = _read_header(file)
            for name, entry in header.items():
                if name == "__metadata__":
                    continue
                if name in self._infos:
                    raise CheckpointError(f"{file}: tensor {name!r} is also in {self._infos[name].file}")
                start, end = entry["data_offsets"]
                self._infos[name] = TensorInfo(name, file, _DTYPES[entry["dtype"]],
                                               tuple(entry["shape"]), end - start, data_start + start)

    @classmethod
    def open(cls, path: str | Path) -> "Checkpoint":
        """Open a .safetensors file, a directory, or a model.safetensors.index.json."""
        path = Path(path)
        if not path.exists():
            raise CheckpointError(f"{path}: no such file or directory")
        if path.is_dir():
            root = path
            if (path / INDEX_NAME).exists():
                return cls._from_index(path / INDEX_NAME)
            elif (path / SINGLE_NAME).exists():
                files = [path / SINGLE_NAME]
            else:
                files = sorted(path.glob("*.safetensors"))
                if not files:
                    raise CheckpointError(
                        f"{path}: no {INDEX_NAME}, {SINGLE_NAME} or *.safetensors file in this directory"
                    )
        elif path.name.endswith(".index.json"):
            return cls._from_index(path)
        elif path.suffix == ".safetensors":
            root, files = path.parent, [path]
        else:
            raise CheckpointError(
                f"{path}: expected a .safetensors file, a checkpoint directory or a "
                f"{INDEX_NAME}, found a file of another kind"
            )
        return cls(root, files, _read_config(root))

    @classmethod
    def _from_index(cls, index: Path) -> "Checkpoint":
        weight_map = _read_index(index)
        files = sorted({index.parent / f for f in weight_map.values()})
        ckpt = cls(index.parent, files, _read_config(index.parent))
        for name, shard in sorted(weight_map.items()):
            info = ckpt._infos.get(name)
            if info is None:
                raise CheckpointError(f"{index}: names tensor {name!r} in {shard}, which does not hold it")
            if info.file.name != shard:
                raise CheckpointError(f"{index}: names tensor {name!r} in {shard}, found it in {info.file.name}")
        return ckpt

    @property
    def files(self) -> list[Path]:
        return sorted({i.file for i in self._infos.values()})

    def names(self) -> list[str]:
        return sorted(self._infos)

    def __contains__(self, name: str) -> bool:
        return name in self._infos

    def info(self, name: str) -> TensorInfo:
        try:
            return self._infos[name]
        except KeyError:
            raise CheckpointError(
                f"{self.root}: tensor {name!r} is missing from the checkpoint"
            ) from None

    def total_bytes(self) -> int:
        return sum(i.nbytes for i in self._infos.values())

    def get(self, name: str) -> torch.Tensor:
        """Read one tensor from disk (a positioned read into a fresh buffer of the header's size)."""
        info = self.info(name)
        t = torch.empty(info.shape, dtype=info.dtype, device="cpu")  # also under a meta device context
        if info.nbytes == 0:
            return t
        raw = t.reshape(-1).view(torch.uint8).numpy()
        try:
            with info.file.open("rb") as f:
                f.seek(info.offset)
                got = f.readinto(memoryview(raw))
        except OSError as e:
            raise CheckpointError(f"{info.file}: tensor {name!r} could not be read ({e})") from e
        if got != info.nbytes:
            raise CheckpointError(
                f"{info.file}: tensor {name!r}: expected {info.nbytes} bytes at offset {info.offset}, "
                f"read {got} (was the file truncated after it was opened?)"
            )
        return t

    def expect(self, name: str, shape: tuple[int, ...], dtypes: tuple[torch.dtype, ...] | None = None,
               hint: str = "") -> TensorInfo:
        """Check a tensor's header shape (and dtype) before reading it."""
        info = self.info(name)
        if info.shape != tuple(shape):
            raise CheckpointError(
                f"{info.file}: tensor {name!r}: expected shape {list(shape)}{hint}, found {list(info.shape)}"
            )
        if dtypes is not None and info.dtype not in dtypes:
            want = ", ".join(str(d).replace("torch.", "") for d in dtypes)
            raise CheckpointError(
                f"{info.file}: tensor {name!r}: expected dtype {want}, found {str(info.dtype).replace('torch.', '')}"
            )
        return info


def _read_index(index: Path) -> dict[str, str]:
    """The index's weight map (tensor -> shard file name), checked: every shard a plain file name
    in the index's directory that exists."""
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        raise CheckpointError(f"{index}: not a readable safetensors index (expected a 'weight_map' object): {e}") from e
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index}: 'weight_map' must be a non-empty object of tensor name -> shard file")
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard or Path(shard).name != shard or shard in (".", ".."):
            raise CheckpointError(
                f"{index}: tensor {name!r}: shard {shard!r} is not a file name in {index.parent} "
                "(paths outside the checkpoint directory are refused)"
            )
    for shard in sorted(set(weight_map.values())):
        if not (index.parent / shard).is_file():
            raise CheckpointError(f"{index}: names shard {shard}, which does not exist in {index.parent}")
    return weight_map


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


def _read_config(root: Path) -> dict:
    path = root / "config.json"
    if not path.exists():
        raise ConfigError(f"{path}: missing; a checkpoint needs its config.json beside the weights")
    return read_json_object(path)
