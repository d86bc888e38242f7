"""What a TensorRT-RTX engine's bytes are, and which builder settings change them (issue 25).

Builds one profile of an export (default: the demo's, ``make demo``) with ``metrale-export build``
once per builder-config variant (each applied on top of the build's own ``CreateConfigRTX``), and
prints per engine: its bytes, the fraction that is printable text, the number of ``__global__``
functions in that text (Myelin's generated CUDA C++, compiled by TensorRT-RTX's JIT at load time),
and what zlib and xz make of it. Each variant runs in a child process (one backend a process).

    python benchmarks/bench_engine_size.py                           # build/demo.metrale, rows 2-8
    python benchmarks/bench_engine_size.py --export DIR --profiles 1 --json

Invariants: nothing is written outside ``--workdir`` (a temporary directory by default, removed at
the end); a variant TensorRT-RTX refuses is reported, not raised.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import re
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Name -> settings applied to the IBuilderConfig after the build's own (see _child).
VARIANTS = {
    "default": {},
    "profiling_verbosity NONE": {"profiling_verbosity": "NONE"},
    "builder_optimization_level 0": {"builder_optimization_level": 0},
    "tiling_optimization_level NONE": {"tiling_optimization_level": "NONE"},
    "max_num_tactics 1": {"max_num_tactics": 1},
    "tactic sources none": {"tactic_sources": 0},
    "TF32 off": {"clear_flags": ["TF32"]},
    "EXCLUDE_LEAN_RUNTIME": {"flags": ["EXCLUDE_LEAN_RUNTIME"]},
    "targets 8.0": {"targets": [[8, 0]]},
    "targets 8.9 + 12.0": {"targets": [[8, 9], [12, 0]]},
}


def content(data: bytes) -> dict:
    """What an engine file holds: printable share, kernels in its source text, compressed sizes."""
    printable = sum(1 for c in data if 32 <= c < 127 or c in (9, 10, 13))
    return {"bytes": len(data), "printable": round(printable / max(len(data), 1), 4),
            "global_functions": len(re.findall(rb"__global__", data)),
            "zlib_bytes": len(zlib.compress(data, 6)), "xz_bytes": len(lzma.compress(data, preset=6))}


def _child(spec: dict, argv: list[str]) -> int:
    """Run ``metrale-export build`` with ``spec`` applied to TensorRT-RTX's builder config."""
    from metrale_export.engines import backends

    backends.activate("tensorrt-rtx")
    import polygraphy.backend.tensorrt_rtx.config as rtx_config

    original = rtx_config.CreateConfigRTX.call_impl

    def call_impl(self, builder, network):
        config = original(self, builder, network)
        trt = backends.activate("tensorrt-rtx").module
        for key, value in spec.items():
            if key == "flags":
                for flag in value:
                    config.set_flag(getattr(trt.BuilderFlag, flag))
            elif key == "clear_flags":
                for flag in value:
                    config.clear_flag(getattr(trt.BuilderFlag, flag))
            elif key == "tactic_sources":
                config.set_tactic_sources(value)
            elif key in ("profiling_verbosity", "tiling_optimization_level"):
                enum = trt.ProfilingVerbosity if key == "profiling_verbosity" else trt.TilingOptimizationLevel
                setattr(config, key, getattr(enum, value))
            elif key != "targets":
                setattr(config, key, value)
        return config

    rtx_config.CreateConfigRTX.call_impl = call_impl
    from metrale_export.cli.main import cli

    targets = [a for t in spec.get("targets", []) for a in ("--rtx-target", f"{t[0]}.{t[1]}")]
    try:
        cli.main(args=["build", *argv, *targets], prog_name="metrale-export")
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--child"]:  # a variant's build: the rest goes to metrale-export build as it is
        return _child(json.loads(argv[1]), argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--export", type=Path, default=ROOT / "build" / "demo.metrale")
    ap.add_argument("--profiles", default="2-8")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names of VARIANTS")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        for name in args.variants.split(","):
            out = Path(tmp) / re.sub(r"\W+", "_", name)
            cmd = [sys.executable, __file__, "--child", json.dumps(VARIANTS[name]), str(args.export),
                   "-o", str(out), "--profiles", args.profiles, "-q"]
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
            engines = sorted(out.glob("*.engine")) if out.is_dir() else []
            row = {"variant": name, "rc": proc.returncode}
            if engines:
                row.update(content(engines[0].read_bytes()))
            else:
                row["error"] = (proc.stderr.strip().splitlines() or ["no engine"])[-1][:200]
            rows.append(row)
            if not args.json:
                print(" | ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
