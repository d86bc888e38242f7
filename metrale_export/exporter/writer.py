"""Write an export directory: the graph, its weights streamed tensor by tensor, and nothing
half-written.

Invariants:
- Weight data goes to ``model.onnx.data`` one tensor at a time, in a fixed order, 64-byte aligned;
  only one projection's tensors are in memory at once.
- Small models are then inlined into ``model.onnx`` (one file); graphs whose weights exceed
  ``INLINE_LIMIT`` keep the external data file (ONNX's 2 GB protobuf limit).
- Everything is written into a temporary sibling directory, renamed onto the destination only after
  the checks pass; a failure, a full disk or an interrupt removes the temporary directory.
- ``check_location`` runs before any tracing: the destination is new, or (with --force) a previous
  output of this tool (its manifest.json says so; anything else is never replaced), and its parent
  is a writable directory with room for about the weights.
- Directories and files are created with the user's umask (``mkdtemp`` alone would make 0700).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch

from ..errors import OutputExistsError, OutputLocationError
from ..hashing import sha256_file  # noqa: F401  (re-exported: the manifest's file hashes)

DATA_NAME = "model.onnx.data"
ONNX_NAME = "model.onnx"
INLINE_LIMIT = 1 << 30  # 1 GiB
_ALIGN = 64


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


PRODUCER = "metrale-export"  # how an export's and an engine directory's manifest.json name the tool
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def umask() -> int:
    """The process's umask (read by setting it, then putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(path: Path) -> None:
    """Give ``path`` the mode a plain mkdir/open would have given it (for mkdtemp's 0700 and for
    libraries that write 0600 files)."""
    os.chmod(path, (0o777 if Path(path).is_dir() else 0o666) & ~umask())


def is_own_output(path: Path) -> bool:
    """A directory whose manifest.json says this tool wrote it (an export or an engine directory)."""
    try:
        manifest = json.loads((Path(path) / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    named = manifest.get("producer") or manifest.get("tool") if isinstance(manifest, dict) else None
    return isinstance(named, str) and named.split(" ")[0] == PRODUCER


def check_replaceable(dest: Path, force: bool) -> None:
    """Refuse an existing ``dest`` unless --force is given and it is a previous output of this tool."""
    if not (dest.exists() or dest.is_symlink()):
        return
    if not force:
        raise OutputExistsError(f"{dest}: the output directory exists; pass --force to replace it")
    if dest.is_symlink() or not dest.is_dir() or not is_own_output(dest):
        raise OutputExistsError(
            f"{dest}: --force replaces only a previous metrale-export output (a directory whose "
            f"manifest.json names {PRODUCER}); this is not one, so nothing was touched: choose another "
            "-o or remove it yourself")


def _existing_ancestor(path: Path) -> Path:
    path = Path(os.path.abspath(path))
    while not (path.exists() or path.is_symlink()):
        path = path.parent
    return path


def check_location(dest: Path, force: bool, need_bytes: int = 0) -> None:
    """Before any work: ``dest`` may be written (``check_replaceable``), its nearest existing parent
    is a directory this process can create entries in, with about ``need_bytes`` free."""
    dest = Path(dest)
    check_replaceable(dest, force)
    parent = _existing_ancestor(dest.parent)
    if not parent.is_dir():
        raise OutputLocationError(f"{dest}: {parent} is a file, not a directory; choose another -o location")
    try:  # the one reliable test (read-only mounts, immutable directories, /proc, permissions)
        os.rmdir(tempfile.mkdtemp(prefix=f".{dest.name}.probe-", dir=parent))
    except OSError as e:
        raise OutputLocationError(
            f"{dest}: cannot create files in {parent} ({e.strerror or e}); choose a writable -o location"
        ) from e
    free = shutil.disk_usage(parent).free
    if free < need_bytes:
        raise OutputLocationError(
            f"{dest}: {parent} has {free / 2**20:.1f} MiB free and the export needs about "
            f"{need_bytes / 2**20:.1f} MiB; free some space or choose another -o location")


def no_space_error(dest: Path, e: OSError) -> OutputLocationError:
    return OutputLocationError(
        f"{dest}: no space left on the device while writing it ({e.strerror or e}); nothing partial was "
        "left: free some space or choose another -o location")


@contextlib.contextmanager
def atomic_directory(dest: Path, force: bool) -> Iterator[Path]:
    """Yield a temporary directory that becomes ``dest`` when the block succeeds."""
    dest = Path(dest)
    check_replaceable(dest, force)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        follow_umask(tmp)
        yield tmp
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
            os.replace(dest, old / "x")
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if e.errno in _NO_SPACE:
            raise no_space_error(dest, e) from e
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
