/*
 * metrale_router: the C launcher of Router (plugins/include/metrale/kernels.h). No workspace.
 */
#include "routerKernel.cuh"

using namespace metrale;

namespace
{

template <typename T>
cudaError_t launchRouter(const void* logits, int32_t* ids, void* weights, int64_t m, int e, int topK, int normalize,
    cudaStream_t stream)
{
    const int64_t blocks = (m + kROUTER_ROWS - 1) / kROUTER_ROWS;
    const size_t smem = static_cast<size_t>(kROUTER_ROWS) * e * sizeof(float);
    routerKernel<T><<<static_cast<unsigned>(blocks), kROUTER_ROWS * 32, smem, stream>>>(
        static_cast<const T*>(logits), ids, static_cast<T*>(weights), m, e, topK, normalize);
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t metrale_router(const void* logits, int32_t x_dtype, int32_t* topk_ids, void* topk_weights,
    int64_t m, int64_t num_experts, int64_t top_k, int32_t normalize, cudaStream_t stream)
{
    if (m < 0 || num_experts <= 0 || top_k <= 0 || top_k > num_experts || (normalize != 0 && normalize != 1)
        || (x_dtype != kMETRALE_FLOAT32 && x_dtype != kMETRALE_FLOAT16 && x_dtype != kMETRALE_BFLOAT16))
    {
        return cudaErrorInvalidValue;
    }
    if (num_experts > kROUTER_MAX_EXPERTS || top_k > kROUTER_MAX_TOP_K)
    {
        return cudaErrorNotSupported;
    }
    if (m == 0)
    {
        return cudaSuccess;
    }
    if (logits == nullptr || topk_ids == nullptr || topk_weights == nullptr || m > 0x7fffffffLL * kROUTER_ROWS)
    {
        return cudaErrorInvalidValue;
    }
    const int e = static_cast<int>(num_experts);
    const int k = static_cast<int>(top_k);
    switch (x_dtype)
    {
    case kMETRALE_FLOAT32: return launchRouter<float>(logits, topk_ids, topk_weights, m, e, k, normalize, stream);
    case kMETRALE_FLOAT16: return launchRouter<__half>(logits, topk_ids, topk_weights, m, e, k, normalize, stream);
    default: return launchRouter<__nv_bfloat16>(logits, topk_ids, topk_weights, m, e, k, normalize, stream);
    }
}
