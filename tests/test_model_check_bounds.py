"""benchmarks/model_check.py's logits bounds against ONNX Runtime, on the CPU: the GPU model check
reads them for every model x format case, and a bound that cannot be computed fails the whole check
on the device (as one did at 0beaaab: a NameError there, after the build and the tests)."""

import pytest

from benchmarks import model_check
from metrale_export.ops import tolerances


@pytest.mark.parametrize("depth", [2, 4, 30])
def test_every_format_has_its_bound(depth):
    assert model_check._model_bound("w4a16", depth) == tolerances.MODEL_OTHER_DEVICE_BF16
    assert model_check._model_bound("w8a8", depth) == tolerances.end_to_end_bound({"fp8"}, depth)
    assert model_check._model_bound("w4a4", depth) == tolerances.MODEL_QUANTIZED
    assert model_check._model_bound("w8a8", 2 * depth) > model_check._model_bound("w8a8", depth)
