#!/usr/bin/env bash
# One device call for the grouped-expert kernels and plugins: the MoE GPU tests, the plugin
# conformance harness (every plugin, grouped ones included, through enqueue with no TensorRT
# builder, compared bit for bit with the torch CUDA op), then the MoE benchmark. Logs and tables go
# to $OUT (at most 8 files: tests.log, conformance.log, model_check.{log,md}, bench.log, moe-*.md/json
# and build.log when it rebuilds).
#
# The kernels and the plugin library are built off the device (make -C plugins all trt, whose
# ptxas report is read there) and carried in build/; where they do not load here they are rebuilt
# (-j16, with the TensorRT headers carried in third_party/TensorRT/include).
# METRALE_COMMIT: the commit of the tree (a carried copy has no .git).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/tests.log"
usable=1
python3 -c "import ctypes; ctypes.CDLL('build/plugins/libmetrale_kernels.so'); \
ctypes.CDLL('build/plugins-trt/libmetrale_plugins.so')" >> "$OUT/tests.log" 2>&1 || usable=0
build/plugins-trt/metrale_conformance > /dev/null 2>&1; [ $? -eq 2 ] || usable=0  # 2: its usage message
if [ $usable = 0 ]; then
  echo "carried build unusable here: rebuilding" | tee -a "$OUT/tests.log"
  rm -rf build/plugins build/plugins-trt
  (time make -C plugins -j16 all trt) > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
  mkdir -p build/plugins-trt && cp build/plugins/libmetrale_kernels.so build/plugins-trt/
fi
timeout ${MOE_TEST_S:-170} python3 -m pytest tests/gpu/test_moe_kernels.py -m gpu -rs --confcutdir=tests/gpu \
  -p no:cacheprovider 2>&1 | tee -a "$OUT/tests.log" | tail -25
timeout ${CONF_S:-150} python3 tests/plugins/plugin_conformance_driver.py --build build/plugins-trt \
  --out /tmp/conformance > "$OUT/conformance.log" 2>&1
echo "conformance driver exit $?" >> "$OUT/conformance.log"
grep -E "^(FAIL|SUMMARY)" /tmp/conformance/harness.log | tail -15 | tee -a "$OUT/conformance.log"
grep -E "FAIL|CONFORMANCE|reference" "$OUT/conformance.log" | tail -15
# The demo and hybrid models through the CUDA ops (grouped-expert ops included) against ONNX Runtime
# references made on the CPU (python -m benchmarks.model_check prepare DIR), when DIR is carried.
if [ -n "${MODEL_CHECK_DIR:-}" ]; then
  timeout ${MODEL_CHECK_S:-120} python3 -m benchmarks.model_check gpu "$MODEL_CHECK_DIR" "$OUT" > "$OUT/model_check.log" 2>&1
  echo "model check exit $?" | tee -a "$OUT/model_check.log"
fi
timeout ${MOE_BENCH_S:-170} python3 -m benchmarks.bench_moe --out "$OUT" > "$OUT/bench.log" 2>&1
tail -4 "$OUT/bench.log"
