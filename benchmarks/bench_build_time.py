"""How long TensorRT-RTX takes to build each engine, against the build's own time estimate
(``engines.resources.estimate_engine_seconds``), on demo-shaped checkpoints of several depths.

    python -m benchmarks.bench_build_time [--out FILE.jsonl] [--cases NAME,...] [--list]
    python -m benchmarks.bench_build_time --out FILE.jsonl --record RESULT.json --commit SHA --machine WORDS --fitted NAME,...

Each case writes a demo checkpoint (``exporter.demo``: the dense demo, or its Qwen3-MoE variant,
with ``num_hidden_layers`` set), exports it as a user would (``metrale-export export``; MoE
experts dense, what the qdq lowering builds) and builds the default profiles with TensorRT-RTX
(``metrale-export build --backend tensorrt-rtx --json``). It records, per engine: the lowered
graph's nodes, the engine's optimization profiles, the seconds it took (the manifest's
``build_seconds``) and what the estimate said before it was built (``expected_build_seconds``),
and the load average before and after each build (the machine is shared: docs/engines.md, "How
long a build takes", says how the coefficients were fitted to these records). A JSON line per case
is appended to ``--out`` as it finishes, so an interrupted run keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import onnx

from metrale_export.engines import resources
from metrale_export.exporter import demo, demo_hybrid

# The held-out checkpoint's shape (benchmarks/results/heldout-*.md): 30 layers, hidden 384.
HELDOUT_CONFIG = {**demo.DEMO_CONFIG, "hidden_size": 384, "intermediate_size": 1024, "num_attention_heads": 6,
                  "vocab_size": 1000}
# name -> (config, weight format, layers[, profiles]: default, every default profile)
CASES = {
    "dense-w4a16-L2": (demo.DEMO_CONFIG, "w4a16", 2),
    "dense-w4a16-L4": (demo.DEMO_CONFIG, "w4a16", 4),
    "dense-w4a16-L8": (demo.DEMO_CONFIG, "w4a16", 8),
    "dense-w4a16-L16": (demo.DEMO_CONFIG, "w4a16", 16),
    "dense-w8a8-L2": (demo.DEMO_CONFIG, "w8a8", 2),
    "dense-w8a8-L8": (demo.DEMO_CONFIG, "w8a8", 8),
    "dense-w4a4-L2": (demo.DEMO_CONFIG, "w4a4", 2),
    "dense-w4a4-L8": (demo.DEMO_CONFIG, "w4a4", 8),
    "moe-w8a8-L2": (demo.MOE_DEMO_CONFIG, "w8a8", 2),
    "moe-w8a8-L4": (demo.MOE_DEMO_CONFIG, "w8a8", 4),
    "heldout-w4a16-L30": (HELDOUT_CONFIG, "w4a16", 30, "1,2-8"),
    # Not fitted on: the check of the fitted estimate.
    "hybrid-w4a16-L4": (demo_hybrid.HYBRID_DEMO_CONFIG, "w4a16", 4),
    "moe-w4a4-L4": (demo.MOE_DEMO_CONFIG, "w4a4", 4),
    "dense-w8a8-L16": (demo.DEMO_CONFIG, "w8a8", 16),
}


def _cli() -> list[str]:
    return [sys.executable, "-m", "metrale_export.cli.main"]


def lowered_nodes(engine_dir: Path) -> dict[str, int]:
    """Lowered graph (relative file) -> its node count."""
    out = {}
    for p in sorted((engine_dir / "onnx").glob("*.onnx")):
        if not p.name.endswith(".shared.onnx"):
            out[f"onnx/{p.name}"] = len(onnx.load(str(p), load_external_data=False).graph.node)
    return out


def run_case(name: str, work: Path) -> dict:
    config, fmt, layers, *profiles = CASES[name]
    ckpt, out = work / f"{name}-ckpt", work / f"{name}-export"
    if config is demo_hybrid.HYBRID_DEMO_CONFIG:  # its layer types are listed: the demo as it is
        demo_hybrid.write_hybrid_demo(ckpt)
    else:
        demo.write_demo(ckpt, config={**config, "num_hidden_layers": layers})
    export = [*_cli(), "export", str(ckpt / "model.safetensors"), "-o", str(out), "--weight-quantization", fmt,
              "--force", "--quiet"]
    if "num_experts" in config:
        export += ["--moe-experts", "dense"]
    started = time.perf_counter()
    subprocess.run(export, check=True)
    export_s = time.perf_counter() - started
    load_before = os.getloadavg()
    started = time.perf_counter()
    build = [*_cli(), "build", str(out), "--backend", "tensorrt-rtx", "--json", "--quiet"]
    done = subprocess.run(build + (["--profiles", profiles[0]] if profiles else []),
                          check=True, capture_output=True, text=True)
    build_s = time.perf_counter() - started
    manifest = json.loads(done.stdout)
    nodes = lowered_nodes(out / "engines")
    engines = [{"label": e["label"], "profiles": len(e["optimization_profiles"]), "nodes": nodes.get(e["onnx"]),
                "weight_bytes": e["weights"]["bytes"], "seconds": e["build_seconds"],
                "expected": e.get("expected_build_seconds")} for e in manifest["engines"]]
    return {"case": name, "format": fmt, "layers": layers, "moe": "num_experts" in config,
            "export_seconds": round(export_s, 1), "build_wall_seconds": round(build_s, 1),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(), "engines": engines}


def record(lines: Path, commit: str, machine: str, fitted: list[str]) -> dict:
    """The calibration record (benchmarks/results/build-time-*.json) of a ``--out`` file: every case,
    each engine with what the estimate at this commit says, and which cases the coefficients were
    fitted on."""
    cases = [json.loads(line) for line in lines.read_text().splitlines() if line.strip()]
    for case in cases:
        case["fitted_on"] = case["case"] in fitted
        for e in case["engines"]:
            e["estimate_now"] = round(resources.estimate_engine_seconds("tensorrt-rtx", e["nodes"], e["profiles"]), 2)
    return {"what": "TensorRT-RTX engine build times against engines.resources.estimate_engine_seconds",
            "commit": commit, "machine": machine, "backend": "tensorrt-rtx", "stated_factor": resources.TIME_ESTIMATE_FACTOR,
            "model": {"engine_seconds": resources.ENGINE_SECONDS["tensorrt-rtx"],
                      "profile_seconds_at_1000_nodes": resources.PROFILE_SECONDS_AT_1000_NODES["tensorrt-rtx"],
                      "node_exponent": resources.NODE_EXPONENT},
            "cases": cases}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("build/bench_build_time.jsonl"))
    ap.add_argument("--work", type=Path, default=Path("build/bench_build_time"))
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--record", type=Path, help="Write the calibration record of --out to this JSON file.")
    ap.add_argument("--commit", default="")
    ap.add_argument("--machine", default="")
    ap.add_argument("--fitted", default="", help="The cases the coefficients were fitted on (for --record).")
    args = ap.parse_args()
    if args.list:
        print("\n".join(CASES))
        return
    if args.record:
        doc = record(args.out, args.commit, args.machine, args.fitted.split(","))
        args.record.write_text(json.dumps(doc, indent=1) + "\n")
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for name in args.cases.split(","):
        result = run_case(name, args.work)
        with open(args.out, "a") as f:
            f.write(json.dumps(result) + "\n")
        total = sum(e["seconds"] for e in result["engines"])
        expected = [e["expected"] for e in result["engines"]]
        est = f", estimate {sum(expected):.0f} s" if None not in expected else ""
        print(f"{name}: {len(result['engines'])} engines in {total:.0f} s{est} "
              f"(load {result['load_before'][0]:.1f} -> {result['load_after'][0]:.1f})", flush=True)


if __name__ == "__main__":
    main()
