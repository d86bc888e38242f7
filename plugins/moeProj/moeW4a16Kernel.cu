/*
 * metrale_w4a16_moe_proj: the C launcher of W4A16MoEProj (include/metrale/kernels.h): the grouped
 * steps of moeProjKernel.cuh around W4A16Policy, the dense W4A16Proj's weight policy.
 */
#include "metrale/kernels.h"
#include "moeFusedKernel.cuh"
#include "moeProjKernel.cuh"
#include "../w4a16Proj/w4a16ProjKernel.cuh"

using namespace metrale;

namespace
{
struct W4A16View
{
    ExpertStrides s;
    __device__ W4A16Policy::Params operator()(W4A16Policy::Params p, int e, int) const
    {
        p.codes += e * s.codes;
        p.scale += e * s.scale;
        if (p.zeroPoint != nullptr)
        {
            p.zeroPoint += e * s.zp;
        }
        if (p.bias != nullptr)
        {
            p.bias += e * s.bias;
        }
        return p;
    }
};

MoeWorkspace layout(int64_t m, int64_t top_k, int64_t E, int64_t n, int64_t k, int32_t x_dtype)
{
    return moeWorkspace(m, top_k, E, n, k, x_dtype, 0, moeTileRows<W4A16Policy>(selectMoeTier(m)));
}
} // namespace

extern "C" size_t metrale_w4a16_moe_workspace_size(int64_t m, int64_t top_k, int64_t num_experts, int64_t n,
    int64_t k, int32_t x_dtype)
{
    return m <= 0 ? 0 : layout(m, top_k, num_experts, n, k, x_dtype).bytes;
}

extern "C" cudaError_t metrale_w4a16_moe_proj(const void* x, int32_t x_dtype, const int32_t* topk_ids,
    const void* topk_weights, const int8_t* weight, const void* weight_scale, const int8_t* zero_point,
    const float* bias, void* y, int64_t m, int64_t top_k, int64_t num_experts, int64_t n, int64_t k,
    int64_t group_size, int32_t combine, void* workspace, size_t workspace_bytes, cudaStream_t stream)
{
    cudaError_t e = moeCheck(x, x_dtype, topk_ids, topk_weights, y, m, top_k, num_experts, n, k, combine);
    if (e != cudaSuccess)
    {
        return e;
    }
    e = w4a16Supported(n, k, group_size);  // as the dense launcher's
    if (e != cudaSuccess)
    {
        return e;
    }
    const int64_t g = (k + group_size - 1) / group_size;  // a partial last group (op version 2)
    if (m == 0)
    {
        return cudaSuccess;
    }
    const MoeWorkspace w = layout(m, top_k, num_experts, n, k, x_dtype);
    if (weight == nullptr || weight_scale == nullptr || workspace == nullptr || workspace_bytes < w.bytes
        || !aligned(workspace, 16) || !aligned(weight, 16))
    {
        return cudaErrorInvalidValue;
    }
    if ((n * (k / 2)) % 16 != 0 || (n * g) % 2 != 0 || (zero_point != nullptr && (n * g) % 4 != 0))
    {
        return cudaErrorNotSupported;  // every expert's codes 16-byte, bf16 scale and zero-point words 4-byte aligned
    }
    const int fused = moeFusedMode(m, top_k, num_experts);
    const MoeTier tier = moeTierFor<W4A16Policy, W4A16View>(m, top_k, num_experts);
    MoeRun run{};
    e = moeBegin(x, x_dtype, topk_ids, topk_weights, y, m, top_k, num_experts, n, k, combine, w, workspace,
        moeTileRows<W4A16Policy>(tier), stream, &run, fused != 0, static_cast<int>(tier));
    if (e != cudaSuccess)
    {
        return e;
    }
    const W4A16Policy::Params p = w4a16Params(weight, weight_scale, zero_point, bias, n, k, group_size);
    W4A16View view{{n * (k / 2), n * g, n * g, n}};
    const uint16_t* X = !run.slots && moeWgmmaTier(run.tier) ? moeWgOperand(run) : moeBf16Operand(run);
    return fused ? moeProjectFused<W4A16Policy>(p, view, run, X, fused) : moeProject<W4A16Policy>(p, view, run, X);
}
