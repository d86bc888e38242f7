"""The package stays readable in one sitting (issue 21): no module over 400 lines, and no function
above cyclomatic complexity 10: `radon cc -n C metrale_export` (rank C and worse: complexity 11 and
up) prints nothing. radon is a test dependency (pyproject.toml, the `test` extra)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "metrale_export"
MAX_LINES = 400


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by concern): {long}"


def test_radon_finds_no_function_above_complexity_10():
    """The command of the acceptance itself, so that methods and closures count as radon counts them."""
    run = subprocess.run([sys.executable, "-m", "radon", "cc", "-n", "C", "-s", str(PACKAGE)],
                         capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "", f"functions above cyclomatic complexity 10 (radon rank C or worse):\n{run.stdout}"


def test_the_complexity_check_can_fail(tmp_path):
    """radon, as called above, does report a function of complexity 11."""
    branches = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(10))
    (tmp_path / "branchy.py").write_text(f"def branchy(x):\n{branches}\n    return -1\n")
    run = subprocess.run([sys.executable, "-m", "radon", "cc", "-n", "C", "-s", str(tmp_path)],
                         capture_output=True, text=True, check=True)
    assert "branchy - C (11)" in run.stdout
