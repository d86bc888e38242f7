/*
 * metrale_rms_norm: the C launcher of RMSNorm (plugins/include/metrale/kernels.h): picks the row
 * group (warp or CTA, from K alone) and the chunks a thread holds, and launches. No workspace.
 */
#include "rmsNormKernel.cuh"

#include <cstdlib>
#include <cstring>

using namespace metrale;

namespace
{

bool aligned16(const void* p)
{
    return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

/* METRALE_RMSNORM=base: the weight loaded after the reduction (the kernel before the early loads),
 * for comparison; the same bits either way. Read at each launch, as METRALE_ATTENTION_DECODE is. */
bool earlyLoads()
{
    const char* v = std::getenv("METRALE_RMSNORM");
    return v == nullptr || std::strcmp(v, "base") != 0;
}

template <typename T, int kTPR, int kC>
cudaError_t launchRow(RmsNormArgs const& a, cudaStream_t stream)
{
    constexpr int kRows = kNORM_THREADS / kTPR;
    const unsigned blocks = static_cast<unsigned>((a.m + kRows - 1) / kRows);
    // The early loads hold 2 kC more 16-byte registers a thread: only up to kC = 4 (K <= 8192 bf16).
    if (kC <= 4 && earlyLoads())
    {
        rmsNormKernel<T, kTPR, kC, kC <= 4><<<blocks, kNORM_THREADS, 0, stream>>>(a);
    }
    else
    {
        rmsNormKernel<T, kTPR, kC, false><<<blocks, kNORM_THREADS, 0, stream>>>(a);
    }
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
