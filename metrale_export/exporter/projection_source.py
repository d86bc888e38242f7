"""What the model's layers ask of a projection source: ``ProjectionSource``, the one interface of
``FloatSource`` (quantization.py: float weights, quantized as requested), the declared formats'
sources (formats/) and ``StaticScales`` (calibration.py: either of them with static activation
scales).

Invariants:
- a source answers ``spec`` from the checkpoint's headers alone, before any weight is read (a
  fused projection of a declared format also reads its parts' per-tensor scalars), and
  ``load`` returns exactly the tensors its spec names (``ProjSpec.check``);
- what the manifest records of a source comes from its methods (``describe``,
  ``activation_scales``), never from which attributes it happens to have.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from .checkpoint import Checkpoint
    from .projection import ProjSpec
    from .quantization import QuantRequest


@runtime_checkable
class ProjectionSource(Protocol):
    """The projections of one checkpoint as the export makes them."""

    checkpoint: Checkpoint  # settable: layers/views.with_recipes gives a copy a view of the checkpoint
    request: QuantRequest

    def kind_for(self, family: str) -> str:
        """The kind ("none", "w4a16", ...) a projection of ``family`` exports as."""
        ...

    def spec(self, name: str, n: int, k: int, family: str, bias: bool = False,
             weight_name: str | None = None, parts: tuple[tuple[str, int], ...] = ()) -> ProjSpec:
        """The spec of projection ``name`` ([n, k]), checked against the checkpoint's headers;
        ``parts`` ((checkpoint prefix, rows), in row order): a fused projection of those stored
        ones (fusion.py; ``fusion.Unfusable`` where this checkpoint cannot make one op of them)."""
        ...

    def load(self, spec: ProjSpec) -> dict[str, torch.Tensor]:
        """The tensors of ``spec``, exactly those it names."""
        ...

    def describe(self) -> dict | None:
        """The format the checkpoint declares (formats.DESCRIBE_KEYS), or None: float weights."""
        ...

    def activation_scales(self) -> dict | None:
        """The manifest's ``activation_scales`` (static scales from calibration), or None: dynamic
        scales, and the manifest has no such entry."""
        ...
