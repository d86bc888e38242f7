"""Checkpoint tensors assembled from others: how layer kinds normalise a checkpoint's layout.

A layer kind that exports one documented layout while checkpoints store several (GDN's QKVZ
sequential or interleaved per head, MoE experts per expert or fused in one 3D tensor) declares a
``RowRecipe`` for the tensor it exports: rows taken from one or more checkpoint tensors,
concatenated, then optionally permuted. ``CheckpointView`` serves those recipes under the exported
name with the ``Checkpoint`` interface, so projection sources (``FloatSource`` and the declared
formats) read and quantize the assembled tensor as if the checkpoint held it.

Invariants: a recipe's shape and dtype are checked from headers alone (``expect``); ``get`` reads
only the parts it names (one expert's slice of a fused tensor, not the whole tensor); a recipe
changes the order of rows and nothing else, so every value is a checkpoint value.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import torch

from ...errors import CheckpointError
from ..projection_source import ProjectionSource


@dataclass(frozen=True)
class Part:
    """Rows ``[start, stop)`` of checkpoint tensor ``name`` (of its ``index``-th slice along dim 0
    when ``index`` is set: one expert of a fused ``[E, N, K]`` tensor)."""

    name: str
    index: int | None = None
    start: int | None = None
    stop: int | None = None


@dataclass(frozen=True)
class RowRecipe:
    """``cat(parts, dim=0)[perm]``: a tensor of ``shape`` made from checkpoint rows."""

    parts: tuple[Part, ...]
    shape: tuple[int, ...]
    perm: tuple[int, ...] | None = None
    what: str = ""  # why this tensor is assembled, for messages


def _part_shape(ckpt, part: Part) -> tuple[int, ...]:
    shape = ckpt.info(part.name).shape
    if part.index is not None:
        if not shape or not 0 <= part.index < shape[0]:
            raise CheckpointError(
                f"{ckpt.root}: tensor {part.name!r}: expected a slice {part.index} along dim 0, "
                f"found shape {list(shape)}")
        shape = shape[1:]
    if part.start is not None or part.stop is not None:
        lo, hi = part.start or 0, shape[0] if part.stop is None else part.stop
        if not shape or not 0 <= lo <= hi <= shape[0]:
            raise CheckpointError(
                f"{ckpt.root}: tensor {part.name!r}: expected rows [{lo}, {hi}), found shape {list(shape)}")
        shape = (hi - lo, *shape[1:])
    return tuple(shape)


class CheckpointView:
    """A ``Checkpoint`` with some tensors served by recipes (everything else is delegated)."""

    def __init__(self, checkpoint, recipes: dict[str, RowRecipe]):
        self._ckpt = checkpoint
        self.recipes = dict(recipes)

    def __getattr__(self, name):  # root, config, files, names, total_bytes, ...
        return getattr(self._ckpt, name)

    def __contains__(self, name: str) -> bool:
        return name in self.recipes or name in self._ckpt

    def info(self, name: str):
        if name not in self.recipes:
            return self._ckpt.info(name)
        recipe = self.recipes[name]
        first = self._ckpt.info(recipe.parts[0].name)
        numel = 1
        for d in recipe.shape:
            numel *= d
        return dataclasses.replace(first, name=name, shape=tuple(recipe.shape), nbytes=numel * first.dtype.itemsize)

    def expect(self, name: str, shape, dtypes=None, hint: str = ""):
        if name not in self.recipes:
            return self._ckpt.expect(name, shape, dtypes, hint)
        recipe = self.recipes[name]
        found, dtype = self._assembled(name, recipe)
        parts = ", ".join(p.name for p in recipe.parts)
        if found != tuple(shape) or tuple(recipe.shape) != tuple(shape):
            raise CheckpointError(
                f"{self._ckpt.root}: {name!r} ({recipe.what or 'assembled'} from {parts}): expected shape "
                f"{list(shape)}{hint}, found {list(found)}")
        if dtypes is not None and dtype not in dtypes:
            want = ", ".join(str(d).replace("torch.", "") for d in dtypes)
            raise CheckpointError(
                f"{self._ckpt.root}: {name!r} (from {parts}): expected dtype {want}, "
                f"found {str(dtype).replace('torch.', '')}")
        return self.info(name)

    def _assembled(self, name: str, recipe) -> tuple[tuple, object]:
        """(the shape, the dtype) of ``recipe``'s parts stacked along their rows, checked to share
        their row shape and dtype."""
        rows, tail, dtype = 0, None, None
        for part in recipe.parts:
            pshape = _part_shape(self._ckpt, part)
            pinfo = self._ckpt.info(part.name)
            if tail is not None and pshape[1:] != tail:
                raise CheckpointError(
                    f"{self._ckpt.root}: tensor {part.name!r} ({recipe.what or name}): expected rows of shape "
                    f"{list(tail)}, found {list(pshape[1:])}")
            if dtype is not None and pinfo.dtype != dtype:
                raise CheckpointError(
                    f"{self._ckpt.root}: tensor {part.name!r} ({recipe.what or name}): expected dtype "
                    f"{dtype}, found {pinfo.dtype} (the parts of one tensor share a dtype)")
            rows, tail, dtype = rows + pshape[0], pshape[1:], pinfo.dtype
        return (rows, *tail), dtype

    def _read(self, part: Part) -> torch.Tensor:
        if part.index is None:
            t = self._ckpt.get(part.name)
        else:
            # One slice of a fused tensor: a positioned read of its bytes alone (the checkpoint's
            # own reads are whole tensors; a fused expert tensor can be gigabytes).
            info = self._ckpt.info(part.name)
            shape = info.shape[1:]
            t = torch.empty(shape, dtype=info.dtype, device="cpu")  # also under a meta device context
            nbytes = t.numel() * t.element_size()
            offset = info.offset + part.index * nbytes
            try:
                with info.file.open("rb") as f:
                    f.seek(offset)
                    got = f.readinto(memoryview(t.reshape(-1).view(torch.uint8).numpy())) if nbytes else 0
            except OSError as e:
                raise CheckpointError(f"{info.file}: tensor {part.name!r}[{part.index}] could not be read ({e})") from e
            if got != nbytes:
                raise CheckpointError(
                    f"{info.file}: tensor {part.name!r}[{part.index}]: expected {nbytes} bytes at offset "
                    f"{offset}, read {got}")
        if part.start is not None or part.stop is not None:
            t = t[part.start:part.stop]
        return t

    def get(self, name: str) -> torch.Tensor:
        if name not in self.recipes:
            return self._ckpt.get(name)
        recipe = self.recipes[name]
        t = torch.cat([self._read(p) for p in recipe.parts], dim=0)
        if recipe.perm is not None:
            t = t[torch.tensor(recipe.perm, dtype=torch.int64)]
        if tuple(t.shape) != tuple(recipe.shape):
            raise CheckpointError(
                f"{self._ckpt.root}: {name!r}: assembled shape {list(t.shape)}, expected {list(recipe.shape)}")
        return t.contiguous()


def with_recipes(source: ProjectionSource, recipes: dict[str, RowRecipe]):
    """``source`` reading through a ``CheckpointView`` with ``recipes`` (itself when there are none)."""
    if not recipes:
        return source
    out = copy.copy(source)
    base = source.checkpoint
    if isinstance(base, CheckpointView):
        recipes = {**base.recipes, **recipes}
        base = base._ckpt
    out.checkpoint = CheckpointView(base, recipes)
    return out
