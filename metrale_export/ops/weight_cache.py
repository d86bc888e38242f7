"""Expanded weights reused while a block of work runs: inside ``reuse()`` the reference ops expand a
quantized weight (W4A16's bf16 values, W8A8's and W4A4's float factors) once, not on every call.

``compare`` opens one block per decoder layer: ONNX Runtime's two cases, the PyTorch layer end to
end and both teacher-forced checks then share one expansion of each projection, and the block's
end frees them (peak memory: one layer's expanded weights).

Entries are found by the content of the quantized tensors, never by their addresses: an entry
holds the tensors it was made from (references, not copies: a buffer it holds cannot be freed and
reused for another weight while the block runs), and a lookup takes it for the very same tensor
objects, unchanged since (their version counters), or for tensors equal element for element
(``torch.equal``), so ONNX Runtime's copy of a weight (read from the export) and PyTorch's
(quantized from the checkpoint) share one expansion exactly when they are equal, and PyTorch's
later calls on its own buffers compare nothing. (Copies cost a second copy of each layer's
quantized weights and a full comparison on every call: 8% of an 8B W8A8 comparison's samples.)
Invariants: ``expanded(...)`` returns what ``make()`` returns for these tensors; outside
``reuse()`` nothing is kept; an entry whose tensors were written in place since is never taken;
safe to call from ONNX Runtime's threads. The tensors are not written through numpy while a block
holds them (ONNX Runtime's inputs are copies made for each call).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

import torch

_lock = threading.Lock()
_entries: dict | None = None  # key -> [(the tensors, their versions, value)]
_SAMPLES = 257  # elements of each tensor in the key (the full comparison decides)


def _sample(t: torch.Tensor) -> bytes:
    flat = t.reshape(-1)
    step = max(1, flat.numel() // _SAMPLES)
    return flat[::step].contiguous().view(torch.uint8).numpy().tobytes()


def _key(kind: str, params: tuple, tensors: tuple) -> tuple:
    return (kind, params, tuple(None if t is None else (tuple(t.shape), t.dtype, _sample(t)) for t in tensors))


def _versions(tensors: tuple) -> tuple:
    return tuple(None if t is None else t._version for t in tensors)


def _same(held: tuple, versions: tuple, tensors: tuple) -> bool:
    """``tensors`` are the ``held`` ones, unwritten since (``versions``), or equal to them."""
    if _versions(held) != versions:  # written in place since the entry was made: never taken
        return False
    return all((x is None and y is None) or (x is not None and y is not None and (x is y or torch.equal(x, y)))
               for x, y in zip(held, tensors))


@contextlib.contextmanager
def reuse():
    """Keep every expansion made inside the block until it ends (nested blocks share the outer one)."""
    global _entries
    with _lock:
        outer = _entries is not None
        if not outer:
            _entries = {}
    try:
        yield
    finally:
        if not outer:
            with _lock:
                _entries = None


def active() -> bool:
    return _entries is not None


def expanded(kind: str, tensors: tuple, params: tuple, make: Callable[[], torch.Tensor]) -> torch.Tensor:
    """``make()``, or the value an earlier call inside ``reuse()`` made from equal ``tensors`` (and
    equal ``params``, hashable: group size, granularity). Treat the result as read-only."""
    if _entries is None:
        return make()
    key = _key(kind, params, tensors)
    with _lock:
        found = list(_entries.get(key, ())) if _entries is not None else []
    for held, versions, value in found:
        if _same(held, versions, tensors):
            return value
    versions = _versions(tensors)
    value = make()
    with _lock:
        if _entries is not None:
            _entries.setdefault(key, []).append((tuple(tensors), versions, value))
    return value
