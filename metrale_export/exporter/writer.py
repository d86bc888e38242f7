"""Write an export directory: the graph, its weights streamed tensor by tensor, and nothing
half-written.

Invariants:
- Weight data goes to ``model.onnx.data`` one tensor at a time, in a fixed order, 64-byte aligned;
  only one projection's tensors are in memory at once.
- Small models are then inlined into ``model.onnx`` (one file); graphs whose weights exceed
  ``INLINE_LIMIT`` keep the external data file (ONNX's 2 GB protobuf limit).
- Everything is written into a temporary sibling directory, renamed onto the destination only after
  the checks pass; a failure or interrupt removes the temporary directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch

from ..errors import OutputExistsError

DATA_NAME = "model.onnx.data"
ONNX_NAME = "model.onnx"
INLINE_LIMIT = 1 << 30  # 1 GiB
_ALIGN = 64


def tensor_bytes(t: torch.Tensor) -> bytes:
    """Raw little-endian bytes of a CPU tensor (bfloat16 and float8 included)."""
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        t = t.view(torch.uint8 if t.element_size() == 1 else torch.int16)
    return t.numpy().tobytes()


def _byte_array(t: torch.Tensor):
    """The tensor's bytes as a flat uint8 numpy view (a copy only if it is not contiguous)."""
    t = t.detach().cpu().contiguous()
    return t.reshape(-1).view(torch.uint8).numpy()


def tensor_digest(t: torch.Tensor) -> tuple:
    """dtype, shape and a hash of the bytes: equal digests mean equal tensors."""
    return t.dtype, tuple(t.shape), hashlib.blake2b(memoryview(_byte_array(t))).digest()


class DataWriter:
    """Appends tensors to one external-data file and remembers where each landed."""

    def __init__(self, path: Path):
        self.path = path
        self._f = path.open("wb")
        self.offsets: dict[str, tuple[int, int]] = {}

    def write(self, name: str, t: torch.Tensor) -> None:
        pos = self._f.tell()
        pad = (-pos) % _ALIGN
        if pad:
            self._f.write(b"\0" * pad)
            pos += pad
        # Written from a view of the tensor's memory: no bytes copy of the largest tensor.
        data = memoryview(_byte_array(t))
        self._f.write(data)
        self.offsets[name] = (pos, data.nbytes)

    def close(self) -> None:
        self._f.close()


def sha256_file(path: Path, chunk: int = 1 << 24) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def atomic_directory(dest: Path, force: bool) -> Iterator[Path]:
    """Yield a temporary directory that becomes ``dest`` when the block succeeds."""
    dest = Path(dest)
    if dest.exists() and not force:
        raise OutputExistsError(f"{dest}: the output directory exists; pass --force to replace it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        yield tmp
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
            os.replace(dest, old / "x")
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
