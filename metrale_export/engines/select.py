"""Reading a build's ``manifest.json``: which engine and optimization profile serve a batch.

For runners and the row-invariance report (``compare``). Pure functions over the manifest dict.
Invariants: an engine is chosen by M = batch * seq alone (its ``rows`` range); inside it, profile
``decode`` takes seq = 1, ``prefill`` takes batch = 1, ``rows`` (graphs without ``input_ids``)
takes any M in range; a batch no profile covers is refused with the reason.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import InputError
from .build import MANIFEST, MANIFEST_VERSION
from .profiles import RowRange


def load_manifest(engine_dir: Path) -> dict:
    """The manifest of a build directory, checked for the fields the runners use."""
    path = Path(engine_dir) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no engine manifest (run metrale-export build first)") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e})") from e
    if manifest.get("manifest_version") != MANIFEST_VERSION:
        raise InputError(
            f"{path}: expected manifest_version {MANIFEST_VERSION}, found "
            f"{manifest.get('manifest_version')!r}; rebuild the engines"
        )
    for i, entry in enumerate(manifest.get("engines", [])):
        for field in ("rows", "file", "optimization_profiles", "formats"):
            if field not in entry:
                raise InputError(f"{path}: engines[{i}] has no {field!r}")
    return manifest


def engine_for(manifest: dict, batch: int, seq: int = 1):
    """(engine entry, optimization profile index) for a batch, or (None, None) and the reason."""
    m = batch * seq
    for entry in manifest.get("engines", []):
        rows = RowRange(entry["rows"]["lo"], entry["rows"]["hi"])
        if m not in rows:
            continue
        for index, profile in enumerate(entry["optimization_profiles"]):
            name = profile["name"]
            if name == "rows" or (name == "decode" and seq == 1) or (name == "prefill" and batch == 1):
                return (entry, index), f"batch {batch} x seq {seq} = {m} rows: {entry['file']}, {name}"
        return (None, None), (
            f"batch {batch} x seq {seq} = {m} rows falls in {rows}, whose engine serves decode "
            f"(seq 1) or one sequence's prefill (batch 1); split the batch"
        )
    return (None, None), f"batch {batch} x seq {seq} = {m} rows: no engine covers it"


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
