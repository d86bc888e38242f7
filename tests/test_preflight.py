"""The main job's up-front checks (metrale_export/preflight.py): plain bad input is refused in one
line, exit 2, before torch or onnx is imported (they took 16-36 s to reach on a loaded machine, and
NaN weights were found only after tracing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from metrale_export.exporter import safetensors_files as st
from metrale_export.exporter.checkpoint import _DTYPES
from metrale_export.exporter.demo import demo_tensors
from support.checkpoints import write_small_demo

# A fresh interpreter runs each case through the real CLI and reports, per case, the exit code, the
# error line and whether torch or onnx had been imported when the error came back.
_CASES_SCRIPT = """
import json, sys
from click.testing import CliRunner
from metrale_export.cli.main import cli
out = []
for args in json.loads(sys.argv[1]):
    r = CliRunner().invoke(cli, args)
    errors = [l for l in r.output.splitlines() if l.startswith("Error:")]
    out.append({"code": r.exit_code, "errors": errors, "heavy": [m for m in ("torch", "onnx") if m in sys.modules]})
print(json.dumps(out))
"""


def _run_cases(cases: list[list[str]]) -> list[dict]:
    r = subprocess.run([sys.executable, "-c", _CASES_SCRIPT, json.dumps([[str(a) for a in c] for c in cases])],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> Path:
    return write_small_demo(tmp_path_factory.mktemp("tiny"), vocab_size=64, num_hidden_layers=2)


def _with_nan(src: Path, dst: Path, tensor: str) -> Path:
    dst.mkdir()
    (dst / "config.json").write_text((src / "config.json").read_text())
    tensors = demo_tensors(json.loads((src / "config.json").read_text()))
    tensors[tensor].view(-1)[7] = float("nan")
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


def _missing_backend() -> str | None:
    from metrale_export.engines import backends

    return next((name for name, version in backends.available().items() if version is None), None)


def test_bad_input_is_refused_before_torch_or_onnx_is_imported(tiny_checkpoint, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "hostname").write_text("a text file\n")
    nan = _with_nan(tiny_checkpoint, tmp_path / "nan", "model.layers.1.mlp.down_proj.weight")
    out = tmp_path / "out"
    cases = {
        "no checkpoint in the directory": ([tmp_path / "empty"], "no model.safetensors.index.json"),
        "a layer that does not exist": ([tiny_checkpoint, "--layers", "99"], "layer 99 does not exist"),
        "--plugins that is no shared library": ([tiny_checkpoint, "--plugins", tmp_path / "hostname"],
                                                "not a shared library"),
        "profiles past the model's positions": ([tiny_checkpoint, "--profiles", "1-5000000"], "1-5000000"),
        "a dtype the reference cannot run": ([tiny_checkpoint, "--dtype", "bfloat16"], "--dtype bfloat16"),
        "NaN weights": ([nan], "'model.layers.1.mlp.down_proj.weight' holds NaN"),
        "NaN weights, export alone": (["export", nan], "holds NaN"),
    }
    backend = _missing_backend()
    if backend is not None:  # where every backend imports there is nothing to refuse
        cases["a --backend that does not import"] = ([tiny_checkpoint, "--backend", backend], "does not import")
    results = _run_cases([[*args, "-o", out] for args, _ in cases.values()])
    for (what, (_, words)), got in zip(cases.items(), results):
        assert got["code"] == 2, (what, got)
        assert len(got["errors"]) == 1 and words in got["errors"][0], (what, got)
        assert got["heavy"] == [], f"{what}: refused only after importing {got['heavy']}"
    assert not out.exists()


def test_the_profiles_hint_suggests_only_what_is_accepted(tiny_checkpoint, tmp_path):
    """The hint of a range past the model's positions said 'raise --max-context', which is then refused."""
    from click.testing import CliRunner

    from metrale_export.cli.main import cli

    r = CliRunner().invoke(cli, [str(tiny_checkpoint), "--profiles", "1-5000000", "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and "raise --max-context" not in r.output, r.output
    assert "end the last range at 4096" in r.output, r.output
    # Within the model's positions, the hint names the --max-context that is then accepted.
    r = CliRunner().invoke(cli, [str(tiny_checkpoint), "--profiles", "1-3000", "--max-context", "2048",
                                 "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and "raise --max-context to 3000" in r.output, r.output


def test_nan_weights_of_layers_left_out_are_not_read(tiny_checkpoint, tmp_path):
    from metrale_export.preflight import check_finite, read_checkpoint

    nan = _with_nan(tiny_checkpoint, tmp_path / "nan", "model.layers.1.self_attn.q_proj.weight")
    check_finite(read_checkpoint(nan, "0"))  # layer 1 is not exported: not read, not refused
    with pytest.raises(Exception, match="q_proj.weight' holds NaN"):
        check_finite(read_checkpoint(nan, None))


@pytest.mark.parametrize("dtype", sorted(st._NONFINITE))
def test_the_streamed_finite_check_finds_nan_and_inf_of_every_float_dtype(tmp_path, dtype, monkeypatch):
    monkeypatch.setattr(st, "_CHUNK", 100)  # many reads per tensor
    torch_dtype = _DTYPES[dtype]
    values = torch.linspace(-2, 2, 1000).to(torch_dtype)
    path = tmp_path / "t.safetensors"
    save_file({"a": values, "b": values.clone()}, str(path))
    assert st.nonfinite_tensor([path]) is None
    bad = [float("nan")] + ([] if dtype == "F8_E4M3" else [float("inf"), float("-inf")])  # e4m3: no inf
    for value in bad:
        b = values.clone()
        b[999] = value
        save_file({"a": values, "b": b}, str(path))
        assert st.nonfinite_tensor([path]) == (path, "b"), value


def test_the_light_readers_name_the_same_dtypes_as_the_checkpoint_reader():
    assert set(st.ITEMSIZE) == set(_DTYPES)
    assert all(_DTYPES[k].itemsize == v for k, v in st.ITEMSIZE.items())
