#!/usr/bin/env bash
# One device call: build (unless a carried build/plugins/libmetrale_kernels.so exists), GPU tests,
# compute-sanitizer memcheck, kernel benchmark. Logs and tables go to $OUT.
#   bash benchmarks/device_run.sh [tests|memcheck|fp8acc|bench|quick|moefused|moelayer|moeprefill|moelean|moecheck|w8a8blk|table|persist|wgpersist|ncufp8|attention|invariance|static|kernels5|w8a8wg|gdnwhole|merged|landed|decode|fused|all] [pytest -k expression]
# (tests: tests/gpu; the environment reaches the kernels, e.g. METRALE_W4A16_WG=base for that mainloop)
# (memcheck: the non-projection kernels' tests (RMSNorm, FloatProj, Router, Attention) under
#  compute-sanitizer --tool memcheck, the -k expression narrowing them; the projections' memcheck is
#  tests/gpu/test_memcheck.py's driver. torch's caching allocator is off, so each tensor is its own
#  allocation and an access past it is caught; the summary lines go to memcheck.log)
# (kernels5: the W4A16 mainloop variants of METRALE_W4A16_WG: the SASS gates where cuobjdump is
#  there, the W4A16 projection GPU tests under base and under deep (with the bitwise base == deep
#  test), benchmarks/bench_w4a16_variants.py; 6 files, under 8 minutes with the build)
# (w8a8wg: W8A8Proj version 3's FP8 wgmma kernel (the default; METRALE_W8A8_MMA=exact the retired
#  exact f16 path) on a carried build (it builds nothing): its SASS gates where cuobjdump is there,
#  tests/gpu/test_w8a8_fp8_wgmma.py, the W8A8 channel projection tests,
#  benchmarks/bench_w8a8_variants.py (exact vs wgmma vs FP8 cuBLASLt at M = 1..4096); under 8 minutes)
# (w8a8blk: issue 20's block-scaled W8A8 on the FP8 wgmma kernel: a smoke run, the FP8 gates, the
#  W8A8 / FP8 wgmma / fused-projection GPU tests, bench_kernels (BENCH_ARGS) in what is left of 560 s)
# (w8a8v: the launch variants of W8A8Proj version 3's FP8 wgmma kernel (METRALE_W8A8_MMA = wg-base,
#  wg-q, wg-qe: the fused pre-pass, the hoisted epilogue; the same bits), built here unless carried: the SASS gates of the FP8 kernels where cuobjdump is there,
#  tests/gpu/test_w8a8_fp8_wgmma.py (the variants bitwise equal to the default), the W8A8 channel
#  projection tests, benchmarks/bench_w8a8_variants.py over the variants with FP8 cuBLASLt, and
#  benchmarks/bench_w8a8_stages.py (each kernel's device time); under 7 minutes with the build;
#  W8A8V_BENCH, W8A8V_STAGES, W8A8V_STAGES_M narrow the benchmarks, W8A8V_PROJ=0 skips the projection tests)
# (decode: issue 20's streaming-tier ring (METRALE_STREAM=ring) on a carried build: tests/gpu/test_stream_ring.py,
#  the W4A16 projection tests under ring, benchmarks/bench_decode_variants.py at M = 1, 8, 16)
# (attention: the Attention kernel's GPU tests and benchmarks/bench_attention.py)
# (invariance: the non-projection kernels' GPU tests, tests/gpu/test_invariance_kernels.py, and
#  benchmarks/bench_invariance.py: RMSNorm vs F.rms_norm and copy bandwidth, FloatProj vs cuBLAS)
# (static: the static-scale GPU tests and benchmarks/bench_static_scales.py, dynamic vs static at M = 1..16)
# (gdnwhole: issue 19's whole-model call: builds the kernels, the plugin library and the conformance
#  harness (make -C plugins -j16 all trt), then at once, three lanes on the one GPU: the plugin
#  conformance driver (every plugin, the Gated DeltaNet ones included, bitwise against the torch CUDA
#  op); benchmarks/diagnostics/gdn_state_ulps.py then tests/gpu/test_gdn_kernels.py,
#  test_invariance_kernels.py and test_model_whole.py; and `model_check gpu MC_DIR` (the demo, MoE and
#  hybrid models against ONNX Runtime and the whole-model invariance of all 12 model x format cases).
#  MC_DIR (default mc) is what `python -m benchmarks.model_check prepare MC_DIR` wrote on the CPU at
#  the same commit. Writes gpu.txt, build.log, conformance.log, tests.log, gdn_ulps.md,
#  model_check.log and model_check.md: 7 files)
# (gdnfix: the shorter follow-up of gdnwhole: the kernels only (make -C plugins -j16), then
#  gdn_state_ulps.py, tests/gpu/test_gdn_kernels.py and test_invariance_kernels.py beside
#  `model_check gpu MC_DIR $MC_CASES` (default the W8A8 models: demo:w8a8 moe:w8a8 hybrid:w8a8);
#  writes gpu.txt, build.log, tests.log, gdn_ulps.md, model_check.log and model_check.md)
# (moefused: issue 22's fused decode path of the grouped ops (METRALE_MOE_FUSED=1) on a carried
#  build/plugins (it builds nothing): tests/gpu/test_moe_fused.py (bitwise the default paths, row
#  invariance with skewed routing), tests/gpu/test_moe_kernels.py's W4A16 cases with the fused path on
#  (bitwise the dense kernel per expert), then `bench_moe --fused` (W4A16 decode, default and fused
#  paths in one run); writes gpu.txt, tests.log, bench.log, moe-*.md/json; under 6 minutes)
# (moelayer: issue 22's whole MoE layer at decode (router gate float_proj, router, fused gate_up,
#  SwiGLU, down with the combine; and gate, up unfused) eager and replayed in a CUDA graph, beside the
#  memory bound of the same run: benchmarks/bench_moe_layer.py, M = 1, 4, 16, 64, W4A16 / W8A8 / W4A4,
#  both Qwen3 MoE shapes, uniform and Zipf routing; builds the kernels unless build/plugins is carried
#  (make -C plugins -j16, about a minute); the benchmark gets what is left of 225 s (at least 30 s), so
#  the mode stays under 4 minutes; MOELAYER_ARGS adds options (e.g. "--formats w4a16 --m 1,64";
#  "--profile": per row a torch.profiler pass over graph replays and a second table, each kernel's
#  device us and launches per layer call; "--variant wide": each row again with METRALE_MOE_DECODE=wide,
#  the grouped launchers' decode variant, or a comma list "--variant wide,pdl,grid,all": each row once
#  per name; both add time: narrow --formats / --m / --shapes).
#  Writes gpu.txt, (build.log,) bench-moe-layer.log, moe-layer-*.md and moe-layer-*.json)
# (fused: issue 20's fused projections (qkv_proj, gate_up_proj) on a carried build/plugins or one built
#  here (make -C plugins -j16, about a minute): tests/gpu/test_fused_proj.py (the fused op against the
#  float64 contract, bitwise row invariance, each part's columns against the unfused part op: bitwise
#  where projSlices agree), narrowed by the -k expression, then benchmarks/bench_fused.py (a Qwen3-8B /
#  32B decode layer's projections, fused vs unfused, W4A16 / W8A8 / W4A4 at M = 1, 2, 4, 8, 16);
#  FUSED_BENCH_ARGS adds options to it (e.g. "--layers 8B --formats w4a16"). Writes gpu.txt,
#  (build.log,) tests.log, bench.log, fused-*.md and fused-*.json; under 6 minutes with the build)
# (all: tests, the fp8 accuracy table of benchmarks/fp8_accuracy.py, the kernel benchmark)
# Running a copy of a tree (.devicecarry/<name>), set METRALE_COMMIT=<its commit>: the results file
# records it (else `git rev-parse HEAD`, which there names the checkout around the copy).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
what=${1:-all}
kexpr=${2:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
record_commit() {  # the commit under test into gpu.txt
  echo "commit ${METRALE_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}" | tee -a "$OUT/gpu.txt"
}
build_plugins() {  # make -C plugins -j16 with the targets given (none: the kernels), its log in $OUT/build.log
  (time make -C plugins -j16 "$@") > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
  tail -4 "$OUT/build.log"
}
unpack_baseline() {  # build/base/lib.so.xz (a baseline library, xz-compressed to fit the carry) -> libmetrale_kernels.so
  if [ -f build/base/lib.so.xz ]; then
    python3 -c "import lzma, shutil; shutil.copyfileobj(lzma.open('build/base/lib.so.xz'), open('build/base/libmetrale_kernels.so', 'wb'))"
  fi
  echo "baseline ${BASE_COMMIT:-unknown}: build/base/libmetrale_kernels.so ($(stat -c %s build/base/libmetrale_kernels.so 2>/dev/null || echo none) bytes)" | tee -a "$OUT/gpu.txt"
}
gdn_tests_in_background() {  # gdn_state_ulps.py, then each test file after $1 (within $1 seconds each) into $OUT/tests.log
  local secs=$1; shift
  ( echo "== benchmarks/diagnostics/gdn_state_ulps.py"
    timeout 90 python3 -m benchmarks.diagnostics.gdn_state_ulps "$OUT" 2>&1 | tail -4
    for f in "$@"; do
      SECONDS=0; echo "== $f"
      timeout "$secs" python3 -m pytest "$f" -m gpu -rs -q -s --confcutdir=tests/gpu -p no:cacheprovider \
        ${kexpr:+-k "$kexpr"} 2>&1 | grep -vE "^\s*$"
      echo "== $f: exit ${PIPESTATUS[0]} after ${SECONDS} s"
    done > "$OUT/tests.log" 2>&1 ) &
}
model_check_gpu() {  # `model_check gpu MC_DIR` within $1 seconds (the cases after $1; none: all), then wait for the lanes beside it
  SECONDS=0
  timeout "$1" python3 -m benchmarks.model_check gpu "${MC_DIR:-mc}" "$OUT" "${@:2}" > "$OUT/model_check.log" 2>&1
  echo "model_check gpu exit $? after ${SECONDS} s" | tee -a "$OUT/model_check.log"
  wait
}
gpu_tests() {  # every GPU test (narrowed by the -k expression) within $1 seconds, the exit code in $OUT/tests.log
  SECONDS=0
  timeout "$1" python3 -m pytest tests/gpu -m gpu -rs -q --confcutdir=tests/gpu -p no:cacheprovider \
    ${kexpr:+-k "$kexpr"} > "$OUT/tests.log" 2>&1
  echo "tests/gpu exit $? after ${SECONDS} s" | tee -a "$OUT/tests.log"
}
if [ "$what" = moefused ]; then
  [ -f build/plugins/libmetrale_kernels.so ] || { echo "moefused builds nothing: carry build/plugins"; exit 2; }
  record_commit
  SECONDS=0
  timeout 120 python3 -m pytest tests/gpu/test_moe_fused.py -m gpu -rs -q --confcutdir=tests/gpu \
    -p no:cacheprovider --durations=4 > "$OUT/tests.log" 2>&1
  echo "test_moe_fused exit $? after ${SECONDS} s" | tee -a "$OUT/tests.log"
  SECONDS=0
  METRALE_MOE_FUSED=1 timeout 90 python3 -m pytest tests/gpu/test_moe_kernels.py -m gpu -rs -q --confcutdir=tests/gpu \
    -p no:cacheprovider -k "w4a16" >> "$OUT/tests.log" 2>&1
  echo "test_moe_kernels (w4a16, fused on) exit $? after ${SECONDS} s" | tee -a "$OUT/tests.log"
  grep -E "passed|failed|error|differ" "$OUT/tests.log" | tail -12
  SECONDS=0
  timeout 150 python3 -m benchmarks.bench_moe --fused --out "$OUT" > "$OUT/bench.log" 2>&1
  echo "bench_moe --fused exit $? after ${SECONDS} s" | tee -a "$OUT/bench.log"
  tail -40 "$OUT/bench.log"
  exit 0
fi
if [ "$what" = w8a8wg ] && [ ! -f build/plugins/libmetrale_kernels.so ]; then
  echo "w8a8wg builds nothing: carry build/plugins (make -C plugins -j2 here first)"; exit 2
fi
if [ "$what" = gdnwhole ] || [ "$what" = gdnfix ]; then
  record_commit
  build_plugins all $( [ "$what" = gdnwhole ] && echo trt )
fi
conformance_in_background() {  # the plugin conformance driver beside the tests, its log and exit code in $OUT
  ( SECONDS=0; timeout "$1" python3 tests/plugins/plugin_conformance_driver.py --build build/plugins-trt \
      --out /tmp/conformance > "$OUT/conformance.log" 2>&1
    echo "conformance driver exit $? after ${SECONDS} s" >> "$OUT/conformance.log" ) &
}
if [ "$what" = merged ]; then
  # A merged tree in one call: build the kernels and the plugin library, the conformance driver beside
  # tests/gpu (every GPU test), each with its exit code.
  record_commit
  build_plugins all trt
  conformance_in_background 240
  gpu_tests 330
  wait
  grep -E "CONFORMANCE|exit|^SUMMARY" "$OUT/conformance.log" | tail -4
  grep -E "passed|failed|error" "$OUT/tests.log" | tail -15
fi
if [ "$what" = landed ]; then
  # A landed tree in one call (issue 21's GPU half): build the kernels, the plugin library and the
  # conformance harness, then at once: the conformance driver, every GPU test, `model_check gpu MC_DIR`
  # (all model x format cases, when MC_DIR was prepared on the CPU at the same commit and carried:
  # `carry: ["mc"]`, its ONNX files are git-ignored), and a copy of
  # the tree whose contract has another attribute default (W8A8Proj weight_scale_granularity
  # block128), its header regenerated, the plugins rebuilt and the unchanged conformance driver run
  # over them (conformance-changed.log; the header diff in changed.log: 8 files, the most a call returns).
  record_commit
  t0=$(date +%s)
  build_plugins all trt
  conformance_in_background 300
  if [ -d "${MC_DIR:-mc}" ]; then
    ( SECONDS=0; timeout 480 python3 -m benchmarks.model_check gpu "${MC_DIR:-mc}" "$OUT" > "$OUT/model_check.log" 2>&1
      echo "model_check gpu exit $? after ${SECONDS} s" >> "$OUT/model_check.log" ) &
  fi
  ( SECONDS=0; changed=/tmp/changed; rm -rf $changed; mkdir -p $changed
    tar --exclude=./build --exclude=./mc --exclude=./.git -cf - . | tar -xf - -C $changed
    cd $changed && python3 - <<'PY'
from pathlib import Path
p = Path("metrale_export/contract/ops.py")
old = 'Attribute("weight_scale_granularity", "string", ("channel", "block128"), "channel")'
text = p.read_text()
assert text.count(old) == 1, "the W8A8Proj default is not where landed mode expects it"
p.write_text(text.replace(old, old.replace('"channel")', '"block128")')))
PY
    cp plugins/include/metrale/contract.h /tmp/contract.h.before
    PYTHONPATH=$changed python3 -m metrale_export.contract --write > "$OUT/changed.log" 2>&1
    diff /tmp/contract.h.before plugins/include/metrale/contract.h > /tmp/header.diff
    { echo "header diff lines: $(wc -l < /tmp/header.diff)"; cat /tmp/header.diff; } >> "$OUT/changed.log"
    make -C plugins -j8 all trt >> "$OUT/changed.log" 2>&1 || { echo "changed build failed" >> "$OUT/changed.log"; exit 1; }
    PYTHONPATH=$changed timeout 240 python3 tests/plugins/plugin_conformance_driver.py --build build/plugins-trt \
      --out /tmp/conformance-changed > "$OUT/conformance-changed.log" 2>&1
    echo "changed-default conformance driver exit $? after ${SECONDS} s" >> "$OUT/conformance-changed.log" ) &
  # beside the two lanes above every GPU test took > 420 s at 8048ed7 (alone: 124 s + 55 s; 196 s at 1723d97):
  # what is left of 570 s after the build (136 s at 1723d97, when a fixed 500 s ran past the call's 600 s)
  gpu_tests $(( 570 - ($(date +%s) - t0) ))
  wait
  grep -E "CONFORMANCE|exit|^SUMMARY" "$OUT/conformance.log" | tail -4
  tail -3 "$OUT/changed.log"; grep -E "CONFORMANCE|exit|^SUMMARY" "$OUT/conformance-changed.log" | tail -4
  grep -E "passed|failed|error" "$OUT/tests.log" | tail -15
  tail -2 "$OUT/model_check.log" 2>/dev/null
  grep -E "\| (NO|yes) \|$" "$OUT/model_check.md" 2>/dev/null | grep -c "| yes |"
  grep -E "\| NO \|$" "$OUT/model_check.md" 2>/dev/null | head -8
  exit 0
fi
if [ "$what" = gdnfix ]; then
  gdn_tests_in_background 200 tests/gpu/test_gdn_kernels.py tests/gpu/test_invariance_kernels.py
  model_check_gpu 300 ${MC_CASES:-demo:w8a8 moe:w8a8 hybrid:w8a8}
  grep -E "^== |passed|failed|error" "$OUT/tests.log" | tail -12
  grep -E "\| (NO|yes) \|$" "$OUT/model_check.md" 2>/dev/null | head -20
fi
if [ ! -f build/plugins/libmetrale_kernels.so ]; then
  build_plugins
fi
if [ "$what" = moelayer ]; then
  record_commit
  left=$((225 - SECONDS)); [ "$left" -lt 30 ] && left=30
  SECONDS=0
  timeout "$left" python3 -m benchmarks.bench_moe_layer --out "$OUT" ${MOELAYER_ARGS:-} > "$OUT/bench-moe-layer.log" 2>&1
  echo "bench_moe_layer exit $? after ${SECONDS} s (limit ${left} s)" | tee -a "$OUT/bench-moe-layer.log"
  grep -vE '^\{' "$OUT/bench-moe-layer.log" | grep -E "Error|error|Traceback" | tail -6
  cat "$OUT"/moe-layer-*.md 2>/dev/null
  exit 0
fi
if [ "$what" = moecheck ]; then
  # the bits alone, in about 3 minutes: the grouped wgmma tier's and the grouped FP8 tier's GPU tests
  # (tests/gpu/test_moe_wgmma.py, test_moe_fp8.py) and test_moe_layer_invariance.py. Writes gpu.txt, tests-wgmma.log.
  record_commit
  SECONDS=0
  timeout 170 python3 -m pytest tests/gpu/test_moe_wgmma.py tests/gpu/test_moe_layer_invariance.py tests/gpu/test_moe_fp8.py \
    -m gpu -rs -q --confcutdir=tests/gpu -p no:cacheprovider --maxfail=3 > "$OUT/tests-wgmma.log" 2>&1
  echo "tests exit $? after ${SECONDS} s" | tee -a "$OUT/tests-wgmma.log"
  grep -E "passed|failed|error|differ|FAILED" "$OUT/tests-wgmma.log" | tail -14
  exit 0
fi

if [ "$what" = moeprefill ] || [ "$what" = moelean ]; then
  # moelean: the same steps, each shorter (a call of about 6 minutes): the 30B-A3B shape, the prefill
  # default beside smem only, the rest of tests/gpu narrowed to the grouped-expert modules, no memcheck
  lean=0; [ "$what" = moelean ] && lean=1
  # issue 22's grouped W4A16 / W4A4 on the wgmma tier (moeWgmmaKernel, moeWgmmaRegsKernel, m > 128) and the
  # grouped W8A8 on the FP8 wgmma kernel (METRALE_MOE_FP8=1, moeFp8Kernel.cuh) on a carried build: a smoke
  # call of each (a hang shows here, in 60 s), tests/gpu/test_moe_wgmma.py and test_moe_fp8.py, benchmarks/
  # bench_moe.py --prefill and --fp8, the rest of tests/gpu, compute-sanitizer memcheck over a few of the
  # new tests' cases. Writes gpu.txt, smoke.log, tests-wgmma.log, bench-moe.log, bench-moe-fp8.log,
  # moe-*.md / .json and fp8/moe-*.md / .json, tests.log, memcheck.log (12 files); the steps' limits keep it
  # under 590 s.
  record_commit
  timeout 60 python3 -c "
import os, torch; from metrale_export.ops import cuda
e, n, k, m, t = 16, 256, 1024, 300, 4
w = torch.randint(-128, 127, (e, n, k // 2), dtype=torch.int8, device='cuda')
s = (torch.rand(e, n, k // 128, device='cuda') * 0.01).to(torch.bfloat16)
x = torch.randn(m, k, device='cuda').to(torch.bfloat16)
ids = torch.stack([torch.randperm(e)[:t] for _ in range(m)]).to(torch.int32).cuda()
y = torch.ops.metrale.w4a16_moe_proj(x, ids, None, w, s, None, None, n, k, e, t, 0, 128, 'bf16', 'moe', 's')
torch.cuda.synchronize(); print('smoke w4a16 ok', y.shape, bool(torch.isfinite(y).all()))
w8 = (torch.randint(0, 0x7e, (e, n, k), dtype=torch.int32, device='cuda') | (torch.randint(0, 2, (e, n, k), dtype=torch.int32, device='cuda') << 7)).to(torch.uint8).view(torch.int8)
s8 = torch.rand(e, n, device='cuda') * 0.01 + 1e-3
os.environ['METRALE_MOE_FP8'] = '1'
for mm in (1, 16, 300):
    y8 = torch.ops.metrale.w8a8_moe_proj(x[:mm], ids[:mm], None, w8, s8, None, None, n, k, e, t, 0, 'channel', 'fp8', 'row', 'moe', 's')
    torch.cuda.synchronize(); print('smoke w8a8 fp8 ok', mm, y8.shape, bool(torch.isfinite(y8).all()))
" > "$OUT/smoke.log" 2>&1
  echo "smoke exit $?" | tee -a "$OUT/smoke.log"; tail -5 "$OUT/smoke.log"
  SECONDS=0
  timeout $((lean ? 130 : 150)) python3 -m pytest tests/gpu/test_moe_wgmma.py tests/gpu/test_moe_fp8.py -m gpu -rs -q --confcutdir=tests/gpu \
    -p no:cacheprovider > "$OUT/tests-wgmma.log" 2>&1
  echo "test_moe_wgmma + test_moe_fp8 exit $? after ${SECONDS} s" | tee -a "$OUT/tests-wgmma.log"
  grep -E "passed|failed|error|differ|FAILED" "$OUT/tests-wgmma.log" | tail -14
  SECONDS=0
  timeout $((lean ? 90 : 140)) python3 -m benchmarks.bench_moe --prefill --out "$OUT" ${MOE_BENCH_ARGS:-} \
    $([ $lean = 1 ] && echo "--shapes 30B-A3B --variants default,smem") > "$OUT/bench-moe.log" 2>&1
  echo "bench_moe --prefill exit $? after ${SECONDS} s" | tee -a "$OUT/bench-moe.log"
  grep -vE '^\{' "$OUT/bench-moe.log" | grep -E "Error|error|Traceback" | tail -6
  SECONDS=0
  timeout $((lean ? 70 : 90)) python3 -m benchmarks.bench_moe --fp8 --out "$OUT/fp8" $([ $lean = 1 ] && echo "--shapes 30B-A3B") > "$OUT/bench-moe-fp8.log" 2>&1
  echo "bench_moe --fp8 exit $? after ${SECONDS} s" | tee -a "$OUT/bench-moe-fp8.log"
  grep -vE '^\{' "$OUT/bench-moe-fp8.log" | grep -E "Error|error|Traceback" | tail -6
  cat "$OUT"/moe-*.md "$OUT"/fp8/moe-*.md 2>/dev/null
  SECONDS=0
  if [ $lean = 1 ]; then
    timeout 60 python3 -m pytest tests/gpu/test_moe_kernels.py tests/gpu/test_moe_layer_invariance.py -m gpu -rs -q \
      --confcutdir=tests/gpu -p no:cacheprovider > "$OUT/tests.log" 2>&1
  else
    timeout 120 python3 -m pytest tests/gpu -m gpu -rs -q --confcutdir=tests/gpu -p no:cacheprovider --durations=8 \
      --ignore=tests/gpu/test_moe_wgmma.py --ignore=tests/gpu/test_moe_fp8.py ${kexpr:+-k "$kexpr"} > "$OUT/tests.log" 2>&1
  fi
  echo "tests/gpu exit $? after ${SECONDS} s" | tee -a "$OUT/tests.log"
  grep -E "passed|failed|error|differ|FAILED" "$OUT/tests.log" | tail -20
  [ $lean = 1 ] && exit 0
  SECONDS=0
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 45 compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 \
    python3 -m pytest tests/gpu/test_moe_wgmma.py tests/gpu/test_moe_fp8.py -m gpu -q -k "asym-n96 or static or bad" \
    --confcutdir=tests/gpu -p no:cacheprovider > "$OUT/memcheck.log" 2>&1
  echo "memcheck exit $? after ${SECONDS} s" | tee -a "$OUT/memcheck.log"
  grep -E "ERROR SUMMARY|Invalid|passed|failed" "$OUT/memcheck.log" | tail -6
  exit 0
fi
if [ "$what" = fused ]; then
  record_commit
  SECONDS=0
  timeout 180 python3 -m pytest tests/gpu/test_fused_proj.py -m gpu -rs -q --confcutdir=tests/gpu \
    -p no:cacheprovider --durations=6 ${kexpr:+-k "$kexpr"} > "$OUT/tests.log" 2>&1
  echo "test_fused_proj exit $? after ${SECONDS} s" | tee -a "$OUT/tests.log"
  grep -E "passed|failed|error|differ|FAILED" "$OUT/tests.log" | tail -20
  SECONDS=0
  timeout 110 python3 -m benchmarks.bench_fused "$OUT" ${FUSED_BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
  echo "bench_fused exit $? after ${SECONDS} s" | tee -a "$OUT/bench.log"
  tail -45 "$OUT/bench.log"
  exit 0
fi
if [ "$what" = gdnwhole ]; then
  conformance_in_background 300
  gdn_tests_in_background 330 tests/gpu/test_gdn_kernels.py tests/gpu/test_invariance_kernels.py \
    tests/gpu/test_model_whole.py
  model_check_gpu 480
  grep -E "CONFORMANCE|exit|^SUMMARY" "$OUT/conformance.log" | tail -4
  grep -E "^== |passed|failed|error" "$OUT/tests.log" | tail -12
  grep -E "\| (NO|yes) \|$" "$OUT/model_check.md" 2>/dev/null | grep -c "| yes |"
  grep -E "\| NO \|$" "$OUT/model_check.md" 2>/dev/null | head -8
fi
if [ "$what" = tests ] || [ "$what" = all ]; then
  python3 -m pytest tests/gpu -m gpu -rs --confcutdir=tests/gpu -p no:cacheprovider ${kexpr:+-k "$kexpr"} \
    2>&1 | tee "$OUT/tests.log" | tail -40
fi
if [ "$what" = memcheck ]; then
  compute-sanitizer --version | head -2 > "$OUT/memcheck.log" 2>&1 || { echo "compute-sanitizer not found" | tee "$OUT/memcheck.log"; }
  for f in tests/gpu/test_invariance_kernels.py tests/gpu/test_attention_kernel.py; do
    echo "== $f" >> "$OUT/memcheck.log"
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 170 compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 \
      python3 -m pytest "$f" -m gpu -q -x --confcutdir=tests/gpu -p no:cacheprovider ${kexpr:+-k "$kexpr"} \
      > "$OUT/memcheck-$(basename "$f" .py).log" 2>&1
    echo "rc $?" >> "$OUT/memcheck.log"
    grep -E "ERROR SUMMARY|Invalid|passed|failed" "$OUT/memcheck-$(basename "$f" .py).log" | tail -8 >> "$OUT/memcheck.log"
  done
  cat "$OUT/memcheck.log"
fi
if [ "$what" = decode ]; then
  # Issue 20's decode call on a carried build: the ring streaming tier (METRALE_STREAM=ring) against the
  # register ring, bitwise at every M <= 16; the W4A16 projection tests under ring (row invariance across
  # the tiers, M = 1..8192); benchmarks/bench_decode_variants.py at M = 1, 8, 16 (anchors, copy bandwidth).
  # DECODE_PROJ=0 skips the projection tests, DECODE_SHAPES narrows the benchmark's shapes.
  SECONDS=0
  timeout 90 python3 -m pytest tests/gpu/test_stream_ring.py -m gpu -rs -q --confcutdir=tests/gpu -p no:cacheprovider \
    > "$OUT/tests-ring.log" 2>&1
  echo "test_stream_ring exit $? after ${SECONDS} s" | tee -a "$OUT/tests-ring.log"; SECONDS=0
  [ "${DECODE_PROJ:-1}" = 0 ] || METRALE_STREAM=ring timeout 110 python3 -m pytest tests/gpu/test_proj_kernels.py -m gpu -rs -q --confcutdir=tests/gpu \
    -p no:cacheprovider -k "w4a16 and invariance" > "$OUT/tests-proj-ring.log" 2>&1
  echo "test_proj_kernels (w4a16, METRALE_STREAM=ring) exit $? after ${SECONDS} s" | tee -a "$OUT/tests-proj-ring.log"
  grep -E "passed|failed|error" "$OUT/tests-ring.log" "$OUT/tests-proj-ring.log" | tail -8
  timeout 170 python3 -m benchmarks.bench_decode_variants --m 1,8,16 --variants reg,ring \
    ${DECODE_SHAPES:+--shapes "$DECODE_SHAPES"} --out "$OUT" 2>&1 \
    | tee "$OUT/bench-decode.log" | tail -30
fi
if [ "$what" = wgpersist ]; then
  # Issue 20's persistent CTAs for the W4A16 wgmma tier (the default: the deep mainloop's CTAs, one an SM,
  # walking the raster's tiles where they outnumber the SMs, the token tile from the SMs' rounds;
  # METRALE_W4A16_WG=persist the token tile of wgTokenTile, deep one tile a CTA, t64 / t128 the token tile
  # forced at M > 64) and the FP8 kernel's paired blocks at token tiles of 64 and 128 (the default;
  # METRALE_W8A8_MMA=wg-pipe32 without); the same bits; on a carried build. With WGP_NCU=1, Nsight Compute
  # over the wgmma kernels at M = 256 / 4096 first (NCU_KERNEL, default regex:projWgmma; NCU_M; NCU_ENV's
  # variables, e.g. "METRALE_W8A8_MMA=wg-pipe32"). Then test_proj_kernels.py's W4A16 variants test
  # (bitwise, M = 17..4096), test_w8a8_fp8_wgmma.py's launch variants under wg-pipe32, test_memcheck.py
  # (the default, and under wg-pipe32), bench_w4a16_variants (WGP_W4 variants, default default,persist,t128) and
  # bench_w8a8_variants (wgmma, wg-pipe32; channel and block) at M = 64..4096 (WGP_M). Writes gpu.txt,
  # (ncu-fp8.txt,) tests.log, memcheck.log, w4a16-variants-*.md, w8a8-variants-*.md, w8a8-block-variants-*.md.
  record_commit
  if [ "${WGP_NCU:-0}" = 1 ]; then
    for m in ${NCU_M:-256 4096}; do
      echo "== M=$m ${NCU_ENV:-}" >> "$OUT/ncu-fp8.txt"
      env ${NCU_ENV:-} timeout ${NCU_TIMEOUT:-60} /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none \
        --kernel-name ${NCU_KERNEL:-regex:projWgmma} --section SpeedOfLight --section ComputeWorkloadAnalysis \
        --section WarpStateStats --section SchedulerStats \
        --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
        python3 -m benchmarks.diagnostics.ncu_decode --m $m --shapes ${NCU_SHAPES:-8B-down,32B-up} --moe "" >> "$OUT/ncu-fp8.txt" 2>&1
      echo "ncu (M = $m) exit $?"
    done
    grep -E "^  void|Duration|Compute \(SM\)|Issue Slots" "$OUT/ncu-fp8.txt" | head -40
  fi
  SECONDS=0
  timeout 200 python3 -m pytest tests/gpu/test_proj_kernels.py -k "w4a16_wgmma_variants" \
    -m gpu -rs -q --confcutdir=tests/gpu -p no:cacheprovider > "$OUT/tests.log" 2>&1
  echo "test_proj_kernels W4A16 variants exit $? after ${SECONDS} s" | tee -a "$OUT/tests.log"
  SECONDS=0
  METRALE_W8A8_VARIANTS=wg-pipe32 timeout 170 python3 -m pytest tests/gpu/test_w8a8_fp8_wgmma.py -k "launch_variants" \
    -m gpu -rs -q --confcutdir=tests/gpu -p no:cacheprovider >> "$OUT/tests.log" 2>&1
  echo "test_w8a8_fp8_wgmma launch variants (wg-pipe32) exit $? after ${SECONDS} s" | tee -a "$OUT/tests.log"
  grep -E "passed|failed|FAILED|differ" "$OUT/tests.log" | tail -12
  for mma in default wg-pipe32; do
    SECONDS=0
    ( [ $mma = default ] || export METRALE_W8A8_MMA=$mma; timeout 150 python3 -m pytest tests/gpu/test_memcheck.py -m gpu \
      -rs -q --confcutdir=tests/gpu -p no:cacheprovider >> "$OUT/memcheck.log" 2>&1 )
    echo "test_memcheck ($mma) exit $? after ${SECONDS} s" | tee -a "$OUT/memcheck.log"
  done
  SECONDS=0
  timeout ${WGP_BENCH_S:-120} python3 -m benchmarks.bench_w4a16_variants --variants ${WGP_W4:-default,persist,t128} \
    --m ${WGP_M:-64,128,256,512,1024,4096} --out "$OUT" > /tmp/wv.log 2>&1
  echo "bench_w4a16_variants exit $? after ${SECONDS} s"; tail -9 /tmp/wv.log
  for g in channel block; do
    SECONDS=0
    timeout ${WGP_BENCH_S:-120} python3 -m benchmarks.bench_w8a8_variants --granularity $g --variants wgmma,wg-pipe32 \
      --m ${WGP_M:-64,128,256,512,1024,4096} --out "$OUT" > /tmp/bv-$g.log 2>&1
    echo "bench_w8a8_variants $g exit $? after ${SECONDS} s"; tail -7 /tmp/bv-$g.log
  done
  exit 0
fi
if [ "$what" = persist ]; then
  # Issue 20's persistent FP8 kernel (the default since 2026-12-03: one CTA an SM walking the raster's tiles
  # where they outnumber the SMs, the token tile from the SMs' rounds; METRALE_W8A8_MMA=wg-onetile the
  # kernel before, wg-persist the persistent CTAs alone; the same bits), on a carried build:
  # tests/gpu/test_w8a8_fp8_wgmma.py's launch variants under both (bitwise the default at M = 1..4096,
  # every case), bench_w8a8_variants wgmma,wg-onetile,wg-persist at M = 64..4096 for channel x row and
  # block128 x row_block128, then tests/gpu/test_memcheck.py (compute-sanitizer memcheck over every
  # launcher). Writes gpu.txt, tests.log, w8a8-variants-*.md, w8a8-block-variants-*.md, memcheck.log.
  record_commit
  SECONDS=0
  METRALE_W8A8_VARIANTS=wg-onetile,wg-persist timeout 170 python3 -m pytest tests/gpu/test_w8a8_fp8_wgmma.py -k "launch_variants" \
    -m gpu -rs -q --confcutdir=tests/gpu -p no:cacheprovider > "$OUT/tests.log" 2>&1
  echo "test_w8a8_fp8_wgmma launch variants (wg-onetile, wg-persist) exit $? after ${SECONDS} s" | tee -a "$OUT/tests.log"
  grep -E "passed|failed|FAILED" "$OUT/tests.log" | tail -6
  for g in channel block; do
    SECONDS=0
    timeout 130 python3 -m benchmarks.bench_w8a8_variants --granularity $g --variants wgmma,wg-onetile,wg-persist \
      --m ${PERSIST_M:-64,128,256,512,1024,2048,4096} --out "$OUT" > /tmp/bv-$g.log 2>&1
    echo "bench_w8a8_variants $g exit $? after ${SECONDS} s"; tail -8 /tmp/bv-$g.log
  done
  SECONDS=0
  timeout 150 python3 -m pytest tests/gpu/test_memcheck.py -m gpu -rs -v --confcutdir=tests/gpu -p no:cacheprovider \
    > "$OUT/memcheck.log" 2>&1
  echo "test_memcheck exit $? after ${SECONDS} s" | tee -a "$OUT/memcheck.log"
  tail -5 "$OUT/memcheck.log"
  exit 0
fi
if [ "$what" = ncufp8 ]; then
  # The FP8 W8A8 kernel at large M under Nsight Compute (issue 20: what limits it at 1.5x FP8 cuBLASLt), on a
  # carried build: projWgmmaFp8Kernel on 8B-down and 32B-up at M = 256 and 4096 (benchmarks/diagnostics/
  # ncu_decode.py's W8A8 case; the W4A16 / W4A4 cases run unprofiled), SpeedOfLight, ComputeWorkloadAnalysis
  # (the tensor pipe), MemoryWorkloadAnalysis (shared memory), WarpStateStats, SchedulerStats and the stall
  # reasons; summarized by benchmarks/diagnostics/ncu_stalls.py. Writes gpu.txt and ncu-fp8.txt; under 3 minutes.
  # NCU_KERNEL (default regex:projWgmmaFp8Kernel; regex:projWgmma adds the W4A16 / W4A4 wgmma kernels), NCU_M
  # (default "256 4096") and NCU_TIMEOUT (seconds an M, default 80) widen it.
  record_commit
  for m in ${NCU_M:-256 4096}; do
    echo "== M=$m" >> "$OUT/ncu-fp8.txt"
    timeout ${NCU_TIMEOUT:-80} /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none \
      --kernel-name ${NCU_KERNEL:-regex:projWgmmaFp8Kernel} --section SpeedOfLight --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active" \
      python3 -m benchmarks.diagnostics.ncu_decode --m $m --shapes 8B-down,32B-up --moe "" >> "$OUT/ncu-fp8.txt" 2>&1
    echo "ncu (M = $m) exit $?"
  done
  python3 -m benchmarks.diagnostics.ncu_stalls "$OUT/ncu-fp8.txt" --top 5
  grep -E "gmma_cycles_active|Duration|Tensor|Shared" "$OUT/ncu-fp8.txt" | head -30
  exit 0
fi
if [ "$what" = table ]; then
  # The W4A4 table built with 16-byte stores, on a carried build, with a baseline build carried as
  # build/base/lib.so.xz (BASE_COMMIT): tests/gpu/test_baseline_bits.py (dense and grouped, bitwise the
  # baseline); bench_kernels --m 1,8,16 (k/); bench_moe_layer W4A4 / W4A16 at M = 1, 4 on 30B-A3B.
  # Writes gpu.txt, tests.log, k/kernels-*.json, moe-layer-*.md and .json: 5 files.
  record_commit
  unpack_baseline
  SECONDS=0
  METRALE_BASELINE_LIB=$PWD/build/base/libmetrale_kernels.so timeout 150 python3 -m pytest \
    tests/gpu/test_baseline_bits.py -m gpu -rs -q --confcutdir=tests/gpu -p no:cacheprovider > "$OUT/tests.log" 2>&1
  echo "tests exit $? after ${SECONDS} s" | tee -a "$OUT/tests.log"
  grep -E "passed|failed|error|FAILED" "$OUT/tests.log" | tail -12
  mkdir -p "$OUT/k"
  timeout 150 python3 -m benchmarks.bench_kernels --m 1,8,16 --out "$OUT/k" > /tmp/k.log 2>&1
  echo "bench_kernels exit $?"; grep -A7 "geomean over shapes" /tmp/k.log | tail -8
  timeout 100 python3 -m benchmarks.bench_moe_layer --out "$OUT" --shapes 30B-A3B --formats w4a16,w4a4 --m 1,4 \
    > /tmp/ml.log 2>&1; echo "bench_moe_layer exit $?"; grep -E "^\| 30B" "$OUT"/moe-layer-*.md | head -12
  exit 0
fi
if [ "$what" = static ]; then
  python3 -m pytest tests/gpu/test_proj_kernels.py -m gpu -rs --confcutdir=tests/gpu -p no:cacheprovider \
    -k "tensor or nvfp4-True" 2>&1 | tee "$OUT/tests-static.log" | tail -30
  python3 -m benchmarks.bench_static_scales --out "$OUT" 2>&1 | tee "$OUT/bench-static.log" | tail -55
fi
if [ "$what" = all ] || [ "$what" = fp8acc ]; then
  python3 -m benchmarks.fp8_accuracy --out "$OUT" 2>&1 | tee "$OUT/fp8acc.log" | tail -15
fi
if [ "$what" = bench ] || [ "$what" = all ] || [ "$what" = quick ]; then
  python3 -m benchmarks.bench_kernels --out "$OUT" $( [ "$what" = quick ] && echo --quick ) 2>&1 | tee "$OUT/bench.log" | tail -45
fi
if [ "$what" = attention ]; then
  python3 -m pytest tests/gpu/test_attention_kernel.py -m gpu -rs -s --confcutdir=tests/gpu -p no:cacheprovider \
    ${kexpr:+-k "$kexpr"} 2>&1 | tee "$OUT/attention-tests.log" | tail -40
  python3 -m benchmarks.bench_attention --out "$OUT" 2>&1 | tee "$OUT/attention-bench.log" | tail -45
fi
if [ "$what" = invariance ]; then
  python3 -m pytest tests/gpu/test_invariance_kernels.py -m gpu -rs --confcutdir=tests/gpu -p no:cacheprovider \
    ${kexpr:+-k "$kexpr"} 2>&1 | tee "$OUT/tests-invariance.log" | tail -30
  python3 -m benchmarks.bench_invariance --out "$OUT" 2>&1 | tee "$OUT/bench-invariance.log" | tail -60
fi
if [ "$what" = w8a8wg ]; then
  { command -v cuobjdump >/dev/null && timeout 60 python3 -m benchmarks.sass_gates --kernel projWgmmaFp8 \
      --out "$OUT/gates-w8a8wg.md"; } > "$OUT/gates-w8a8wg.log" 2>&1
  timeout 200 python3 -m pytest tests/gpu/test_w8a8_fp8_wgmma.py -m gpu -rs --confcutdir=tests/gpu -p no:cacheprovider \
    ${kexpr:+-k "$kexpr"} 2>&1 | tee "$OUT/tests-w8a8wg.log" | tail -12
  timeout 120 python3 -m pytest tests/gpu/test_proj_kernels.py -m gpu -rs --confcutdir=tests/gpu -p no:cacheprovider \
    -k "w8a8 and channel" 2>&1 | tee "$OUT/tests-w8a8-exact.log" | tail -6
  timeout 170 python3 -m benchmarks.bench_w8a8_variants --out "$OUT" 2>&1 | tee "$OUT/bench-w8a8wg.log" | tail -16
fi
if [ "$what" = w8a8blk ]; then
  # Issue 20's block-scaled W8A8 on the FP8 wgmma kernel, on a carried build: a smoke run (each scale
  # combination against the CPU reference; a hang costs its 60 s), the SASS gates of the FP8 kernels
  # where cuobjdump is there, tests/gpu/test_w8a8_fp8_wgmma.py, the W8A8 projection and fused
  # projection tests, then the kernel benchmark (every op, all shapes and M unless BENCH_ARGS says
  # e.g. --quick) with what is left of 560 s.
  [ -f build/plugins/libmetrale_kernels.so ] || { echo "w8a8blk builds nothing: carry build/plugins"; exit 2; }
  record_commit
  SECONDS=0
  timeout 60 python3 -m benchmarks.diagnostics.w8a8_block_smoke > "$OUT/smoke.txt" 2>&1
  rc=$?; cat "$OUT/smoke.txt" | tail -14; echo "smoke exit $rc after ${SECONDS} s"
  [ "$rc" -eq 0 ] || exit 1
  { command -v cuobjdump >/dev/null && timeout 60 python3 -m benchmarks.sass_gates --kernel 'projWgmmaFp8|wgFp8Quant' \
      --out "$OUT/gates-w8a8blk.md"; } > "$OUT/gates-w8a8blk.log" 2>&1; tail -3 "$OUT/gates-w8a8blk.log"
  timeout 170 python3 -m pytest tests/gpu/test_w8a8_fp8_wgmma.py tests/gpu/test_proj_kernels.py \
    tests/gpu/test_fused_proj.py -m gpu -rs -q --confcutdir=tests/gpu -p no:cacheprovider \
    -k "${kexpr:-w8a8 or fp8_wgmma}" > "$OUT/tests.log" 2>&1
  echo "tests exit $? after ${SECONDS} s" | tee -a "$OUT/tests.log"; grep -E "passed|failed|FAILED" "$OUT/tests.log" | tail -12
  left=$((560 - SECONDS)); [ "$left" -lt 30 ] && left=30
  timeout "$left" python3 -m benchmarks.bench_kernels --out "$OUT" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
  echo "bench_kernels exit $? after ${SECONDS} s (limit ${left} s)" | tee -a "$OUT/bench.log"
  tail -30 "$OUT/bench.log"
  exit 0
fi
if [ "$what" = w8a8v ]; then
  { command -v cuobjdump >/dev/null && timeout 60 python3 -m benchmarks.sass_gates --kernel 'projWgmmaFp8|wgFp8Quant' \
      --out "$OUT/gates-w8a8v.md"; } >> "$OUT/build.log" 2>&1; tail -3 "$OUT/build.log"
  # A variant that hangs or fails its first launches stays out of the benchmark: one process tries
  # them in turn, each against wg-base's bits, and prints a line per variant that passed.
  timeout 45 python3 - > "$OUT/smoke.txt" 2>&1 <<'PY'
import os, torch
from metrale_export.ops import cuda as mcuda, w8a8
dev = torch.device("cuda")
cases = []
for n, k, m in ((4096, 4096, 256), (1000, 1040, 129), (4096, 4096, 4096)):
    g = torch.Generator().manual_seed(n + k + m)
    q = w8a8.quantize(torch.randn(n, k, generator=g) * 0.05, "channel")
    cases.append((n, k, m, q.weight.to(dev), q.weight_scale.to(dev), torch.randn(m, k, generator=g).to(dev)))
def run(var, n, k, m, w, s, x):
    os.environ["METRALE_W8A8_MMA"] = var
    y = torch.full((m, n), float("nan"), device=dev)
    mcuda.launch_w8a8(x, w, s, None, y, n, k, "channel", "fp8", "row")
    torch.cuda.synchronize()
    return y.view(torch.int32)
refs = [run("wg-base", *c) for c in cases]
for v in ("wg-q", "wg-qe"):
    same = all(torch.equal(run(v, *c), r) for c, r in zip(cases, refs))
    print(f"SMOKE {v} {'ok' if same else 'bits differ from wg-base'}", flush=True)
PY
  tail -6 "$OUT/smoke.txt"
  ok=wg-base$(awk '$1 == "SMOKE" && $3 == "ok" {printf ",%s", $2}' "$OUT/smoke.txt")
  echo "benchmarked: $ok"
  METRALE_W8A8_VARIANTS="$ok" timeout 200 python3 -m pytest tests/gpu/test_w8a8_fp8_wgmma.py -m gpu -rs \
    --confcutdir=tests/gpu -p no:cacheprovider --durations=5 ${kexpr:+-k "$kexpr"} 2>&1 | tee "$OUT/tests-w8a8v.log" | tail -14
  timeout 100 python3 -m benchmarks.bench_w8a8_variants --out "$OUT" --variants "${W8A8V_BENCH:-$ok}" \
    2>&1 | tail -12
  [ "${W8A8V_PROJ:-1}" = 1 ] && timeout 60 python3 -m pytest tests/gpu/test_proj_kernels.py -m gpu -rs \
    --confcutdir=tests/gpu -p no:cacheprovider -k "w8a8 and channel" 2>&1 | tee "$OUT/tests-w8a8-proj.log" | tail -4
  timeout 60 python3 -m benchmarks.bench_w8a8_stages --out "$OUT" --m "${W8A8V_STAGES_M:-256,4096}" \
    --variants "${W8A8V_STAGES:-$ok}" 2>&1 | tail -48
fi
if [ "$what" = kernels5 ]; then
  { command -v cuobjdump >/dev/null && timeout 60 python3 -m benchmarks.sass_gates --kernel Wgmma; } >> "$OUT/build.log" 2>&1
  METRALE_W4A16_WG=base timeout 100 python3 -m pytest tests/gpu/test_proj_kernels.py -m gpu -rs --confcutdir=tests/gpu \
    -p no:cacheprovider -k "w4a16 and (row_invariance or mainloops)" 2>&1 | tee "$OUT/tests-base.log" | tail -8
  METRALE_W4A16_WG=deep timeout 150 python3 -m pytest tests/gpu/test_proj_kernels.py -m gpu -rs --confcutdir=tests/gpu \
    -p no:cacheprovider -k "w4a16" 2>&1 | tee "$OUT/tests-deep.log" | tail -8
  timeout 200 python3 -m benchmarks.bench_w4a16_variants --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -20
fi
