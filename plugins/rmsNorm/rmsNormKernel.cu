/*
 * metrale_rms_norm: the C launcher of RMSNorm (plugins/include/metrale/kernels.h): picks the row
 * group (warp or CTA, from K alone) and the chunks a thread holds, and launches. No workspace.
 */
#include "rmsNormKernel.cuh"

using namespace metrale;

namespace
{

bool aligned16(const void* p)
{
    return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

template <typename T, int kTPR, int kC>
cudaError_t launchRow(RmsNormArgs const& a, cudaStream_t stream)
{
    constexpr int kRows = kNORM_THREADS / kTPR;
    const int64_t blocks = (a.m + kRows - 1) / kRows;
    rmsNormKernel<T, kTPR, kC><<<static_cast<unsigned>(blocks), kNORM_THREADS, 0, stream>>>(a);
    return cudaGetLastError();
}

template <typename T, int kTPR>
cudaError_t launchChunks(RmsNormArgs const& a, int chunksPerThread, cudaStream_t stream)
{
    if (chunksPerThread <= 1)
    {
        return launchRow<T, kTPR, 1>(a, stream);
    }
    if (chunksPerThread <= 2)
    {
        return launchRow<T, kTPR, 2>(a, stream);
    }
    if (chunksPerThread <= 4)
    {
        return launchRow<T, kTPR, 4>(a, stream);
    }
    if (chunksPerThread <= 8)
    {
        return launchRow<T, kTPR, 8>(a, stream);
    }
    return launchRow<T, kTPR, 16>(a, stream);
}

template <typename T>
cudaError_t launchTyped(RmsNormArgs const& a, cudaStream_t stream)
{
    constexpr int kV = NormIo<T>::kV;
    const int chunks = a.k / kV;
    if (a.k <= kWARP_ROW_MAX_K)
    {
        return launchChunks<T, 32>(a, (chunks + 31) / 32, stream);
    }
    return launchChunks<T, kNORM_THREADS>(a, (chunks + kNORM_THREADS - 1) / kNORM_THREADS, stream);
}

} // namespace

extern "C" int32_t metrale_rms_norm_threads_per_row(int64_t k)
{
    return k <= kWARP_ROW_MAX_K ? 32 : kNORM_THREADS;
}

extern "C" cudaError_t metrale_rms_norm(const void* x, int32_t x_dtype, const void* weight, const void* residual,
    const void* gate, void* y, void* residual_out, int64_t m, int64_t k, float epsilon, int32_t weight_offset,
    cudaStream_t stream)
{
    if (m < 0 || k <= 0 || k > (1 << 30) || (x_dtype != kMETRALE_FLOAT32 && x_dtype != kMETRALE_FLOAT16
        && x_dtype != kMETRALE_BFLOAT16) || (weight_offset != 0 && weight_offset != 1))
    {
        return cudaErrorInvalidValue;
    }
    const int v = x_dtype == kMETRALE_FLOAT32 ? 4 : 8;
    const int tpr = k <= kWARP_ROW_MAX_K ? 32 : kNORM_THREADS;
    if (k % v != 0 || k > static_cast<int64_t>(kNORM_MAX_CHUNKS) * v * tpr)
    {
        return cudaErrorNotSupported;
    }
    if (m == 0)
    {
        return cudaSuccess;
    }
    if (x == nullptr || weight == nullptr || y == nullptr || (residual != nullptr && residual_out == nullptr)
        || !aligned16(x) || !aligned16(weight) || !aligned16(residual) || !aligned16(gate) || !aligned16(y)
        || !aligned16(residual_out) || m > 0x7fffffffLL * (kNORM_THREADS / tpr))
    {
        return cudaErrorInvalidValue;
    }
    RmsNormArgs a{x, weight, residual, gate, y, residual_out, m, static_cast<int>(k), epsilon, weight_offset};
    switch (x_dtype)
    {
    case kMETRALE_FLOAT32: return launchTyped<float>(a, stream);
    case kMETRALE_FLOAT16: return launchTyped<__half>(a, stream);
    default: return launchTyped<__nv_bfloat16>(a, stream);
    }
}
