"""Does TensorRT-RTX's refit path (docs/engines.md, "Engine weights") run on this machine? Each step, what it says.

    python benchmarks/diagnostics/rtx_refit_probe.py ENGINE LOWERED.onnx
"""
import sys
import tensorrt_rtx_bindings as trt
print("tensorrt-rtx", trt.__version__)
log = trt.Logger(trt.Logger.ERROR)
eng = sys.argv[1]; onnx = sys.argv[2]
rt = trt.Runtime(log)
print("Runtime:", rt)
try:
    e = rt.deserialize_cuda_engine(open(eng, "rb").read())
    print("deserialize_cuda_engine ->", e)
except Exception as ex:
    e = None; print("deserialize_cuda_engine raised", type(ex).__name__, ex)
if e is not None:
    r = trt.Refitter(e, log); p = trt.OnnxParserRefitter(r, log)
    print("refit_from_file", p.refit_from_file(onnx), "refit_cuda_engine", r.refit_cuda_engine())
else:
    try:
        r = trt.Refitter(None, log); print("Refitter(None) ->", r)
    except Exception as ex:
        print("Refitter needs an ICudaEngine:", type(ex).__name__, str(ex).splitlines()[0])
# the build side: a one-MatMul graph with REFIT | STRIP_PLAN, CPU-only AOT build
b = trt.Builder(log)
net = b.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
import numpy as np
x = net.add_input("x", trt.float32, (4, 64))
w = net.add_constant((64, 64), trt.Weights(np.ones((64, 64), np.float32)))
y = net.add_matrix_multiply(x, trt.MatrixOperation.NONE, w.get_output(0), trt.MatrixOperation.NONE)
net.mark_output(y.get_output(0))
for flags in ([], ["REFIT"], ["REFIT", "STRIP_PLAN"]):
    c = b.create_builder_config()
    c.num_compute_capabilities = 1; c.set_compute_capability(trt.ComputeCapability.SM89, 0)
    for f in flags: c.set_flag(getattr(trt.BuilderFlag, f))
    try:
        s = b.build_serialized_network(net, c)
        print("build", flags or "plain", "->", None if s is None else f"{s.nbytes} bytes")
    except Exception as ex:
        print("build", flags, "raised", type(ex).__name__, str(ex).splitlines()[0][:200])
