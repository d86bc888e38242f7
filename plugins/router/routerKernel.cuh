/*
 * Router (docs/ops.md, "Router"): per row, softmax over the experts in float32, the top-k by
 * descending probability with ties to the lower expert id, optionally renormalized.
 *
 * Invariants (the row-invariance argument):
 * - One warp a row (kROUTER_ROWS rows a CTA, no data shared between them), so a row's bits do not
 *   depend on m or on the rows beside it.
 * - The max is exact in any order. The sum of e_i = expf(l_i - max) is fixed: lane l adds, from +0,
 *   e_i for i = l, l + 32, l + 64, ... ascending; the 32 partials are summed by an xor butterfly
 *   over the lane offsets 16, 8, 4, 2, 1. p_i = e_i / sum (__fdiv_rn).
 * - Each of the top_k rounds takes the largest p not taken yet, the lower id among equals: a total
 *   order, so the choice is unique whatever order the lanes compare in.
 * - normalize: the chosen p are summed in the order chosen, from +0, and each divided by it.
 */
#ifndef METRALE_ROUTER_KERNEL_CUH
#define METRALE_ROUTER_KERNEL_CUH

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "metrale/kernels.h"
#include "metraleNumerics.cuh"

namespace metrale
{

constexpr int kROUTER_ROWS = 4;        // warps (rows) a CTA
constexpr int kROUTER_MAX_EXPERTS = 1024;
constexpr int kROUTER_MAX_TOP_K = 32;

/* (p, id) beats (q, jd): larger p, or equal p and the lower id. */
__device__ __forceinline__ bool routerBetter(float p, int id, float q, int jd)
{
    return p > q || (p == q && id < jd);
}

template <typename T>
__global__ void __launch_bounds__(kROUTER_ROWS * 32) routerKernel(
    const T* logits, int32_t* ids, T* weights, int64_t m, int e, int topK, int normalize)
{
    extern __shared__ float probs[]; // [kROUTER_ROWS][e]
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * kROUTER_ROWS + warp;
    if (row >= m)
    {
        return;
    }
    const T* l = logits + static_cast<size_t>(row) * e;
    float* p = probs + warp * e;
    float mx = -INFINITY;
    for (int i = lane; i < e; i += 32)
    {
        const float v = elementLoad(l, i);
        p[i] = v;
        mx = fmaxf(mx, v);
    }
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1)
    {
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    }
    float sum = 0.0f;
    for (int i = lane; i < e; i += 32)
    {
        const float ex = expf(__fadd_rn(p[i], -mx));
        p[i] = ex;
        sum = __fadd_rn(sum, ex);
    }
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1)
    {
        sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, o));
    }
    for (int i = lane; i < e; i += 32)
    {
        p[i] = __fdiv_rn(p[i], sum);
    }
    __syncwarp();
    float chosen = 0.0f; // lane j < topK keeps the j-th choice
    int chosenId = 0;
    for (int j = 0; j < topK; ++j)
    {
        float best = -1.0f;
        int bestId = 0x7fffffff;
        for (int i = lane; i < e; i += 32)
        {
            if (routerBetter(p[i], i, best, bestId))
            {
                best = p[i];
                bestId = i;
            }
        }
#pragma unroll
        for (int o = 16; o >= 1; o >>= 1)
        {
            const float q = __shfl_xor_sync(0xffffffffu, best, o);
            const int qd = __shfl_xor_sync(0xffffffffu, bestId, o);
            if (routerBetter(q, qd, best, bestId))
            {
                best = q;
                bestId = qd;
            }
        }
        if (lane == j)
        {
            chosen = best;
            chosenId = bestId;
        }
        __syncwarp();
        if (lane == (bestId & 31))
        {
            p[bestId] = -2.0f; // taken: below every probability and the -1 start
        }
        __syncwarp();
    }
    if (normalize)
    {
        float total = 0.0f;
        for (int j = 0; j < topK; ++j)
        {
            total = __fadd_rn(total, __shfl_sync(0xffffffffu, chosen, j));
        }
        chosen = __fdiv_rn(chosen, total);
    }
    if (lane < topK)
    {
        ids[static_cast<size_t>(row) * topK + lane] = chosenId;
        weights[static_cast<size_t>(row) * topK + lane] = elementStore<T>(chosen);
    }
}

} // namespace metrale

#endif // METRALE_ROUTER_KERNEL_CUH
