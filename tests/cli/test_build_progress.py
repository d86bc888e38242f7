"""The build's progress lines (cli/build.py engine_progress): each engine after the first states
the time it is expected to take, the mean of the engines built so far in this run."""

from __future__ import annotations

from metrale_export.cli.build import engine_progress
from metrale_export.engines.profiles import parse_profiles


def test_each_engine_after_the_first_states_its_expected_time():
    lines: list[str] = []
    progress = engine_progress(lines.append)
    first, second, third = parse_profiles("1,2-8,9-32")
    progress("build", first, {"file": "e/rows-1.engine"})
    progress("built", first, {"file": "e/rows-1.engine", "bytes": 2_000_000, "seconds": 40.0})
    progress("build", second, {"file": "e/rows-2-8.engine"})
    progress("built", second, {"file": "e/rows-2-8.engine", "bytes": 2_000_000, "seconds": 20.0})
    progress("skip", third, {"file": "e/rows-9-32.engine"})
    progress("build", third, {"file": "e/rows-9-32.engine"})
    assert lines[0] == "building rows 1 ..."  # nothing to go on yet
    assert lines[2] == "building rows 2-8 ... (expected about 40 s: the mean of the 1 engine(s) built so far)"
    assert lines[-1] == "building rows 9-32 ... (expected about 30 s: the mean of the 2 engine(s) built so far)"


def test_long_builds_are_stated_in_minutes():
    lines: list[str] = []
    progress = engine_progress(lines.append)
    (rows,) = parse_profiles("1")
    progress("built", rows, {"file": "e/rows-1.engine", "bytes": 1, "seconds": 1050.0})
    progress("build", rows, {"file": "e/rows-1.engine"})
    assert lines[-1].endswith("(expected about 18 min: the mean of the 1 engine(s) built so far)")
