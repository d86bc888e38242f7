#!/usr/bin/env bash
# One device call for the grouped-expert kernels: build (-j16), the MoE GPU tests, the MoE
# benchmark, then the dense kernels' row-invariance tests whose tiles the MoE kernels share.
# Logs and tables go to $OUT.  METRALE_COMMIT: the commit of the tree (a carried copy has no .git).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
(time make -C plugins -j16) > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
grep -H -B2 -E "[1-9][0-9]* bytes spill" build/plugins/obj/*/*.ptxas.log > "$OUT/spills.txt" || true
timeout ${MOE_TEST_S:-100} python3 -m pytest tests/gpu/test_moe_kernels.py -m gpu -rs --confcutdir=tests/gpu \
  -p no:cacheprovider 2>&1 | tee "$OUT/tests.log" | tail -30
timeout ${MOE_BENCH_S:-160} python3 -m benchmarks.bench_moe --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -60
timeout ${DENSE_TEST_S:-30} python3 -m pytest tests/gpu/test_proj_kernels.py -m gpu -q --confcutdir=tests/gpu \
  -p no:cacheprovider -k "row_invariance" 2>&1 | tee "$OUT/tests_dense.log" | tail -5
