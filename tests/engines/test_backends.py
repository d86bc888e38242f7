"""Backend discovery and the messages that say what to install; lowering/option conflicts."""

import re

import pytest

from metrale_export.engines import backends
from metrale_export.engines.build import resolve_lowering, resolve_source
from metrale_export.engines.plan import UsageConflict, lowering_conflict
from metrale_export.errors import BuildError, InputError


def test_available_reports_versions_or_none():
    found = backends.available()
    assert set(found) == set(backends.BACKENDS)
    assert all(v is None or v[0].isdigit() for v in found.values())


def test_missing_messages_name_the_install_lines():
    msg = backends.missing_message(None)
    assert "pip install tensorrt " in msg
    assert "pip install tensorrt-rtx-cu13-libs==1.7.1.116 tensorrt-rtx-cu13-bindings==1.7.1.116" in msg
    assert "pip install tensorrt-rtx-cu13" in backends.missing_message("tensorrt-rtx", ImportError("x"))


def test_unknown_backend():
    with pytest.raises(BuildError, match="expected one of tensorrt, tensorrt-rtx"):
        backends.activate("onnxruntime")


@pytest.mark.parametrize(
    "backend, lowering, plugins, has_ops, expected",
    [
        ("tensorrt", None, None, True, "qdq"),
        ("tensorrt", None, "lib.so", True, "plugin"),
        ("tensorrt", "plugin", "lib.so", True, "plugin"),
        ("tensorrt-rtx", None, None, True, "qdq"),
        ("tensorrt-rtx", "plugin", None, False, "plugin"),  # nothing to plug in: fine
    ],
)
def test_resolve_lowering(backend, lowering, plugins, has_ops, expected):
    assert lowering_conflict(backend, lowering, plugins, has_ops) is None
    assert resolve_lowering(backend, lowering, plugins, has_ops) == expected


@pytest.mark.parametrize(
    "backend, lowering, plugins, words",
    [
        ("tensorrt-rtx", "plugin", "lib.so", "no IPluginV3 layers"),
        ("tensorrt-rtx", None, "lib.so", "no IPluginV3 layers"),
        ("tensorrt", "plugin", None, "needs --plugins LIB"),
        ("tensorrt", "qdq", "lib.so", "--plugins is only used by --lowering plugin"),
    ],
)
def test_lowering_conflicts_say_why(backend, lowering, plugins, words):
    assert words in lowering_conflict(backend, lowering, plugins, True)
    with pytest.raises(UsageConflict, match=re.escape(words)) as e:
        resolve_lowering(backend, lowering, plugins, True)
    assert e.value.param == ("--lowering" if lowering else "--plugins")


def test_resolve_source_errors(tmp_path):
    with pytest.raises(InputError, match="no such ONNX file or export directory"):
        resolve_source(tmp_path / "missing")
    with pytest.raises(InputError, match="expected an export directory with model.onnx"):
        resolve_source(tmp_path)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    with pytest.raises(InputError, match="not a readable ONNX model"):
        resolve_source(bad)
