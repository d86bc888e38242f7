"""Choosing the engine and optimization profile of a batch from a build's manifest."""

import json

import pytest

from metrale_export.engines.profiles import optimization_profiles, parse_profiles
from metrale_export.engines.select import engine_for, invariance_batch_sizes, load_manifest
from metrale_export.errors import InputError

INPUTS = {"input_ids": ["batch", "seq"], "position_ids": ["batch", "seq"],
          "past_key.0": ["batch", 2, "past", 16], "past_value.0": ["batch", 2, "past", 16]}


def _manifest(spec="1,2-8,9-32", inputs=INPUTS):
    engines = []
    for r in parse_profiles(spec):
        engines.append({"rows": {"lo": r.lo, "hi": r.hi}, "file": f"rows-{r.label}.engine", "formats": {},
                        "optimization_profiles": [p.as_json() for p in optimization_profiles(inputs, r)]})
    return {"manifest_version": 1, "engines": engines}


@pytest.mark.parametrize(
    "batch, seq, file, index",
    [(1, 1, "rows-1.engine", 0), (8, 1, "rows-2-8.engine", 0), (1, 8, "rows-2-8.engine", 1),
     (1, 9, "rows-9-32.engine", 1), (32, 1, "rows-9-32.engine", 0)],
)
def test_engine_and_profile(batch, seq, file, index):
    (entry, i), reason = engine_for(_manifest(), batch, seq)
    assert entry["file"] == file and i == index, reason


def test_refusals_say_why():
    (entry, _), reason = engine_for(_manifest(), 2, 4)
    assert entry is None and "decode (seq 1) or one sequence's prefill" in reason
    (entry, _), reason = engine_for(_manifest(), 1, 33)
    assert entry is None and "more than the largest profile (32)" in reason
    (entry, _), reason = engine_for(_manifest("1,9-32"), 4)  # profiles.profile_for's reason: the gap
    assert entry is None and "no profile covers them (between 1 and 9-32)" in reason


def test_rows_graphs_take_any_m_in_range():
    (entry, i), _ = engine_for(_manifest("1-4,5-16", {"x": ["M", 8]}), 7)
    assert entry["file"] == "rows-5-16.engine" and i == 0


def test_invariance_batch_sizes_cover_both_ends_of_each_range():
    assert invariance_batch_sizes(_manifest("1,2-8,9-32,33-128")) == [1, 2, 5, 8, 9, 21, 32, 33, 81, 128]


def test_load_manifest(tmp_path):
    with pytest.raises(InputError, match="no engine manifest"):
        load_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"manifest_version": 0}))
    with pytest.raises(InputError, match="expected manifest_version 1, found 0"):
        load_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps(_manifest()))
    assert len(load_manifest(tmp_path)["engines"]) == 3
