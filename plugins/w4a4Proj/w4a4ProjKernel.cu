/*
 * metrale_w4a4_proj: the C launcher of W4A4Proj (plugins/include/metrale/kernels.h).
 *
 * nvfp4 activations: the quantization pre-pass writes the exact activation factors (f16) and ga
 * into the workspace, then the NVFP4-emulation policy. bf16 activations: the bf16 A operand and the
 * W4A16-with-NVFP4-weights policy. K must be a multiple of 32 here (16-byte weight rows); K = 16 mod 32,
 * which the contract allows, returns cudaErrorNotSupported.
 */
#include "metrale/kernels.h"
#include "projLaunch.cuh"
#include "projStream.cuh"
#include "w4a4ProjKernel.cuh"

using namespace metrale;

namespace
{

/* Workspace of the nvfp4 path: xf (row-major f16), ga, the wgmma operand, then the split's slice sums. */
size_t nvfp4WgOffset(int64_t m, int64_t k)
{
    return operandBytes(m, k) + alignUp(static_cast<size_t>(m) * 4, kWS_ALIGN);
}

} // namespace

extern "C" size_t metrale_w4a4_workspace_size(int64_t m, int64_t n, int64_t k, int32_t act_format)
{
    if (m <= 0 || k <= 0)
    {
        return 0;
    }
    if (act_format == kMETRALE_ACT_NVFP4)
    {
        return nvfp4WgOffset(m, k) + wgExtraBytes(m, k) + wgPartBytes(m, n, k);
    }
    return bf16OperandBytes(m, k) + wgPartBytes(m, n, k);
}

extern "C" cudaError_t metrale_w4a4_proj(const void* x, int32_t x_dtype, const int8_t* weight,
    const int8_t* weight_scale, const float* weight_global_scale, const float* input_scale, int32_t act_format,
    const float* bias, void* y, int64_t m, int64_t n, int64_t k, void* workspace, size_t workspace_bytes,
    cudaStream_t stream)
{
    if (!validShape(m, n, k) || !validDtype(x_dtype))
    {
        return cudaErrorInvalidValue;
    }
    if (act_format != kMETRALE_ACT_BF16 && act_format != kMETRALE_ACT_NVFP4)
    {
        return cudaErrorNotSupported;
    }
    if (k % kNVFP4_BLOCK != 0)
    {
        return cudaErrorInvalidValue;
    }
    if (k % 32 != 0)
    {
        return cudaErrorNotSupported;
    }
    if (m == 0)
    {
        return cudaSuccess;
    }
    if (x == nullptr || weight == nullptr || weight_scale == nullptr || weight_global_scale == nullptr || y == nullptr
        || !aligned(weight, 16) || !aligned(weight_scale, 4) || !aligned(y, x_dtype == kMETRALE_FLOAT32 ? 4 : 2))
    {
        return cudaErrorInvalidValue;
    }
    W4A4Params p = w4a4Params(weight, weight_scale, weight_global_scale, bias, n, k);
    const int mi = static_cast<int>(m);
    const int ni = static_cast<int>(n);
    const int ki = static_cast<int>(k);
    if (act_format == kMETRALE_ACT_BF16)
    {
        return projectBf16<W4A4Bf16Policy>(p, x, x_dtype, m, n, k, workspace, workspace_bytes, y, stream);
    }
    if (workspace == nullptr || !aligned(workspace, 16)
        || workspace_bytes < metrale_w4a4_workspace_size(m, n, k, act_format))
    {
        return cudaErrorInvalidValue;
    }
    __half* xf = static_cast<__half*>(workspace);
    float* ga = reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) + operandBytes(m, k));
    p.ga = ga;
    quantNvfp4Kernel<<<actRowGrid(m, k), kACT_THREADS, 0, stream>>>(x, x_dtype, input_scale, xf, ga, ki);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
    {
        return e;
    }
    const uint16_t* X = reinterpret_cast<const uint16_t*>(xf);
    const bool wg = useWgmma<W4A4Nvfp4Policy>(m);
    if (wg)
    {
        // The wgmma tier where it serves m, on the f16 factors laid out for it.
        void* xw = static_cast<uint8_t*>(workspace) + nvfp4WgOffset(m, k);
        e = wgOperand<true>(xf, kMETRALE_FLOAT16, m, k, xw, stream);
        if (e != cudaSuccess)
        {
            return e;
        }
        X = static_cast<const uint16_t*>(xw);
    }
    return dispatchProjGemm<W4A4Nvfp4Policy>(p, X, wg,
        static_cast<uint8_t*>(workspace) + nvfp4WgOffset(m, k) + wgExtraBytes(m, k), y, mi, ni, ki, x_dtype, stream);
}
