"""The sha256 of the demo and hybrid-demo exports in every weight format, recorded in
``export_hashes.json`` beside this file, so a refactor that changes export bytes fails a test.

Regenerate the record after an INTENDED change of export bytes (a quantizer change, a new op
attribute, ...) with one command from the repository root, and commit the JSON with the change:

    python tests/support/export_hashes.py --write

``python tests/support/export_hashes.py`` (no flag) re-exports every case and reports the ones
that differ from the record (exit 1), without writing; case names after the flags (``demo-w4a16
hybrid-w8a8``) limit either to those cases. Invariants: a case is a pure function of
its name (seeded demo checkpoints, fixed options); the manifest is hashed with its only
machine-dependent field, ``model.checkpoint_path``, blanked.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

RECORD = Path(__file__).with_name("export_hashes.json")

# name -> (checkpoint, QuantRequest keywords, graph dtype)
CASES: dict[str, tuple[str, dict, str]] = {
    "demo-none": ("demo", dict(weight="none"), "float32"),
    "demo-w4a16": ("demo", dict(weight="w4a16"), "float32"),
    "demo-w4a16-g32-asym": ("demo", dict(weight="w4a16", group_size=32, symmetric=False), "float32"),
    "demo-w4a16-symmetric": ("demo", dict(weight="w4a16", symmetric=True), "float32"),
    "demo-w8a8": ("demo", dict(weight="w8a8"), "float32"),
    "demo-w8a8-block128": ("demo", dict(weight="w8a8", w8a8_weight_scales="block128",
                                        w8a8_activation_scales="row_block128"), "float32"),
    "demo-w4a4": ("demo", dict(weight="w4a4"), "float32"),
    "demo-w4a4-head-bf16": ("demo", dict(weight="w4a4", quantize_lm_head=True), "bfloat16"),
    "hybrid-none": ("hybrid", dict(weight="none"), "float32"),
    "hybrid-w4a16": ("hybrid", dict(weight="w4a16"), "float32"),
    "hybrid-w8a8": ("hybrid", dict(weight="w8a8"), "float32"),
    "hybrid-w4a4": ("hybrid", dict(weight="w4a4"), "float32"),
    # One op per checkpoint projection (--no-fuse-projections): the graphs exported before fusion.
    "demo-w4a16-unfused": ("demo", dict(weight="w4a16", fuse_projections=False), "float32"),
    "demo-w4a4-unfused": ("demo", dict(weight="w4a4", fuse_projections=False), "float32"),
    "hybrid-w8a8-unfused": ("hybrid", dict(weight="w8a8", fuse_projections=False), "float32"),
}
# The cases the default test suite exports (the others run under -m slow): the demo's four plain
# formats come from the suite's shared ``demo_exports`` fixture at no extra cost.
DEFAULT_CASES = ("demo-none", "demo-w4a16", "demo-w8a8", "demo-w4a4", "hybrid-w4a16")


def file_hashes(out_dir: Path) -> dict[str, str]:
    """sha256 of every file of an export directory (the manifest's checkpoint name and path
    blanked: they name the folder the checkpoint sits in, which differs between callers)."""
    out = {}
    for p in sorted(Path(out_dir).iterdir()):
        if not p.is_file():
            continue
        data = p.read_bytes()
        if p.name == "manifest.json":
            manifest = json.loads(data)
            manifest["model"]["checkpoint_path"] = None
            manifest["model"]["checkpoint"] = None
            data = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
        out[p.name] = hashlib.sha256(data).hexdigest()
    return out


def write_checkpoint(kind: str, where: Path) -> Path:
    from metrale_export.exporter import demo, demo_hybrid

    if kind == "demo":
        return demo.write_demo(where)
    return demo_hybrid.write_hybrid_demo(where)


def export_case(name: str, checkpoint: Path, out_dir: Path) -> Path:
    from metrale_export.exporter.export import ExportOptions, export
    from metrale_export.exporter.quantization import QuantRequest

    _, request, dtype = CASES[name]
    return export(checkpoint, out_dir, ExportOptions(request=QuantRequest(**request), dtype=dtype)).out_dir


def read_record() -> dict[str, dict[str, str]]:
    return json.loads(RECORD.read_text())


def compute(names=None) -> dict[str, dict[str, str]]:
    """Export every case (or ``names``) into a temporary directory and hash it."""
    names = list(names or CASES)
    out: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        ckpts: dict[str, Path] = {}
        for name in names:
            kind = CASES[name][0]
            if kind not in ckpts:
                ckpts[kind] = write_checkpoint(kind, Path(tmp) / kind)
            out[name] = file_hashes(export_case(name, ckpts[kind], Path(tmp) / name))
            print(f"{name}: {out[name].get('model.onnx', '?')[:16]}", file=sys.stderr)
    return out


def main(argv: list[str]) -> int:
    write = "--write" in argv
    names = [a for a in argv if not a.startswith("--")]
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        print(f"unknown cases {unknown}; the cases are {', '.join(CASES)}", file=sys.stderr)
        return 2
    got = compute(names or None)
    if write:
        record = {**(read_record() if names and RECORD.exists() else {}), **got}
        RECORD.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        print(f"wrote {RECORD} ({len(got)} of {len(record)} exports computed)")
        return 0
    record = read_record()
    differ = sorted(n for n in got if record.get(n) != got[n])
    for n in differ:
        print(f"{n}: differs from {RECORD.name}: {record.get(n)} != {got[n]}")
    if not differ:
        print(f"all {len(got)} exports match {RECORD.name}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    raise SystemExit(main(sys.argv[1:]))
