/*
 * metrale_float_proj: the C launcher of FloatProj (plugins/include/metrale/kernels.h).
 *
 * The bf16 A operand (x itself, or bf16(x) in the workspace), then the projection tier that serves
 * m rows with the bf16 weight policy. K must be a multiple of 16; other K return
 * cudaErrorNotSupported. Never allocates, synchronizes or prints.
 */
#include "floatProjKernel.cuh"
#include "metrale/kernels.h"
#include "projLaunch.cuh"
#include "projStream.cuh"

using namespace metrale;

extern "C" size_t metrale_float_proj_workspace_size(int64_t m, int64_t n, int64_t k)
{
    if (m <= 0 || k <= 0)
    {
        return 0;
    }
    return bf16OperandBytes(m, k) + wgPartBytes(m, n, k);
}

extern "C" cudaError_t metrale_float_proj(const void* x, int32_t x_dtype, const void* weight, const float* bias,
    void* y, int64_t m, int64_t n, int64_t k, void* workspace, size_t workspace_bytes, cudaStream_t stream)
{
    if (!validShape(m, n, k) || !validDtype(x_dtype))
    {
        return cudaErrorInvalidValue;
    }
    if (k % 16 != 0)
    {
        return cudaErrorNotSupported;
    }
    if (m == 0)
    {
        return cudaSuccess;
    }
    if (x == nullptr || weight == nullptr || y == nullptr || !aligned(weight, 16)
        || !aligned(y, x_dtype == kMETRALE_FLOAT32 ? 4 : 2))
    {
        return cudaErrorInvalidValue;
    }
    return projectBf16<FloatProjPolicy>(floatProjParams(weight, bias), x, x_dtype, m, n, k, workspace, workspace_bytes,
        y, stream);
}
