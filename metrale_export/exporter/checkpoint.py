"""Read safetensors checkpoints lazily: a file with config.json beside it, a directory, or a sharded
``model.safetensors.index.json``.

Invariants:
- Only headers are read up front; a tensor's data is read when ``get`` asks for it, one at a time.
- Every failure is a ``CheckpointError`` naming the file (and tensor) and what was expected.
- Shapes and dtypes come from headers, so they can be validated before any data is read.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from ..errors import CheckpointError, ConfigError

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
# A safetensors header larger than this is refused before it is read (safetensors' own limit).
MAX_HEADER_BYTES = 100 * 1024 * 1024

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


def _read_header(path: Path) -> dict:
    """Parse and check a safetensors header without trusting its numbers."""
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
            header = json.loads(f.read(n))
    except CheckpointError:
        raise
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from e
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: corrupt safetensors header: expected a JSON object")
    data_len = size - 8 - n
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape = entry["dtype"], [int(d) for d in entry["shape"]]
            start, end = (int(o) for o in entry["data_offsets"])
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"{path}: tensor {name!r}: malformed header entry {entry!r}") from e
        if dtype not in _DTYPES:
            raise CheckpointError(f"{path}: tensor {name!r}: unsupported dtype {dtype!r}")
        if any(d < 0 for d in shape):
            raise CheckpointError(f"{path}: tensor {name!r}: negative dimension in shape {shape}")
        numel = 1
        for d in shape:
            numel *= d
        nbytes = numel * _DTYPES[dtype].itemsize
        if not 0 <= start <= end <= data_len or end - start != nbytes:
            raise CheckpointError(
                f"{path}: tensor {name!r}: data offsets [{start}, {end}) do not hold a {dtype} tensor of "
                f"shape {shape} ({nbytes} bytes) inside the {data_len} data bytes"
            )
        spans.append((start, end, name))
    spans.sort()
    for (s0, e0, n0), (s1, e1, n1) in zip(spans, spans[1:]):
        if s1 < e0:
            raise CheckpointError(f"{path}: tensors {n0!r} and {n1!r} overlap in the file")
    return header


class Checkpoint:
    """A safetensors checkpoint and its config.json, read lazily."""

    def __init__(self, root: Path, files: list[Path], config: dict):
        self.root = root
        self.config = config
        self._infos: dict[str, TensorInfo] = {}
        self._handles: dict[Path, object] = {}
        for file in files:
            header = _read_header(file)
            for name, entry in header.items():
                if name == "__metadata__":
                    continue
                if name in self._infos:
                    raise CheckpointError(f"{file}: tensor {name!r} is also in {self._infos[name].file}")
                start, end = entry["data_offsets"]
                self._infos[name] = TensorInfo(name, file, _DTYPES[entry["dtype"]],
                                               tuple(int(d) for d in entry["shape"]), end - start)

    @classmethod
    def open(cls, path: str | Path) -> "Checkpoint":
        """Open a .safetensors file, a directory, or a model.safetensors.index.json."""
        path = Path(path)
        if not path.exists():
            raise CheckpointError(f"{path}: no such file or directory")
        if path.is_dir():
            root = path
            if (path / INDEX_NAME).exists():
                files = _files_from_index(path / INDEX_NAME)
            elif (path / SINGLE_NAME).exists():
                files = [path / SINGLE_NAME]
            else:
                files = sorted(path.glob("*.safetensors"))
                if not files:
                    raise CheckpointError(
                        f"{path}: no {INDEX_NAME}, {SINGLE_NAME} or *.safetensors file in this directory"
                    )
        elif path.name.endswith(".index.json"):
            root, files = path.parent, _files_from_index(path)
        elif path.suffix == ".safetensors":
            root, files = path.parent, [path]
        else:
            raise CheckpointError(
                f"{path}: expected a .safetensors file, a checkpoint directory or a "
                f"{INDEX_NAME}, found a file of another kind"
            )
        return cls(root, files, _read_config(root))

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
        """Read one tensor from disk."""
        info = self.info(name)
        handle = self._handles.get(info.file)
        try:
            if handle is None:
                handle = self._handles[info.file] = safe_open(str(info.file), framework="pt")
            return handle.get_tensor(name)
        except Exception as e:  # safetensors raises its own error types
            raise CheckpointError(f"{info.file}: tensor {name!r} could not be read ({e})") from e

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


def _files_from_index(index: Path) -> list[Path]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        files = sorted({index.parent / f for f in weight_map.values()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{index}: not a readable safetensors index (expected a 'weight_map' object): {e}") from e
    for f in files:
        if not f.exists():
            raise CheckpointError(f"{index}: names shard {f.name}, which does not exist in {index.parent}")
    return files


def _read_config(root: Path) -> dict:
    path = root / "config.json"
    if not path.exists():
        raise ConfigError(f"{path}: missing; a checkpoint needs its config.json beside the weights")
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: not readable JSON ({e})") from e
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return config
