/*
 * metrale_w4a4_moe_proj: the C launcher of W4A4MoEProj (include/metrale/kernels.h): the grouped
 * steps of moeProjKernel.cuh around the dense W4A4Proj's policies (bf16 activations, or the NVFP4
 * emulation with per-row dynamic global scales; a static input_scale is not served here).
 */
#include "metrale/kernels.h"
#include "moeProjKernel.cuh"
#include "../w4a4Proj/w4a4ProjKernel.cuh"

using namespace metrale;

namespace
{
struct W4A4View
{
    ExpertStrides s;
    __device__ W4A4Params operator()(W4A4Params p, int e, int r0) const
    {
        p.codes += e * s.codes;
        p.scale += e * s.scale;
        p.globalScale += e;
        if (p.bias != nullptr)
        {
            p.bias += e * s.bias;
        }
        if (p.ga != nullptr)
        {
            p.ga += r0;
        }
        return p;
    }
};

MoeWorkspace layout(int64_t m, int64_t top_k, int64_t E, int64_t n, int64_t k, int32_t x_dtype, int32_t act_format)
{
    return moeWorkspace(m, top_k, E, n, k, x_dtype, act_format == kMETRALE_ACT_NVFP4 ? 1 : 0,
        moeTileRows<W4A4Nvfp4Policy>(selectMoeTier(m)));
}
} // namespace

extern "C" size_t metrale_w4a4_moe_workspace_size(int64_t m, int64_t top_k, int64_t num_experts, int64_t n,
    int64_t k, int32_t x_dtype, int32_t act_format)
{
    return m <= 0 ? 0 : layout(m, top_k, num_experts, n, k, x_dtype, act_format).bytes;
}

extern "C" cudaError_t metrale_w4a4_moe_proj(const void* x, int32_t x_dtype, const int32_t* topk_ids,
    const void* topk_weights, const int8_t* weight, const int8_t* weight_scale, const float* weight_global_scale,
    const float* input_scale, int32_t act_format, const float* bias, void* y, int64_t m, int64_t top_k,
    int64_t num_experts, int64_t n, int64_t k, int32_t combine, void* workspace, size_t workspace_bytes,
    cudaStream_t stream)
{
    cudaError_t e = moeCheck(x, x_dtype, topk_ids, topk_weights, y, m, top_k, num_experts, n, k, combine);
    if (e != cudaSuccess)
    {
        return e;
    }
    if ((act_format != kMETRALE_ACT_BF16 && act_format != kMETRALE_ACT_NVFP4) || k % 32 != 0
        || (n * (k / kNVFP4_BLOCK)) % 4 != 0 || input_scale != nullptr)
    {
        return cudaErrorNotSupported;
    }
    if (m == 0)
    {
        return cudaSuccess;
    }
    const MoeTier tier = selectMoeTier(m);
    const MoeWorkspace w = layout(m, top_k, num_experts, n, k, x_dtype, act_format);
    if (weight == nullptr || weight_scale == nullptr || weight_global_scale == nullptr || workspace == nullptr
        || workspace_bytes < w.bytes || !aligned(workspace, 16) || !aligned(weight, 16) || !aligned(weight_scale, 4))
    {
        return cudaErrorInvalidValue;
    }
    uint8_t* ws = static_cast<uint8_t*>(workspace);
    MoeRouting r{};
    e = moeRoute(topk_ids, x, x_dtype, m, top_k, num_experts, k, combine, w, workspace,
        moeTileRows<W4A4Nvfp4Policy>(tier), stream, &r);
    if (e != cudaSuccess)
    {
        return e;
    }
    const int64_t total = m * top_k;
    W4A4Params p{};
    p.codes = reinterpret_cast<const uint8_t*>(weight);
    p.scale = reinterpret_cast<const uint8_t*>(weight_scale);
    p.globalScale = weight_global_scale;
    p.bias = bias;
    p.scaleCols = static_cast<int>(k / kNVFP4_BLOCK);
    p.totalScaleBytes = n * (k / kNVFP4_BLOCK);
    W4A4View view{{n * (k / 2), n * (k / kNVFP4_BLOCK), 0, n}};
    if (act_format == kMETRALE_ACT_BF16)
    {
        const uint16_t* X = reinterpret_cast<const uint16_t*>(ws + w.xs);
        if (x_dtype != kMETRALE_BFLOAT16)
        {
            toBf16Kernel<<<elementwiseBlocks(static_cast<size_t>(total * k)), kACT_THREADS, 0, stream>>>(
                ws + w.xs, x_dtype, reinterpret_cast<__nv_bfloat16*>(ws + w.operand), static_cast<size_t>(total * k));
            X = reinterpret_cast<const uint16_t*>(ws + w.operand);
        }
        e = moeGemm<W4A4Bf16Policy>(p, view, r, tier, w.maxTiles, X, ws + w.ys, x_dtype, static_cast<int>(n),
            static_cast<int>(k), stream);
    }
    else
    {
        p.ga = reinterpret_cast<const float*>(ws + w.scales);
        quantNvfp4Kernel<<<static_cast<int>(total), kACT_THREADS, 0, stream>>>(ws + w.xs, x_dtype, nullptr,
            reinterpret_cast<__half*>(ws + w.operand), reinterpret_cast<float*>(ws + w.scales), static_cast<int>(k));
        e = moeGemm<W4A4Nvfp4Policy>(p, view, r, tier, w.maxTiles, reinterpret_cast<const uint16_t*>(ws + w.operand),
            ws + w.ys, x_dtype, static_cast<int>(n), static_cast<int>(k), stream);
    }
    if (e != cudaSuccess)
    {
        return e;
    }
    return moeFinish(topk_ids, topk_weights, r, ws + w.ys, x_dtype, y, m, top_k, num_experts, n, combine, stream);
}
