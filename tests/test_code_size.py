"""The package stays readable in one sitting (issue 21): no module over 400 lines, and, where radon
is installed (it is no dependency of the project), no function above cyclomatic complexity 15."""

from __future__ import annotations

from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "metrale_export"
MAX_LINES = 400
MAX_COMPLEXITY = 15


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by concern): {long}"


def test_no_function_is_above_complexity_15():
    radon = pytest.importorskip("radon.complexity", reason="radon is not installed (pip install radon)")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for block in radon.cc_visit(path.read_text()):
            if block.complexity > MAX_COMPLEXITY:
                found.append(f"{path.relative_to(PACKAGE)}:{block.lineno} {block.fullname}: {block.complexity}")
    assert not found, f"functions above cyclomatic complexity {MAX_COMPLEXITY}: {found}"
