"""Property-based fuzzing of the safetensors reader: valid headers, mutated structurally (values
replaced, offsets and shapes shifted, keys dropped or added) or byte by byte (flips, truncation, a
bad length prefix). The reader must open the file and read every tensor, or raise CheckpointError:
never another exception, never a crash. Bounded: about 200 examples per property, no deadline."""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metrale_export.errors import CheckpointError
from metrale_export.exporter.checkpoint import _DTYPES, Checkpoint

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    database=None, derandomize=True)

# A valid file: three tensors of different dtypes, packed back to back.
_TENSORS = [("a.weight", "F32", [4, 3]), ("b.bias", "BF16", [5]), ("c.codes", "I8", [2, 2, 2])]


def valid_header() -> tuple[dict, int]:
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape in _TENSORS:
        n = _DTYPES[dtype].itemsize
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    return header, off


def file_bytes(header: dict, data_len: int, length_prefix: int | None = None) -> bytes:
    raw = json.dumps(header).encode()
    raw += b" " * ((-len(raw)) % 8)
    n = len(raw) if length_prefix is None else length_prefix
    return struct.pack("<Q", n) + raw + bytes(range(256)) * (data_len // 256) + bytes(data_len % 256)


def check(blob: bytes) -> None:
    """Open and read everything; only CheckpointError may escape."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "model.safetensors"
        path.write_bytes(blob)
        (Path(d) / "config.json").write_text("{}")
        try:
            ckpt = Checkpoint.open(path)
            for name in ckpt.names():
                t = ckpt.get(name)
                assert tuple(t.shape) == ckpt.info(name).shape
        except CheckpointError:
            pass


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
fields = st.sampled_from(["dtype", "shape", "data_offsets"])
names = st.sampled_from([n for n, _, _ in _TENSORS] + ["__metadata__"])


@st.composite
def mutated_headers(draw) -> tuple[dict, int]:
    header, data_len = valid_header()
    for _ in range(draw(st.integers(1, 3))):
        name = draw(names)
        op = draw(st.sampled_from(["replace", "offset", "shape", "dtype", "drop", "add", "entry"]))
        entry = header.get(name)
        if op == "replace" and isinstance(entry, dict):
            entry[draw(fields)] = draw(json_values)
        elif op == "offset" and isinstance(entry, dict) and isinstance(entry.get("data_offsets"), list):
            i = draw(st.integers(0, 1))
            if len(entry["data_offsets"]) > i and isinstance(entry["data_offsets"][i], int):
                entry["data_offsets"][i] += draw(st.integers(-64, 64) | st.integers(-(1 << 64), 1 << 64))
        elif op == "shape" and isinstance(entry, dict):
            entry["shape"] = draw(st.lists(st.integers(-4, 1 << 40) | st.integers(0, 8), max_size=10))
        elif op == "dtype" and isinstance(entry, dict):
            entry["dtype"] = draw(st.sampled_from(sorted(_DTYPES)) | st.text(max_size=5))
        elif op == "drop":
            header.pop(name, None)
        elif op == "add":
            header[draw(st.text(max_size=6))] = draw(json_values)
        elif op == "entry":
            header[name] = draw(json_values)
    data_len += draw(st.integers(-16, 16))
    return header, max(data_len, 0)


@SETTINGS
@given(mutated_headers())
def test_mutated_headers_open_or_raise_checkpoint_error(case):
    header, data_len = case
    check(file_bytes(header, data_len))


@SETTINGS
@given(st.data())
def test_mutated_bytes_open_or_raise_checkpoint_error(data):
    header, data_len = valid_header()
    blob = bytearray(file_bytes(header, data_len))
    op = data.draw(st.sampled_from(["flip", "truncate", "prefix", "splice"]))
    if op == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, len(blob) - 1))
            blob[i] = data.draw(st.integers(0, 255))
    elif op == "truncate":
        blob = blob[: data.draw(st.integers(0, len(blob)))]
    elif op == "prefix":
        blob[:8] = struct.pack("<Q", data.draw(st.integers(0, (1 << 64) - 1)))
    else:
        i = data.draw(st.integers(8, len(blob)))
        blob[i:i] = data.draw(st.binary(max_size=32))
    check(bytes(blob))


def test_the_unmutated_file_reads():
    header, data_len = valid_header()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "model.safetensors"
        path.write_bytes(file_bytes(header, data_len))
        (Path(d) / "config.json").write_text("{}")
        ckpt = Checkpoint.open(path)
        assert ckpt.names() == sorted(n for n, _, _ in _TENSORS)
        assert ckpt.get("a.weight").shape == (4, 3)
