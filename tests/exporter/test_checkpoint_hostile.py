"""Corrupt and hostile checkpoints: each ends in one CheckpointError (or ConfigError for config.json)
that names the file and what was wrong, nothing is allocated on a header's word, and an export of
a broken checkpoint leaves no output behind."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from metrale_export.errors import CheckpointError, InputError
from metrale_export.exporter import demo
from metrale_export.exporter.checkpoint import Checkpoint
from metrale_export.exporter.export import ExportOptions, export
from metrale_export.exporter.quantization import QuantRequest


def write_raw(path: Path, header: dict, data: bytes = b"", pad: bool = True) -> Path:
    raw = json.dumps(header).encode()
    if pad:
        raw += b" " * ((-len(raw)) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    (path.parent / "config.json").write_text(json.dumps(demo.DEMO_CONFIG))
    return path


def entry(dtype="F32", shape=(2, 2), start=0, end=16):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": [start, end]}


CASES = {
    "overlap": ({"a": entry(start=0, end=16), "b": entry(start=8, end=24)}, 24, "overlap"),
    "out of range": ({"a": entry(start=0, end=16)}, 8, r"data offsets \[0, 16\)"),
    "size mismatch": ({"a": entry(shape=(3, 3), start=0, end=16)}, 16, "do not hold"),
    "absurd shape": ({"a": entry(shape=(1 << 40, 1 << 40), start=0, end=16)}, 16, "do not hold"),
    "absurd dim on empty": ({"a": entry(shape=(0, 1 << 60), start=0, end=0)}, 0, "absurd shape"),
    "negative dim": ({"a": entry(shape=(-2, -8), start=0, end=16)}, 16, "negative"),
    "wrong dtype": ({"a": entry(dtype="F128")}, 16, "unsupported dtype"),
    "dtype not a string": ({"a": entry(dtype=["F32"])}, 16, "unsupported dtype"),
    "float shape": ({"a": {"dtype": "F32", "shape": [2.0, 2], "data_offsets": [0, 16]}}, 16, "malformed shape"),
    "bool offsets": ({"a": {"dtype": "F32", "shape": [], "data_offsets": [False, True]}}, 16, "malformed data_offsets"),
    "huge float offsets": ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 1e400]}}, 16, "malformed data_offsets"),
    "entry not an object": ({"a": [1, 2, 3]}, 16, "malformed header entry"),
    "extra key": ({"a": {**entry(), "evil": 1}}, 16, "malformed header entry"),
    "metadata not an object": ({"__metadata__": [1], "a": entry()}, 16, "__metadata__"),
    "too many dims": ({"a": entry(shape=(1,) * 9, start=0, end=4)}, 4, "malformed shape"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_corrupt_header_is_one_clear_error(tmp_path, case):
    header, nbytes, pattern = CASES[case]
    path = write_raw(tmp_path / "model.safetensors", header, b"\0" * nbytes)
    with pytest.raises(CheckpointError, match=pattern) as e:
        Checkpoint.open(tmp_path)
    assert str(path) in str(e.value)


@pytest.mark.parametrize("blob,pattern", [
    (b"", "shorter than its 8-byte"),
    (struct.pack("<Q", 1 << 62) + b"{}", "claims"),
    (struct.pack("<Q", 4) + b"\xff\xfe{}", "not a readable"),
    (struct.pack("<Q", 2) + b"[]", "expected a JSON object"),
    (struct.pack("<Q", 20000) + b"[" * 10000 + b"]" * 10000, "not a readable"),  # deep nesting
])
def test_garbage_files(tmp_path, blob, pattern):
    (tmp_path / "model.safetensors").write_bytes(blob)
    (tmp_path / "config.json").write_text(json.dumps(demo.DEMO_CONFIG))
    with pytest.raises(CheckpointError, match=pattern):
        Checkpoint.open(tmp_path)


def test_no_allocation_on_the_headers_word(tmp_path, monkeypatch):
    """A header claiming a 2^40-element tensor is refused before torch.empty is ever called."""
    calls = []
    real = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: calls.append(a) or real(*a, **k))
    write_raw(tmp_path / "model.safetensors", {"a": entry(shape=(1 << 20, 1 << 20), start=0, end=1 << 42)}, b"\0" * 64)
    with pytest.raises(CheckpointError):
        Checkpoint.open(tmp_path)
    assert calls == []


def test_file_truncated_after_open(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"a": torch.ones(64, 64)}, str(path))
    (tmp_path / "config.json").write_text("{}")
    ckpt = Checkpoint.open(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointError, match="truncated"):
        ckpt.get("a")


def _sharded(tmp_path: Path) -> Path:
    tensors = demo.demo_tensors(demo.DEMO_CONFIG)
    names = sorted(tensors)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    weight_map = {}
    for fname, part in shards.items():
        save_file({n: tensors[n] for n in part}, str(tmp_path / fname))
        weight_map.update({n: fname for n in part})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (tmp_path / "config.json").write_text(json.dumps(demo.DEMO_CONFIG))
    return tmp_path


def test_index_naming_a_missing_shard(tmp_path):
    d = _sharded(tmp_path)
    (d / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="names shard model-00002-of-00002.safetensors, which does not exist"):
        Checkpoint.open(d)


@pytest.mark.parametrize("shard,pattern", [
    ("../outside.safetensors", "outside the checkpoint directory"),
    ("/etc/passwd", "outside the checkpoint directory"),
    (7, "is not a file name"),
])
def test_index_with_paths_outside_the_checkpoint(tmp_path, shard, pattern):
    d = _sharded(tmp_path)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.norm.weight"] = shard
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=pattern):
        Checkpoint.open(d)


def test_index_disagreeing_with_the_shards(tmp_path):
    d = _sharded(tmp_path)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.layers.9.mlp.up_proj.weight"] = "model-00001-of-00002.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"names tensor 'model.layers.9.mlp.up_proj.weight'.*does not hold it"):
        Checkpoint.open(d)


def test_index_not_json(tmp_path):
    d = _sharded(tmp_path)
    (d / "model.safetensors.index.json").write_text("{nope")
    with pytest.raises(CheckpointError, match="not a readable safetensors index"):
        Checkpoint.open(d)


@pytest.mark.parametrize("change,pattern", [
    ({"hidden_size": 128}, r"q_proj.weight': expected shape \[256, 128\], found \[256, 256\]"),
    ({"num_hidden_layers": 3}, "model.layers.2.* is missing"),
    ({"intermediate_size": 1 << 40}, "expected shape"),
])
def test_config_disagreeing_with_tensors_leaves_no_output(tmp_path, change, pattern):
    ckpt_dir = tmp_path / "ckpt"
    demo.write_demo(ckpt_dir)
    cfg = json.loads((ckpt_dir / "config.json").read_text())
    cfg.update(change)
    (ckpt_dir / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    with pytest.raises(CheckpointError, match=pattern):
        export(ckpt_dir, out, ExportOptions(request=QuantRequest(weight="w4a16")))
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no temporary directory left


def test_corrupt_data_mid_export_leaves_no_output(tmp_path):
    """A NaN in a weight is found while streaming: the half-written export is removed."""
    ckpt_dir = tmp_path / "ckpt"
    demo.write_demo(ckpt_dir)
    t = demo.demo_tensors(demo.DEMO_CONFIG)
    t["model.layers.1.mlp.down_proj.weight"][3, 3] = float("nan")
    save_file(t, str(ckpt_dir / "model.safetensors"))
    out = tmp_path / "out"
    with pytest.raises(CheckpointError, match="down_proj.weight.*NaN"):
        export(ckpt_dir, out, ExportOptions(request=QuantRequest(weight="w8a8")))
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_declared_on_a_float_checkpoint_is_refused(tmp_path):
    demo.write_demo(tmp_path)
    with pytest.raises(InputError, match="declares no quantization format"):
        export(tmp_path, tmp_path / "out", ExportOptions(request=QuantRequest(weight="declared")))


def test_unknown_quant_method_is_refused(tmp_path):
    demo.write_demo(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="'bitsandbytes', which has no reader"):
        export(tmp_path, tmp_path / "out", ExportOptions(request=QuantRequest(weight="declared")))
