/*
 * metrale_w8a8_moe_proj: the C launcher of W8A8MoEProj (include/metrale/kernels.h): the grouped
 * steps of moeProjKernel.cuh around the dense W8A8Proj's policies (bf16 or fp8 activations; the fp8
 * pre-pass runs over the gathered rows, each row's scales from the row alone).
 * METRALE_MOE_FP8=1 (read at each call; a measurement variant, not version 2's arithmetic): fp8
 * activations (row or row_block128 scales, channel or block128 weight scales) on the FP8 wgmma kernel
 * (moeFp8Kernel.cuh), per expert bitwise W8A8Proj version 3's dense kernel, the sorted path at every m.
 */
#include "metrale/kernels.h"
#include "moeFp8Kernel.cuh"
#include "moeProjKernel.cuh"
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

/* quantFp8Kernel (actQuant.cuh), a kernel of a PDL launch sequence (moeProjKernel.cuh, moePdlEnter). */
__global__ void __launch_bounds__(kACT_THREADS) moeQuantFp8PdlKernel(const void* __restrict__ x, int32_t dtype,
    __half* __restrict__ xq, float* __restrict__ sx, int K, int nbx)
{
    if (!moePdlEnter<true>())
    {
        return;
    }
    quantFp8Row(x, dtype, xq, sx, K, nbx, blockIdx.x);
}

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
    // The schedule's capacity for the FP8 tier's smallest token tile (8) too: the workspace does not
    // depend on METRALE_MOE_FP8.
    return moeWorkspace(m, top_k, E, n, k, x_dtype, scaleCols(k, act_format, asg), rows, 8);
}

/* Whether this call runs the FP8 wgmma tier (METRALE_MOE_FP8=1, fp8 activations, sm_90a code; block128
 * weights up to kFP8_SW_MAX blocks of K, as the dense kernel's wgFp8BlocksServe). */
bool fp8TierSelected(int32_t act_format, int32_t wsg, int64_t k)
{
    const char* env = std::getenv("METRALE_MOE_FP8");
    return env != nullptr && std::strcmp(env, "1") == 0 && act_format == kMETRALE_ACT_FP8
        && wgFp8BlocksServe(wsg == kMETRALE_WSCALE_BLOCK128, k) && wgFp8Available<W8A8Fp8Policy<false>>();
}

} // namespace

extern "C" size_t metrale_w8a8_moe_workspace_size(int64_t m, int64_t top_k, int64_t num_experts, int64_t n,
    int64_t k, int32_t x_dtype, int32_t act_format, int32_t act_scale_granularity)
{
    return m <= 0 ? 0 : layout(m, top_k, num_experts, n, k, x_dtype, act_format, act_scale_granularity).bytes;
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
    const bool fp8 = fp8TierSelected(act_format, weight_scale_granularity, k);
    const MoeTier tier = fp8 ? MoeTier::kWgmmaFp8 : selectMoeTier(m);
    const MoeWorkspace w = layout(m, top_k, num_experts, n, k, x_dtype, act_format, act_scale_granularity);
    if (weight == nullptr || weight_scale == nullptr || workspace == nullptr || workspace_bytes < w.bytes
        || !aligned(workspace, 16) || !aligned(weight, 16))
    {
        return cudaErrorInvalidValue;
    }
    uint8_t* ws = static_cast<uint8_t*>(workspace);
    const int rows = fp8 ? moeFp8TokenTile(m, top_k, num_experts)
        : act_format == kMETRALE_ACT_FP8 ? moeTileRows<W8A8Fp8Policy<true>>(tier) : moeTileRows<W8A8Bf16Policy>(tier);
    MoeRun run{};
    e = moeBegin(x, x_dtype, topk_ids, topk_weights, y, m, top_k, num_experts, n, k, combine, w, workspace, rows,
        stream, &run, false, static_cast<int>(tier));
    if (e != cudaSuccess)
    {
        return e;
    }
    W8A8Params p = w8a8Params(weight, weight_scale, weight_scale_granularity, bias, k);
    const int64_t scalePer = p.blockScales ? ((n + kFP8_BLOCK - 1) / kFP8_BLOCK) * p.kBlocks : n;
    W8A8View view{{n * k, scalePer, 0, n}};
    if (act_format == kMETRALE_ACT_BF16)
    {
        return moeProject<W8A8Bf16Policy>(p, view, run, moeBf16Operand(run));
    }
    p.nbx = static_cast<int>(scaleCols(k, act_format, act_scale_granularity));
    p.sx = reinterpret_cast<const float*>(ws + w.scales);
    if (fp8)
    {
        // The dense fused pre-pass over the gathered rows (each row's e4m3 bytes and scales: the dense
        // op's), into the operand area in the FP8 kernel's layout (row_block128: the scales block-major,
        // sxT), then the kernel, the scatter / combine.
        uint8_t* xw = ws + w.operand;
        float* sx = reinterpret_cast<float*>(ws + w.scales);
        e = p.nbx > 1 ? wgFp8QuantBlock(run.src, x_dtype, run.rows, k, xw, sx, stream)
                      : wgFp8Quant(run.src, x_dtype, nullptr, run.rows, k, xw, sx, stream);
        if (e == cudaSuccess)
        {
            e = moeGemmWgmmaFp8<W8A8Fp8Policy<false>>(p, view, run, xw, p.nbx > 1 ? sx : nullptr, rows);
        }
        if (e != cudaSuccess)
        {
            return e;
        }
        return moeFinish(run.ids, run.topkWeights, run.r, ws + w.ys, x_dtype, y, m, top_k, num_experts, n, combine,
            stream, run.variant, run.pdl);
    }
    e = moeLaunchIn(run.pdl, quantFp8Kernel, moeQuantFp8PdlKernel, actRowGrid(run.rows, k), dim3(kACT_THREADS), 0,
        stream, run.src, x_dtype, reinterpret_cast<__half*>(ws + w.operand), reinterpret_cast<float*>(ws + w.scales),
        static_cast<int>(k), p.nbx);
    if (e != cudaSuccess)
    {
        return e;
    }
    const uint16_t* X = reinterpret_cast<const uint16_t*>(ws + w.operand);
    return p.blockScales == 0 && p.nbx == 1 ? moeProject<W8A8Fp8Policy<false>>(p, view, run, X)
                                            : moeProject<W8A8Fp8Policy<true>>(p, view, run, X);
}
