"""Reading a build's ``manifest.json``: which engine and optimization profile serve a batch.

For runners and the row-invariance report (``compare``). Pure functions over the manifest dict.
Invariants: an engine is chosen by M = batch * seq alone (its ``rows`` range); inside it, profile
``decode`` takes seq = 1, ``prefill`` takes batch = 1, ``rows`` (graphs without ``input_ids``)
takes any M in range; a batch no profile covers is refused with the reason.
"""

from __future__ import annotations

from .manifest import load as load_manifest  # noqa: F401 - the runners' reader
from .profiles import RowRange, profile_for


def engine_for(manifest: dict, batch: int, seq: int = 1):
    """(engine entry, optimization profile index) for a batch, or (None, None) and the reason.

    The engine is the one whose range ``profiles.profile_for`` picks for M = batch * seq: the one
    answer to "which engine serves M", for the build's profiles and its manifest alike."""
    m = batch * seq
    engines = {RowRange(e["rows"]["lo"], e["rows"]["hi"]): e for e in manifest.get("engines", [])}
    rows, why = profile_for(m, tuple(sorted(engines)))
    if rows is None:
        return (None, None), f"batch {batch} x seq {seq} = {why}"
    entry = engines[rows]
    for index, profile in enumerate(entry["optimization_profiles"]):
        name = profile["name"]
        if name == "rows" or (name == "decode" and seq == 1) or (name == "prefill" and batch == 1):
            return (entry, index), f"batch {batch} x seq {seq} = {m} rows: {entry['file']}, {name}"
    return (None, None), (
        f"batch {batch} x seq {seq} = {m} rows falls in {rows}, whose engine serves decode "
        f"(seq 1) or one sequence's prefill (batch 1); split the batch"
    )


def invariance_batch_sizes(manifest: dict) -> list[int]:
    """Batch sizes for the row-invariance report: each range's ends and an odd size inside it.

    Feeding the same rows alone and inside batches of these sizes exercises every engine at both
    extremes of its profile, where kernels are most likely to change tiling.
    """
    sizes = set()
    for entry in manifest.get("engines", []):
        lo, hi = entry["rows"]["lo"], entry["rows"]["hi"]
        mid = (lo + hi) // 2 | 1  # odd: awkward for tiles
        sizes.update(s for s in (lo, min(max(mid, lo), hi), hi))
    return sorted(sizes)
