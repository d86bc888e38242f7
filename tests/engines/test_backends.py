"""Backend discovery and the messages that say what to install; lowering/option conflicts."""

import re

import pytest

from metrale_export.engines import backends
from metrale_export.engines.build import resolve_lowering, resolve_source
from metrale_export.engines.plan import UsageConflict, lowering_check
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
    assert lowering_check(backend, lowering, plugins, has_ops) == (True, ())
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
    ok, reasons = lowering_check(backend, lowering, plugins, True)
    assert not ok and any(words in r for r in reasons)
    with pytest.raises(UsageConflict, match=re.escape(words)) as e:
        resolve_lowering(backend, lowering, plugins, True)
    assert e.value.param == ("--lowering" if lowering else "--plugins")


def test_a_lowering_with_two_faults_reports_both():
    """--lowering plugin for TensorRT-RTX without --plugins: both reasons, on one line, blaming --lowering."""
    ok, reasons = lowering_check("tensorrt-rtx", "plugin", None, True)
    assert not ok and len(reasons) == 2
    assert "no IPluginV3 layers" in reasons[0] and "needs --plugins LIB" in reasons[1]
    with pytest.raises(UsageConflict) as e:
        resolve_lowering("tensorrt-rtx", "plugin", None, True)
    assert str(e.value) == "; ".join(reasons) and "\n" not in str(e.value) and e.value.param == "--lowering"


def test_resolve_source_errors(tmp_path):
    with pytest.raises(InputError, match="no such ONNX file or export directory"):
        resolve_source(tmp_path / "missing")
    with pytest.raises(InputError, match="expected an export directory with model.onnx"):
        resolve_source(tmp_path)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    with pytest.raises(InputError, match="not a readable ONNX model"):
        resolve_source(bad)


def test_an_activation_with_two_faults_reports_both():
    """Another backend already active and Polygraphy's loaders bound to it: both reasons."""
    ok, reasons = backends.activation_check("tensorrt", "tensorrt-rtx", True)
    assert not ok and len(reasons) == 2
    assert "already builds with tensorrt-rtx" in reasons[0] and "POLYGRAPHY_USE_TENSORRT_RTX=0" in reasons[1]
    assert backends.activation_check("tensorrt", None, None).ok
    assert backends.activation_check("tensorrt", "tensorrt", False).ok
