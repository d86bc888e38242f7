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
    if (group_size != 32 && group_size != 64 && group_size != 128)
    {
        return cudaErrorNotSupported;
    }
    if (k % 2 != 0)
    {
        return cudaErrorInvalidValue;
    }
    if (k % 32 != 0)
    {
        return cudaErrorNotSupported;  // 16-byte weight rows for the copies (plugins/KERNELS.md, Limits)
    }
    const int64_t groups = (k + group_size - 1) / group_size;  // a partial last group (op version 2)
    if (n * groups > kMAX_DIM || n * (k / 2) > kMAX_DIM)
    {
        return cudaErrorNotSupported;  // 32-bit indexing of the weight and its scales
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
    const bool wg = useWgmma<W4A16Policy>(m);
    const uint16_t* X = nullptr;
    cudaError_t e = bf16OperandFor(wg, x, x_dtype, m, k, wgPartBytes(m, n, k), workspace, workspace_bytes, stream, &X);
    if (e != cudaSuccess)
    {
        return e;
    }
    W4A16Policy::Params p{};
    p.codes = reinterpret_cast<const uint8_t*>(weight);
    p.scale = static_cast<const uint16_t*>(weight_scale);
    p.zeroPoint = reinterpret_cast<const uint8_t*>(zero_point);
    p.bias = bias;
    p.groups = static_cast<int>(groups);
    p.groupShift = group_size == 32 ? 5 : group_size == 64 ? 6 : 7;
    p.perBlock = static_cast<int>(128 / group_size);
    p.totalGroups = static_cast<int>(n * p.groups);
    return dispatchProjGemm<W4A16Policy>(p, X, wg, wg ? static_cast<uint8_t*>(workspace) + bf16OperandBytes(m, k) : nullptr, y, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
        x_dtype, stream);
}
