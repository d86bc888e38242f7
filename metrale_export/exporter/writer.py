"""Write an export directory: the graph, its weights streamed tensor by tensor, and nothing
half-written.

Invariants:
- Weight data goes to ``model.onnx.data`` one tensor at a time, in a fixed order, 64-byte aligned;
  only one projection's tensors are in memory at once.
- Small models are then inlined into ``model.onnx`` (one file); graphs whose weights exceed
  ``INLINE_LIMIT`` keep the external data file (ONNX's 2 GB protobuf limit).
- Everything is written into a temporary sibling directory, renamed onto the destination only after
  the checks pass; a failure, a full disk or an interrupt removes the temporary directory.
- ``check_location`` runs before any tracing: the destination is new or an empty directory, or
  (with --force) a previous output of this tool (its manifest.json says so) holding nothing but
  what the tool wrote (the files its manifests list: ``foreign_entries``; anything else is never
  replaced), and its parent is a writable directory with room for the output (``output_bytes``).
- ``output_lock`` lets one process at a time write an output: a second one is refused at once,
  naming the holder's pid (flock on a lock file beside the output, released when the holder exits).
- Directories and files are created with the user's umask (``mkdtemp`` alone would make 0700).
- Importing this module imports no torch (the main job's up-front checks use it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import OutputExistsError, OutputLocationError
from ..hashing import sha256_file  # noqa: F401  (re-exported: the manifest's file hashes)

DATA_NAME = "model.onnx.data"
ONNX_NAME = "model.onnx"
INLINE_LIMIT = 1 << 30  # 1 GiB
_ALIGN = 64
if TYPE_CHECKING:
    import torch


def _byte_array(t: torch.Tensor):
    """The tensor's bytes as a flat uint8 numpy view (a copy only if it is not contiguous)."""
    import torch

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


def _own_manifest(path: Path) -> dict | None:
    """The manifest.json of a directory this tool wrote (an export or an engine directory), or None."""
    try:
        manifest = json.loads((Path(path) / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    named = manifest.get("producer") or manifest.get("tool") if isinstance(manifest, dict) else None
    return manifest if isinstance(named, str) and named.split(" ")[0] == PRODUCER else None


def is_own_output(path: Path) -> bool:
    """A directory whose manifest.json says this tool wrote it (an export or an engine directory)."""
    return _own_manifest(path) is not None


def _written_files(manifest: dict) -> set[str]:
    """What a manifest says its tool wrote, relative to its directory: an export's ``files`` (and the
    manifest), an engine directory's engines, their lowered graphs (the build's cache ``onnx/``) and
    its timing cache."""
    names = {"manifest.json"}
    files = manifest.get("files")
    if isinstance(files, dict):
        names.update(k for k in files if isinstance(k, str))
    if "engines" in manifest:
        names.update(_engine_directory_files(manifest))
    return names


def _engine_directory_files(manifest: dict) -> set[str]:
    """What an engine directory's manifest says the build wrote besides the manifest."""
    names = {"onnx", "timing.cache"}
    for entry in manifest.get("engines") or []:
        if isinstance(entry, dict) and isinstance(entry.get("file"), str):
            names.add(entry["file"])
    cache = manifest.get("timing_cache")
    if isinstance(cache, str):
        names.add(Path(cache).name)
    return names


def foreign_entries(dest: Path) -> list[str]:
    """The entries of a previous output that this tool did not write (relative paths, a directory
    with a trailing /), judged by its manifests; an engine directory inside is judged by its own."""
    dest = Path(dest)
    manifest = _own_manifest(dest)
    if manifest is None:
        return ["manifest.json"]
    written = _written_files(manifest)
    out = []
    for entry in sorted(dest.iterdir()):
        if entry.name in written and not entry.is_symlink():
            continue
        if _is_nested_engine_directory(entry, manifest):
            out += [f"engines/{e}" for e in foreign_entries(entry)] if is_own_output(entry) else ["engines/"]
            continue
        out.append(entry.name + ("/" if entry.is_dir() else ""))
    return out


def _is_nested_engine_directory(entry: Path, manifest: dict) -> bool:
    """An export's ``engines/`` subdirectory (a real one, not a link): judged by its own manifest."""
    return entry.name == "engines" and entry.is_dir() and not entry.is_symlink() and "engines" not in manifest


def _is_empty_directory(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def _is_own_directory(path: Path) -> bool:
    """A real directory (not a link) that this tool wrote (``is_own_output``)."""
    return not path.is_symlink() and path.is_dir() and is_own_output(path)


def _first_few(entries: list[str], shown: int = 5) -> str:
    """'a, b, c, d, e and 3 more': the first ``shown`` entries and how many others."""
    more = len(entries) - shown
    return ", ".join(entries[:shown]) + (f" and {more} more" if more > 0 else "")


def check_replaceable(dest: Path, force: bool) -> None:
    """Refuse an existing ``dest`` unless it is an empty directory, or --force is given and it is a
    previous output of this tool holding only what the tool wrote (``foreign_entries``)."""
    if not (dest.exists() or dest.is_symlink()):
        return
    if _is_empty_directory(dest):
        return  # an empty directory: nothing to lose (atomic_directory renames onto it)
    if not force:
        raise OutputExistsError(f"{dest}: the output directory exists; pass --force to replace it")
    if not _is_own_directory(dest):
        raise OutputExistsError(
            f"{dest}: --force replaces only a previous metrale-export output (a directory whose "
            f"manifest.json names {PRODUCER}); this is not one, so nothing was touched: choose another "
            "-o or remove it yourself")
    foreign = foreign_entries(dest)
    if foreign:
        raise OutputExistsError(
            f"{dest}: --force replaces only the files metrale-export wrote (its manifests list them), "
            f"and it also holds {_first_few(foreign)}; nothing was touched: move them out or choose another -o")


LOCK_SUFFIX = ".metrale-lock"


def lock_path(dest: Path) -> Path:
    """The lock file of an output: beside it, so that it exists before the output does."""
    dest = Path(os.path.abspath(dest))
    return dest.parent / f".{dest.name}{LOCK_SUFFIX}"


@contextlib.contextmanager
def output_lock(dest: Path) -> Iterator[Path]:
    """Hold the output's lock for the block; ``OutputLocationError`` naming the holder's pid when
    another process holds it. The lock file goes when the block ends (and the parents it had to
    make, if still empty)."""
    path = lock_path(dest)
    made = _make_lock_parents(dest, path)
    fd = _acquire_lock(dest, path)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)
        for p in made:
            with contextlib.suppress(OSError):
                p.rmdir()


def _make_lock_parents(dest: Path, path: Path) -> list[Path]:
    """Create the lock file's directory; the directories this made (the deepest first)."""
    made = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputLocationError(f"{dest}: cannot create {path.parent} ({e.strerror or e}); "
                                  "choose a writable -o location") from e
    return made


def _acquire_lock(dest: Path, path: Path) -> int:
    """An open descriptor of the lock file ``path`` holding its exclusive flock; retried when the
    holder before us removed the file between our open and our lock."""
    while True:
        fd = _open_and_lock(dest, path)
        if _is_current_file(path, fd):
            return fd
        os.close(fd)


def _open_and_lock(dest: Path, path: Path) -> int:
    """Open (creating) the lock file and take its flock without waiting; refused naming the holder."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise OutputLocationError(f"{dest}: cannot create its lock file {path} ({e.strerror or e}); "
                                  "choose a writable -o location") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise OutputLocationError(
            f"{dest}: another metrale-export (pid {holder}) is writing this output (lock {path}); "
            "wait for it to finish or choose another -o") from None
    return fd


def _is_current_file(path: Path, fd: int) -> bool:
    """Whether ``fd`` is still the file at ``path`` (not one its previous holder unlinked)."""
    try:
        current = os.stat(path).st_ino
    except FileNotFoundError:
        return False
    return current == os.fstat(fd).st_ino


def _existing_ancestor(path: Path) -> Path:
    path = Path(os.path.abspath(path))
    while not (path.exists() or path.is_symlink()):
        path = path.parent
    return path


_GRAPH_MARGIN_BYTES = 1 << 20  # the graph's nodes and the manifest


def output_bytes(weight_bytes: int, engines: int = 0, engine_weights: str = "shared") -> int:
    """About the most the output takes on disk while it is written: the weights streamed into
    model.onnx.data and, for a graph small enough to inline them, model.onnx holding them again
    before the data file goes; with ``engines``, what the build's own disk check will ask for them
    (one lowered graph: ``engines.resources.build_disk``), so a job that passes this check is not
    refused for space after its export."""
    from ..engines.resources import build_disk  # torch-free

    export = weight_bytes * (2 if weight_bytes <= INLINE_LIMIT else 1) + _GRAPH_MARGIN_BYTES
    if not engines:
        return export
    return export + build_disk(engine_weights, weight_bytes, engines, graphs=1)


def check_location(dest: Path, force: bool, need_bytes: int = 0, what: str = "the export") -> None:
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
            f"{dest}: {parent} has {free / 2**20:.1f} MiB free and {what} needs about "
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
