#!/usr/bin/env bash
# The plugin conformance harness on the GPU from a carried build (no build there): every plugin,
# dense and grouped, through IPluginV3 up to enqueue with no TensorRT builder, each y compared bit
# for bit with the torch CUDA op, row invariant across M, and within tolerance of the CPU reference
# (tests/plugins/plugin_conformance_driver.py). Writes $OUT/conformance.log (the driver's table and
# verdict), harness.log and comparison.txt.
#
# Carry, built here with `make -C plugins all trt` at the commit under test:
#   build/plugins-trt/libmetrale_plugins.so build/plugins-trt/metrale_conformance
#   build/plugins-trt/libmetrale_kernels.so (the torch CUDA op loads it too: METRALE_KERNELS_LIB)
#   third_party/TensorRT/include (only used when the carried build does not load there: it is then
#   rebuilt with -j16, about 55 s)
# CONF_S: the driver's time limit (default 170 s); CONFORMANCE_NO_GPU=1: only the harness's CPU
# checks (for trying this script where there is no GPU).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 METRALE_KERNELS_LIB=$PWD/build/plugins-trt/libmetrale_kernels.so
log=$OUT/conformance.log
echo "commit ${METRALE_COMMIT:-unknown}" > "$log"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader >> "$log" 2>&1
usable=1
python3 -c "import ctypes, os; ctypes.CDLL(os.environ['METRALE_KERNELS_LIB']); \
ctypes.CDLL('build/plugins-trt/libmetrale_plugins.so')" >> "$log" 2>&1 || usable=0
build/plugins-trt/metrale_conformance > /dev/null 2>&1; [ $? -eq 2 ] || usable=0  # 2: its usage message
if [ $usable = 0 ]; then
  echo "the carried build does not load here: rebuilding (make -C plugins -j16 all trt)" | tee -a "$log"
  (time make -C plugins -j16 all trt) > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
fi
args=(--build build/plugins-trt --out /tmp/conformance)
[ "${CONFORMANCE_NO_GPU:-0}" = 1 ] && args+=(--no-gpu)
timeout "${CONF_S:-170}" python3 tests/plugins/plugin_conformance_driver.py "${args[@]}" >> "$log" 2>&1
rc=$?
echo "conformance driver exit $rc" >> "$log"
cp /tmp/conformance/harness.log /tmp/conformance/comparison.txt "$OUT/" 2>/dev/null
grep -E "^(FAIL|SUMMARY)" /tmp/conformance/harness.log | tail -15 | tee -a "$log"
grep -E "FAIL|CONFORMANCE|reference|exit" "$log" | tail -15
exit $rc
