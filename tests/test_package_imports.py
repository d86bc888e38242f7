"""No module of the package imports a test extra (pyproject's ``test`` extra): every module imports
with those packages blocked, and the code only tests use lives in tests/support/."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

# pyproject.toml [project.optional-dependencies] test, as import names.
TEST_EXTRAS = ("pytest", "hypothesis", "transformers", "compressed_tensors", "modelopt", "requests")

_SCRIPT = """
import importlib, importlib.abc, pkgutil, sys
BLOCKED = set(sys.argv[1].split(","))

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"test extra {name!r} imported")
        return None

for name in list(sys.modules):
    if name.split(".")[0] in BLOCKED:
        del sys.modules[name]
sys.meta_path.insert(0, Block())
import metrale_export
failed = []
for mod in pkgutil.walk_packages(metrale_export.__path__, "metrale_export."):
    try:
        importlib.import_module(mod.name)
    except ImportError as e:
        failed.append(f"{mod.name}: {e}")
print("\\n".join(failed))
"""


def test_no_package_module_imports_a_test_extra():
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, ",".join(TEST_EXTRAS)], capture_output=True,
                          text=True, timeout=600, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "", "modules importing a test extra:\n" + proc.stdout


def extra_imports(package: Path) -> list[str]:
    """Every import statement of a test extra in the package's sources, lazy ones included."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] in TEST_EXTRAS:
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno}: imports {name}")
    return found


def test_no_package_source_imports_a_test_extra_even_lazily():
    assert extra_imports(Path(__file__).resolve().parents[1] / "metrale_export") == []


def test_the_source_check_finds_a_lazy_import(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text("def f():\n    from transformers import AutoModel\n    return AutoModel\n")
    assert extra_imports(pkg) == ["pkg/m.py:2: imports transformers"]


def test_test_support_is_not_in_the_package():
    package = Path(__file__).resolve().parents[1] / "metrale_export"
    assert not list(package.rglob("testing.py")), "test support belongs in tests/support/"
