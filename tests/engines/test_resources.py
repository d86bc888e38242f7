"""engines/resources.py's time estimate: how long each engine is expected to take to build, from
its lowered graph, and what remains once some are built. The coefficients are checked against the
recorded calibration builds (benchmarks/results/build-time-*.json), within the accuracy that
docs/engines.md states."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from metrale_export.engines import resources

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def test_an_engine_takes_longer_with_more_nodes_and_more_profiles():
    est = resources.estimate_engine_seconds
    for backend in ("tensorrt-rtx", "tensorrt"):
        assert 0 < est(backend, 400, 1) < est(backend, 400, 2) < est(backend, 1600, 2)
        # the nodes' part is per optimization profile
        fixed = est(backend, 0, 1)
        assert est(backend, 800, 2) - fixed == pytest.approx(2 * (est(backend, 800, 1) - fixed))


def test_what_remains_is_scaled_by_how_the_built_engines_ran():
    assert resources.remaining_seconds(100.0, 0.0, 0.0) == 100.0  # nothing built yet: the estimate
    assert resources.remaining_seconds(100.0, 30.0, 10.0) == pytest.approx(300.0)  # three times slower
    assert resources.remaining_seconds(100.0, 5.0, 10.0) == pytest.approx(50.0)


@pytest.mark.parametrize("seconds, shown", [(0.8, "0.8 s"), (9.94, "9.9 s"), (95, "95 s"), (125, "2 min"),
                                            (1050, "18 min"), (2.86 * 3600, "2.9 h")])
def test_times_are_shown_in_seconds_minutes_or_hours(seconds, shown):
    assert resources.describe_seconds(seconds) == shown


def _calibration_engines():
    records = sorted(RESULTS.glob("build-time-*.json"))
    assert records, f"no calibration record under {RESULTS} (benchmarks/bench_build_time.py writes one)"
    doc = json.loads(records[-1].read_text())
    return doc, [(case, e) for case in doc["cases"] for e in case["engines"]]


def test_the_estimate_reproduces_the_recorded_builds_within_the_stated_factor():
    """The recorded builds (TensorRT-RTX on the 2-core machine, loads as recorded): each build's
    total within the stated factor, the geometric mean of measured/estimated over the engines near 1,
    and no engine beyond 5x (one engine of the record ran 4.5x its estimate through a load spike,
    the next worst 2.6x; docs/engines.md)."""
    doc, engines = _calibration_engines()
    factor = doc["stated_factor"]
    assert factor == resources.TIME_ESTIMATE_FACTOR  # what the code and docs/engines.md state
    ratios = []
    for case, e in engines:
        expected = resources.estimate_engine_seconds("tensorrt-rtx", e["nodes"], e["profiles"])
        ratio = e["seconds"] / expected
        assert 1 / 5 <= ratio <= 5, (case["case"], e, expected)
        ratios.append(ratio)
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    assert 0.8 <= geomean <= 1.25, geomean
    for case in doc["cases"]:
        total = sum(e["seconds"] for e in case["engines"])
        expected = sum(resources.estimate_engine_seconds("tensorrt-rtx", e["nodes"], e["profiles"])
                       for e in case["engines"])
        assert 1 / factor <= total / expected <= factor, case["case"]
