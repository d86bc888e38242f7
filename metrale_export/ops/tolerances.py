"""Stated error bounds (docs/ops.md), used by the tests and the compare command.

Invariants: a bound here is a promise checked by a test; changing one needs the reason in the commit.
"""

# One op against a float64 evaluation of the contract, by output dtype (and activation format):
# float32 y by activation format, for an evaluation whose products are exact and whose sums are
# float32 (the CPU reference and ONNX Runtime op of every format, and the GPU's exact paths: the
# block-scaled W8A8 variants, W8A8MoEProj); a bfloat16 or float16 y adds one final rounding
# (bfloat16: 2^-8 relative at worst).
OP_FP32 = {"bf16": 1e-5, "nvfp4": 1e-5, "fp8": 1e-4}
# W8A8Proj version 3's GPU kernel (contract.W8A8_FP8_ARITHMETIC, float32 y): the FP8 tensor core's
# accumulator inside a 128-k block is not float32. On the H200 its norm-wise error against the
# float64 sum of the exact e4m3 products measured 1.27e-4 .. 1.29e-4, flat in K = 1040 .. 25600
# (benchmarks/results/fp8-accuracy-20261201-1209-a24630d.md), 1.1e-4 .. 1.5e-4 over tests/gpu's
# shapes; the bound leaves 2x. The exact f16 path measures < 1.2e-7.
OP_FP8_TENSOR_CORE = 2.5e-4
# The same kernel per element: |y - ref| at most this fraction of the element's sum of |terms|
# (sum_k |xq * w| times the scales), on top of the output's own rounding (a wrong fragment layout or
# a lost block gives errors of order 1; tests/gpu/test_w8a8_fp8_wgmma.py checks every element).
OP_FP8_ELEMENT = 1e-3
OP_OUTPUT = {"bfloat16": 8e-3, "float16": 1e-3}

# A whole export, ONNX Runtime vs the PyTorch reference of the same model: the floors of the
# end-to-end bounds (end_to_end_bound below: deeper models get depth x LAYER).
MODEL_UNQUANTIZED = 1e-4
MODEL_QUANTIZED = 1e-3
# The same quantized model on another device's summation order (the GPU through the CUDA ops) vs
# ONNX Runtime, W4A16: its bf16 activation rounding carries a float32 last-bit difference across a
# rounding boundary now and then, and on the demo models that alone moves the logits by up to 1.2e-3
# (benchmarks/diagnostics/debug_w4a16.py, 2026-11-29). The kernels themselves are checked per projection.
MODEL_OTHER_DEVICE_BF16 = 5e-3
# An unquantized export vs transformers in float32. The export's attention is the metrale Attention
# op, which rounds q, k, v and P to bf16 (docs/ops.md, Attention) where transformers keeps float32:
# one bf16 rounding is 2^-9 relative, and the demo, MoE and hybrid test models' logits measured
# 0.7e-3..3.9e-3 (2026-12-02). Everything else in such an export is float32 (measured < 1e-5).
TRANSFORMERS = 2.0**-7

# A quantized model's logits vs the unquantized model's, relative Frobenius error, measured on the
# demo model (random weights, which quantize worse than trained ones): 2026-11-29 on the CPU,
# w4a16 0.153 (group 128, symmetric, before issue 15; 2026-12-01 with the search: 0.137 with zero
# points, the default, 0.138 symmetric), w8a8 0.050, w4a4 0.183. The bounds leave headroom.
QUANTIZED_VS_FLOAT = {"w4a16": 0.25, "w8a8": 0.08, "w4a4": 0.30}


# --- compare: teacher-forced pieces and the end-to-end run (docs/ops.md, "Tolerances") -------------
# Per op: ONNX Runtime's metrale op against the PyTorch model's projection (built from the
# checkpoint) on ONNX Runtime's own input: two evaluations of the contract on the same operands.
def op_bound(activation_format: str, op_type: str | None = None) -> float:
    if op_type in OP_NON_PROJECTION:
        return OP_NON_PROJECTION[op_type]
    return OP_FP32.get(activation_format, OP_FP32["bf16"])


# The non-projection ops against the PyTorch module on ONNX Runtime's input (relative Frobenius
# error of each output; the router's ids must be equal). Both sides run the same CPU reference, so
# the expected error is 0; the bound is a few float32 ulps of reassociation, far below what one
# wrong weight element gives (a norm weight element of K = 128 off by 10% moves y by about 1e-2).
OP_NON_PROJECTION = {"RMSNorm": 1e-5, "FloatProj": 1e-5, "Router": 1e-5}
# Attention: both sides run ops/attention.py's reference on the same q, key, value (same bits
# expected); against float64 the op's own bound is per element (ops.attention.ATTENTION_BOUND).
OP_NON_PROJECTION["Attention"] = 1e-5
# The Gated DeltaNet ops: both sides run ops/gdn.py's reference on the same inputs (same bits
# expected). Against float64, the float32 rule over a sequence is within GDN_F64 relative (the state
# carries each step's float32 rounding; measured 2026-12-02 on the CPU: below 2e-7 over 33 tokens).
OP_NON_PROJECTION["CausalConv1d"] = 1e-5
OP_NON_PROJECTION["GatedDeltaRule"] = 1e-5
GDN_F64 = 1e-5


def op_output_bound(dtype, activation_format: str = "bf16", tensor_core: bool = False) -> float:
    """The bound of one op whose y has ``dtype`` (float32, float16 or bfloat16: a name, or a torch or
    numpy dtype) against the float64 evaluation (docs/ops.md, Tolerances). ``tensor_core``: the
    evaluation is a GPU kernel that may sum fp8 products on the FP8 tensor core (W8A8Proj version 3),
    so a float32 y of the fp8 format gets OP_FP8_TENSOR_CORE; the CPU references never do."""
    name = str(dtype).rsplit(".", 1)[-1]
    if name in OP_OUTPUT:
        return OP_OUTPUT[name]
    if tensor_core and activation_format == "fp8":
        return OP_FP8_TENSOR_CORE
    return op_bound(activation_format)
# The CUDA kernels of these ops against a float64 evaluation of docs/ops.md (tests/gpu): float32
# x: a few ulps of the sum of squares and of expf; bf16 / fp16 x: one rounding of the output
# (2^-8, 2^-11 relative) on top.
OP_NON_PROJECTION_GPU = {"float32": 1e-5, "float16": 2.0**-10, "bfloat16": 2.0**-7}


# Per layer, relative error of the layer's update (output - input) and of its new state, with the
# layer run on ONNX Runtime's input to it. Unquantized: float32 reassociation of standard ops only.
# Quantized: in addition, a float32 last-bit difference can move one rounded activation element by
# one step of its format; the bound is one bf16 step (2^-8), far above the expected flips
# (docs/ops.md) and far below what one wrong weight group gives.
# The coarse formats carry a flip further: an input that differs by delta after one flip moves a
# fraction ~delta / step of the next layer's fp8 or e2m1 elements, each by a whole step, so the
# difference grows faster than one bf16 step a layer. Measured on the CPU, 2026-12-02, the 8B-shaped
# random checkpoint (36 layers, benchmarks/results/scale8b-*): every op and teacher-forced layer within
# bounds, end to end at most 4.5e-3 a layer in W8A8 (prefill present_value.7: 3.6e-2 after 8) and
# 9.4e-3 in W4A4 (prefill present_key.14: 0.141 after 15; logits 0.239 after 37), where 2^-8 = 3.9e-3
# had failed both exports. 2^-7 and 2^-6 are 1.7 times those.
LAYER = {"none": 1e-5, "bf16": 2.0**-8, "fp8": 2.0**-7, "nvfp4": 2.0**-6}
# Ops without an activation format that round their operands all the same (docs/ops.md): a layer
# with one is bounded as one with that format, whatever its projections are.
OPERAND_ROUNDING = {"Attention": "bf16"}


def layer_bound(formats) -> float:
    """The per-layer error the end-to-end bound adds up, d of them after d layers."""
    return max((LAYER.get(f, LAYER["bf16"]) for f in formats), default=LAYER["none"])


# The teacher-forced check of one layer (compare, "per layer"): the PyTorch layer run on ONNX
# Runtime's input. A rare flipped rounding inside the layer (above) is not averaged out when the
# flipped element dominates its row: real models' outlier channels. Measured on the CPU, 2026-12-02,
# a held-out 30-layer Qwen3 with outlier channels (x12 embedding columns, x3 norm weights): worst
# layer 3.8e-3 in W4A16 (bf16 activations), 5.0e-3 in W8A8 (layer 5, prefill; every op of that
# layer within its op bound on ONNX Runtime's inputs), against 2^-8 = 3.9e-3 here before. 2^-5 is
# six times the worst measured and 35 times under a swapped KV head (1.10, tests/compare/
# test_attention_fault.py); a wrong weight is caught by the op check (above).
LAYER_TEACHER_FORCED = {"none": LAYER["none"], "quantized": 2.0**-5}


def teacher_forced_layer_bound(formats) -> float:
    return LAYER_TEACHER_FORCED["quantized"] if formats else LAYER_TEACHER_FORCED["none"]


# End to end (prefill and decode, no teacher forcing): each layer's rounding flips are carried into
# every later layer, so the bound of a value computed after d layers is d per-layer bounds, at
# least the fixed floors of a shallow model.
E2E_FLOOR = {"none": MODEL_UNQUANTIZED, "quantized": MODEL_QUANTIZED}


def end_to_end_bound(formats, depth: int) -> float:
    quantized = any(f != "none" for f in formats)
    floor = E2E_FLOOR["quantized" if quantized else "none"]
    return max(floor, depth * layer_bound(formats))
