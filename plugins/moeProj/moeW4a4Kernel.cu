/*
 * metrale_w4a4_moe_proj: the C launcher of W4A4MoEProj (include/metrale/kernels.h): the grouped
 * steps of moeProjKernel.cuh around the dense W4A4Proj's policies (bf16 activations, or the NVFP4
 * emulation with per-row dynamic global scales or each expert's static input_scale).
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

/* The NVFP4 pre-pass with a static input_scale per expert ([E]): each operand row takes its own
 * expert's scale. Slot path (ids given): operand row = slot, x row = slot / rowDiv, the expert from
 * topk_ids (a skipped slot is left alone); sorted path: the gathered rows below offsets[E], the
 * expert from the routing. */
template <bool kPDL>
__global__ void __launch_bounds__(kACT_THREADS) moeQuantNvfp4StaticKernel(const void* __restrict__ x,
    int32_t dtype, const float* __restrict__ inputScales, const int32_t* __restrict__ ids, int topK, int E, int rowDiv,
    const MoeRouting r, __half* __restrict__ xf, float* __restrict__ ga, int K)
{
    if (!moePdlEnter<kPDL>())  // kPDL: a kernel of a PDL launch sequence (moeProjKernel.cuh)
    {
        return;
    }
    const int row = blockIdx.x;
    int e = -1;
    int src = row;
    if (ids != nullptr)
    {
        e = moeSlotExpert(ids, row, topK, E);
        src = row / rowDiv;
    }
    else if (row < r.offsets[E])
    {
        e = r.rowExpert[row];
    }
    if (e < 0)
    {
        return;
    }
    quantNvfp4Row(x, dtype, inputScales + e, xf, ga, K, src, row);
}

/* quantNvfp4Kernel (actQuant.cuh), a kernel of a PDL launch sequence (moeProjKernel.cuh, moePdlEnter). */
__global__ void __launch_bounds__(kACT_THREADS) moeQuantNvfp4PdlKernel(const void* __restrict__ x, int32_t dtype,
    const float* __restrict__ inputScale, __half* __restrict__ xf, float* __restrict__ ga, int K)
{
    if (!moePdlEnter<true>())
    {
        return;
    }
    quantNvfp4Row(x, dtype, inputScale, xf, ga, K, blockIdx.x, blockIdx.x);
}

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
        || (n * (k / kNVFP4_BLOCK)) % 4 != 0)
    {
        return cudaErrorNotSupported;
    }
    if (m == 0)
    {
        return cudaSuccess;
    }
    const MoeWorkspace w = layout(m, top_k, num_experts, n, k, x_dtype, act_format);
    if (weight == nullptr || weight_scale == nullptr || weight_global_scale == nullptr || workspace == nullptr
        || workspace_bytes < w.bytes || !aligned(workspace, 16) || !aligned(weight, 16) || !aligned(weight_scale, 4))
    {
        return cudaErrorInvalidValue;
    }
    uint8_t* ws = static_cast<uint8_t*>(workspace);
    const MoeTier tier = act_format == kMETRALE_ACT_BF16 ? moeTierFor<W4A4Bf16Policy, W4A4View>(m, top_k, num_experts)
                                                         : moeTierFor<W4A4Nvfp4Policy, W4A4View>(m, top_k, num_experts);
    MoeRun run{};
    e = moeBegin(x, x_dtype, topk_ids, topk_weights, y, m, top_k, num_experts, n, k, combine, w, workspace,
        moeTileRows<W4A4Nvfp4Policy>(tier), stream, &run, false, static_cast<int>(tier));
    const bool wg = !run.slots && moeWgmmaTier(run.tier);
    if (e != cudaSuccess)
    {
        return e;
    }
    W4A4Params p = w4a4Params(weight, weight_scale, weight_global_scale, bias, n, k);
    W4A4View view{{n * (k / 2), n * (k / kNVFP4_BLOCK), 0, n}};
    if (act_format == kMETRALE_ACT_BF16)
    {
        // input_scale: unused in bf16
        return moeProject<W4A4Bf16Policy>(p, view, run, wg ? moeWgOperand(run) : moeBf16Operand(run));
    }
    p.ga = reinterpret_cast<const float*>(ws + w.scales);
    __half* xf = reinterpret_cast<__half*>(ws + w.operand);
    float* ga = reinterpret_cast<float*>(ws + w.scales);
    if (input_scale == nullptr)
    {
        e = moeLaunchIn(run.pdl, quantNvfp4Kernel, moeQuantNvfp4PdlKernel, actRowGrid(run.rows, k),
            dim3(kACT_THREADS), 0, stream, run.src, x_dtype, nullptr, xf, ga, static_cast<int>(k));
    }
    else
    {
        // A static scale per expert: each operand row is quantized with its own expert's scale, so the
        // slot path makes one operand row per slot.
        run.perSlotOperand = run.slots && !combine;
        const int rows = static_cast<int>(run.slots ? m * top_k : run.rows);
        const bool bySlot = run.slots;
        e = moeLaunchIn(run.pdl, moeQuantNvfp4StaticKernel<false>, moeQuantNvfp4StaticKernel<true>,
            actRowGrid(rows, k), dim3(kACT_THREADS), 0, stream, run.src, x_dtype, input_scale,
            bySlot ? topk_ids : nullptr, static_cast<int>(top_k), static_cast<int>(num_experts),
            combine ? 1 : static_cast<int>(top_k), run.r, xf, ga, static_cast<int>(k));
    }
    if (e != cudaSuccess)
    {
        return e;
    }
    const uint16_t* X = reinterpret_cast<const uint16_t*>(ws + w.operand);
    return moeProject<W4A4Nvfp4Policy>(p, view, run, wg ? moeWgOperandRaw(run, X) : X);
}
