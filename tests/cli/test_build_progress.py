"""The build's progress lines (cli/build.py engine_progress): before the first engine, one line with
each engine's expected build time and the total; after each engine, what it took against its
estimate and what remains (engines/resources.py's estimate, scaled by how the built ones ran)."""

from __future__ import annotations

from metrale_export.cli.build import engine_progress
from metrale_export.engines.profiles import parse_profiles


def _plan(ranges, seconds, reused=0):
    return {"engines": [{"rows": r, "file": f"e/rows-{r.label}.engine", "expected_seconds": s}
                        for r, s in zip(ranges, seconds)],
            "expected_seconds": sum(seconds), "reused": reused}


def test_the_expected_time_of_every_engine_and_the_total_come_before_the_first_engine():
    lines: list[str] = []
    progress = engine_progress(lines.append)
    first, second, third = parse_profiles("1,2-8,9-32")
    progress("lower", None, {"file": "e/onnx/qdq-0.onnx"})
    progress("plan", None, _plan((first, second, third), (4.0, 30.0, 200.0), reused=1))
    progress("build", first, {"file": "e/rows-1.engine", "expected_seconds": 4.0})
    assert lines[0] == "lowering e/onnx/qdq-0.onnx (the graph the engines are built from) ..."
    assert lines[1] == ("expected build time: 4 min for 3 engine(s) (rows 1 4.0 s, 2-8 30 s, 9-32 3 min); "
                        "1 unchanged; an estimate from the lowered graph (docs/engines.md, \"How long a "
                        "build takes\")")
    assert lines[2] == "building rows 1 ... (expected about 4.0 s)"


def test_each_engine_states_its_time_against_its_estimate_and_what_remains():
    lines: list[str] = []
    progress = engine_progress(lines.append)
    first, second, third = parse_profiles("1,2-8,9-32")
    progress("built", first, {"file": "e/rows-1.engine", "bytes": 2_000_000, "seconds": 8.0,
                              "expected_seconds": 4.0, "left": 2, "remaining_seconds": 460.0})
    progress("built", third, {"file": "e/rows-9-32.engine", "bytes": 2_000_000, "seconds": 1050.0,
                              "expected_seconds": 900.0, "left": 0, "remaining_seconds": 0.0})
    assert lines[0] == "  built e/rows-1.engine (2.0 MB, 8.0 s, expected 4.0 s); 2 engine(s) left, about 8 min"
    assert lines[1] == "  built e/rows-9-32.engine (2.0 MB, 18 min, expected 15 min)"
