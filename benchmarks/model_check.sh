#!/usr/bin/env bash
# On the GPU machine: build the kernels, then the demo model through the CUDA ops against the ONNX
# Runtime references made on the CPU (python -m benchmarks.model_check prepare .devicecarry), and
# the row-invariance report. Tables go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
if [ ! -f build/plugins/libmetrale_kernels.so ]; then
  (time make -C plugins -j16) > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
fi
python3 -m benchmarks.model_check gpu "${1:-.devicecarry}" "$OUT" 2>&1 | tee "$OUT/model_check.log" | tail -60
