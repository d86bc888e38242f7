/*
 * metrale_w8a8_moe_proj: the C launcher of W8A8MoEProj (include/metrale/kernels.h): the grouped
 * steps of moeProjKernel.cuh around the dense W8A8Proj's policies (bf16 or fp8 activations; the fp8
 * pre-pass runs over the gathered rows, each row's scales from the row alone).
 */
#include "metrale/kernels.h"
#include "moeProjKernel.cuh"
#include "projWgmmaFp8.cuh"
#include "../w8a8Proj/w8a8ProjKernel.cuh"

using namespace metrale;

namespace
{
struct W8A8View
{
    ExpertStrides s;
    __device__ W8A8Params operator()(W8A8Params p, int e, int r0) const
    {
        p.codes += e * s.codes;
        p.scale += e * s.scale;
        if (p.bias != nullptr)
        {
            p.bias += e * s.bias;
        }
        if (p.sx != nullptr)
        {
            p.sx += static_cast<long long>(r0) * p.nbx;
        }
        return p;
    }
};

int64_t scaleCols(int64_t k, int32_t act_format, int32_t asg)
{
    return act_format != kMETRALE_ACT_FP8 ? 0 : asg == kMETRALE_ASCALE_ROW ? 1 : (k + kFP8_BLOCK - 1) / kFP8_BLOCK;
}

MoeWorkspace layout(int64_t m, int64_t top_k, int64_t E, int64_t n, int64_t k, int32_t x_dtype, int32_t act_format,
    int32_t asg)
{
    // Both policies tile alike (Tiers<P>::M128 differs only for per-block scales: the smaller kBM).
    const int rows = act_format == kMETRALE_ACT_FP8 ? moeTileRows<W8A8Fp8Policy<true>>(selectMoeTier(m))
                                                    : moeTileRows<W8A8Bf16Policy>(selectMoeTier(m));
    return moeWorkspace(m, top_k, E, n, k, x_dtype, scaleCols(k, act_format, asg), rows);
}

/* The FP8 wgmma tier (fp8 activations per row x per-channel weight scales, as the dense op at every m):
 * the token tile per grouped tier and the schedule's rows per tile, kN - 8 (a tile starts at any row;
 * its columns start at the row group of 8 that holds it). */
int fp8WgTile(MoeTier t)
{
    return t == MoeTier::kStream8 ? 16 : t == MoeTier::kStream16 ? 32 : 128;
}

/* The FP8 wgmma tier's workspace: the shared layout with its rows per tile, then the e4m3 operand. */
size_t fp8WgBytes(const MoeWorkspace& w, int64_t total, int64_t k)
{
    return w.bytes + alignUp(wgFp8OperandBytes(total, k), kWS_ALIGN);
}

/* CTA (n tile, schedule entry) on the FP8 wgmma tier's tile (projWgmmaFp8Tile). */
template <class P, int kN, class View>
__global__ void __launch_bounds__(kWG_THREADS, 1) moeWgmmaFp8Kernel(const typename P::Params p, const View view,
    const MoeRouting r, const uint8_t* __restrict__ Xw, void* __restrict__ Y, int total, int N, int K,
    int32_t yDtype, int slices)
{
    const int tile = blockIdx.y;
    if (tile >= *r.numTiles)
    {
        return;
    }
    const int e = r.tileExpert[tile];
    const int r0 = r.tileRow0[tile];
    const int rows = min(kN - 8, r.offsets[e + 1] - r0);
    projWgmmaFp8Tile<P, kN, WgFp8Stages<kN>::kST>(view(p, e, 0), Xw, Y, nullptr, total, (total + 7) >> 3, N, K,
        yDtype, slices, blockIdx.x * kWG_ROWS, r0 & ~7, r0, r0 + rows);
}

template <class P, int kN, class View>
cudaError_t launchMoeWgmmaFp8(const typename P::Params& p, const View& view, const MoeRouting& r, int maxTiles,
    const uint8_t* Xw, void* ys, int total, int n, int k, int32_t yDtype, cudaStream_t stream)
{
    auto kern = moeWgmmaFp8Kernel<P, kN, View>;
    constexpr int kSmem = WgFp8Layout<kN, WgFp8Stages<kN>::kST>::kSmem;
    static unsigned long long done = 0;  // the raised smem limit, per device (a race only repeats it)
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
    {
        return e;
    }
    const unsigned long long bit = 1ull << (dev & 63);
    if (!(done & bit))
    {
        e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
        if (e != cudaSuccess)
        {
            return e;
        }
        done |= bit;
    }
    const dim3 grid((n + kWG_ROWS - 1) / kWG_ROWS, maxTiles);
    kern<<<grid, kWG_THREADS, kSmem, stream>>>(p, view, r, Xw, ys, total, n, k, yDtype, projSlices(n, k));
    return cudaGetLastError();
}

template <class P>
cudaError_t run(const W8A8Params& p, const W8A8View& view, const MoeRouting& r, MoeTier tier, int maxTiles,
    const uint16_t* X, void* ys, int32_t x_dtype, int64_t n, int64_t k, cudaStream_t stream)
{
    return moeGemm<P>(p, view, r, tier, maxTiles, X, ys, x_dtype, static_cast<int>(n), static_cast<int>(k), stream);
}
} // namespace

extern "C" size_t metrale_w8a8_moe_workspace_size(int64_t m, int64_t top_k, int64_t num_experts, int64_t n,
    int64_t k, int32_t x_dtype, int32_t act_format, int32_t act_scale_granularity)
{
    if (m <= 0)
    {
        return 0;
    }
    const size_t mma = layout(m, top_k, num_experts, n, k, x_dtype, act_format, act_scale_granularity).bytes;
    if (act_format != kMETRALE_ACT_FP8 || act_scale_granularity != kMETRALE_ASCALE_ROW)
    {
        return mma;
    }
    // Either tier (the FP8 wgmma tier where the device has it and the weight scales are per channel).
    const MoeWorkspace w = moeWorkspace(m, top_k, num_experts, n, k, x_dtype, 1, fp8WgTile(selectMoeTier(m)) - 8);
    const size_t wg = fp8WgBytes(w, m * top_k, k);
    return mma > wg ? mma : wg;
}

extern "C" cudaError_t metrale_w8a8_moe_proj(const void* x, int32_t x_dtype, const int32_t* topk_ids,
    const void* topk_weights, const int8_t* weight, const float* weight_scale, int32_t weight_scale_granularity,
    int32_t act_format, int32_t act_scale_granularity, const float* bias, void* y, int64_t m, int64_t top_k,
    int64_t num_experts, int64_t n, int64_t k, int32_t combine, void* workspace, size_t workspace_bytes,
    cudaStream_t stream)
{
    cudaError_t e = moeCheck(x, x_dtype, topk_ids, topk_weights, y, m, top_k, num_experts, n, k, combine);
    if (e != cudaSuccess)
    {
        return e;
    }
    if ((weight_scale_granularity != kMETRALE_WSCALE_CHANNEL && weight_scale_granularity != kMETRALE_WSCALE_BLOCK128)
        || (act_format == kMETRALE_ACT_FP8 && act_scale_granularity != kMETRALE_ASCALE_ROW
            && act_scale_granularity != kMETRALE_ASCALE_ROW_BLOCK128))
    {
        return cudaErrorInvalidValue;
    }
    if ((act_format != kMETRALE_ACT_BF16 && act_format != kMETRALE_ACT_FP8) || k % 16 != 0)
    {
        return cudaErrorNotSupported;
    }
    if (m == 0)
    {
        return cudaSuccess;
    }
    const MoeTier tier = selectMoeTier(m);
    const bool fp8Wg = act_format == kMETRALE_ACT_FP8 && weight_scale_granularity == kMETRALE_WSCALE_CHANNEL
        && act_scale_granularity == kMETRALE_ASCALE_ROW && wgFp8Available<W8A8Fp8Policy<false>>();
    const MoeWorkspace w = fp8Wg ? moeWorkspace(m, top_k, num_experts, n, k, x_dtype, 1, fp8WgTile(tier) - 8)
                                 : layout(m, top_k, num_experts, n, k, x_dtype, act_format, act_scale_granularity);
    if (weight == nullptr || weight_scale == nullptr || workspace == nullptr
        || workspace_bytes < (fp8Wg ? fp8WgBytes(w, m * top_k, k) : w.bytes)
        || !aligned(workspace, 16) || !aligned(weight, 16))
    {
        return cudaErrorInvalidValue;
    }
    uint8_t* ws = static_cast<uint8_t*>(workspace);
    const int rows = fp8Wg ? fp8WgTile(tier) - 8
        : act_format == kMETRALE_ACT_FP8 ? moeTileRows<W8A8Fp8Policy<true>>(tier)
                                         : moeTileRows<W8A8Bf16Policy>(tier);
    MoeRouting r{};
    e = moeRoute(topk_ids, x, x_dtype, m, top_k, num_experts, k, combine, w, workspace, rows, stream, &r);
    if (e != cudaSuccess)
    {
        return e;
    }
    const int64_t total = m * top_k;
    const int64_t kb = (k + kFP8_BLOCK - 1) / kFP8_BLOCK;
    W8A8Params p{};
    p.codes = reinterpret_cast<const uint8_t*>(weight);
    p.scale = weight_scale;
    p.bias = bias;
    p.blockScales = weight_scale_granularity == kMETRALE_WSCALE_BLOCK128 ? 1 : 0;
    p.kBlocks = static_cast<int>(kb);
    const int64_t scalePer = p.blockScales ? ((n + kFP8_BLOCK - 1) / kFP8_BLOCK) * kb : n;
    W8A8View view{{n * k, scalePer, 0, n}};
    if (act_format == kMETRALE_ACT_BF16)
    {
        const uint16_t* X = reinterpret_cast<const uint16_t*>(ws + w.xs);
        if (x_dtype != kMETRALE_BFLOAT16)
        {
            toBf16Kernel<<<elementwiseBlocks(static_cast<size_t>(total * k)), kACT_THREADS, 0, stream>>>(
                ws + w.xs, x_dtype, reinterpret_cast<__nv_bfloat16*>(ws + w.operand), static_cast<size_t>(total * k));
            X = reinterpret_cast<const uint16_t*>(ws + w.operand);
        }
        e = run<W8A8Bf16Policy>(p, view, r, tier, w.maxTiles, X, ws + w.ys, x_dtype, n, k, stream);
    }
    else if (fp8Wg)
    {
        // As the dense op: the per-row quantization over the gathered rows into the e4m3 operand, then
        // the FP8 wgmma tile per (n tile, schedule entry).
        p.nbx = 1;
        p.sx = reinterpret_cast<const float*>(ws + w.scales);
        uint8_t* xw = ws + w.bytes;
        const int tot = static_cast<int>(total);
        const int mg = (tot + 7) / 8;
        quantFp8WgKernel<<<8 * mg, kACT_THREADS, 0, stream>>>(ws + w.xs, x_dtype, xw,
            reinterpret_cast<float*>(ws + w.scales), tot, static_cast<int>(k), mg);
        e = cudaGetLastError();
        if (e == cudaSuccess)
        {
            using P = W8A8Fp8Policy<false>;
            const int ni = static_cast<int>(n);
            const int ki = static_cast<int>(k);
            const int tn = fp8WgTile(tier);
            e = tn == 16 ? launchMoeWgmmaFp8<P, 16>(p, view, r, w.maxTiles, xw, ws + w.ys, tot, ni, ki, x_dtype, stream)
                : tn == 32 ? launchMoeWgmmaFp8<P, 32>(p, view, r, w.maxTiles, xw, ws + w.ys, tot, ni, ki, x_dtype, stream)
                           : launchMoeWgmmaFp8<P, 128>(p, view, r, w.maxTiles, xw, ws + w.ys, tot, ni, ki, x_dtype, stream);
        }
    }
    else
    {
        p.nbx = static_cast<int>(scaleCols(k, act_format, act_scale_granularity));
        p.sx = reinterpret_cast<const float*>(ws + w.scales);
        quantFp8Kernel<<<static_cast<int>(total), kACT_THREADS, 0, stream>>>(ws + w.xs, x_dtype,
            reinterpret_cast<__half*>(ws + w.operand), reinterpret_cast<float*>(ws + w.scales), static_cast<int>(k),
            p.nbx);
        const uint16_t* X = reinterpret_cast<const uint16_t*>(ws + w.operand);
        e = p.blockScales == 0 && p.nbx == 1
            ? run<W8A8Fp8Policy<false>>(p, view, r, tier, w.maxTiles, X, ws + w.ys, x_dtype, n, k, stream)
            : run<W8A8Fp8Policy<true>>(p, view, r, tier, w.maxTiles, X, ws + w.ys, x_dtype, n, k, stream);
    }
    if (e != cudaSuccess)
    {
        return e;
    }
    return moeFinish(topk_ids, topk_weights, r, ws + w.ys, x_dtype, y, m, top_k, num_experts, n, combine, stream);
}
