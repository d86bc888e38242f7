#!/usr/bin/env bash
# One device call for the grouped-expert kernels: build (-j16), the MoE GPU tests (plus the dense
# kernels' row-invariance tests the MoE kernels share code with), the MoE benchmark. Logs and
# tables go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true
(time make -C plugins -j16) > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
grep -h -E "[1-9][0-9]* bytes spill" build/plugins/obj/*/*.ptxas.log > "$OUT/spills.txt" || true
timeout 200 python3 -m pytest tests/gpu/test_moe_kernels.py -m gpu -rs -x --confcutdir=tests/gpu -p no:cacheprovider \
  2>&1 | tee "$OUT/tests.log" | tail -30
timeout 60 python3 -m pytest tests/gpu/test_proj_kernels.py -m gpu -q --confcutdir=tests/gpu -p no:cacheprovider \
  -k "row_invariance and (w4a16-128 or w8a8-channel-fp8-row-n200)" 2>&1 | tee "$OUT/tests_dense.log" | tail -5
timeout 280 python3 -m benchmarks.bench_moe --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -70
