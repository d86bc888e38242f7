/*
 * metrale_w4a16_proj: the C launcher of W4A16Proj (plugins/include/metrale/kernels.h).
 *
 * Validates, makes the bf16 A operand (x itself, or bf16(x) in the workspace), and launches the
 * tier of projGemm.cuh that serves m rows. Never allocates, synchronizes or prints.
 */
#include "metrale/kernels.h"
#include "projLaunch.cuh"
#include "projStream.cuh"
#include "w4a16ProjKernel.cuh"

using namespace metrale;

extern "C" size_t metrale_w4a16_workspace_size(int64_t m, int64_t n, int64_t k, int64_t group_size)
{
    (void) group_size;
    if (m <= 0 || k <= 0)
    {
        return 0;
    }
    // bf16(x) (float32/float16 or unaligned x, or the wgmma layout), then the wgmma split's slice sums
    return bf16OperandBytes(m, k) + wgPartBytes(m, n, k);
}

extern "C" cudaError_t metrale_w4a16_proj(const void* x, int32_t x_dtype, const int8_t* weight,
    const void* weight_scale, const int8_t* zero_point, const float* bias, void* y, int64_t m, int64_t n,
    int64_t k, int64_t group_size, void* workspace, size_t workspace_bytes, cudaStream_t stream)
{
    if (!validShape(m, n, k) || !validDtype(x_dtype))
    {
        return cudaErrorInvalidValue;
    }
    const cudaError_t supported = w4a16Supported(n, k, group_size);
    if (supported != cudaSuccess)
    {
        return supported;
    }
    if (m == 0)
    {
        return cudaSuccess;
    }
    if (x == nullptr || weight == nullptr || weight_scale == nullptr || y == nullptr || !aligned(weight, 16)
        || !aligned(weight_scale, 4) || (zero_point != nullptr && !aligned(zero_point, 4)) || !aligned(y, x_dtype == kMETRALE_FLOAT32 ? 4 : 2))
    {
        return cudaErrorInvalidValue;
    }
    return projectBf16<W4A16Policy>(w4a16Params(weight, weight_scale, zero_point, bias, n, k, group_size), x, x_dtype,
        m, n, k, workspace, workspace_bytes, y, stream);
}
