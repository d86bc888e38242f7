/*
 * RMSNorm (docs/ops.md, "RMSNorm"): s = x (+ residual), y = the normed s scaled by the weight (or by
 * 1 + weight), optionally times silu(gate).
 *
 * Invariants (the row-invariance argument):
 * - A row is reduced by one group of kTPR threads (a warp for K <= kWARP_ROW_MAX_K, else a CTA of
 *   256), chosen from K alone; the groups never share data, so a row's bits do not depend on m or
 *   on the rows beside it.
 * - The order of the sum of squares is fixed by K and the dtype: the row is cut into 16-byte chunks
 *   of V elements (V = 8 for 16-bit x, 4 for float32); thread t of the group adds, from +0, the
 *   squares of chunk t, t + kTPR, t + 2 kTPR, ... in ascending order, each chunk's elements in
 *   ascending order; the kTPR partials are summed by an xor butterfly over the lane offsets 16, 8,
 *   4, 2, 1 and then, for a CTA, over the 8 warp sums with offsets 4, 2, 1 (every lane ends with
 *   the same value: each step adds the same two numbers on both sides).
 * - Every rounding is explicit (__fadd_rn, __fmul_rn, __fdiv_rn, __fsqrt_rn; -fmad=false):
 *   r = 1 / sqrt(ss / K + epsilon), two correctly rounded steps; silu(z) = z / (1 + expf(-z)).
 */
#ifndef METRALE_RMS_NORM_KERNEL_CUH
#define METRALE_RMS_NORM_KERNEL_CUH

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "metrale/kernels.h"
#include "metraleNumerics.cuh"

namespace metrale
{

constexpr int kNORM_THREADS = metrale::contract::kRMSNORM_BLOCK; // threads a CTA (generated)
constexpr int kWARP_ROW_MAX_K = 1024;     // K up to this: one warp a row, 8 rows a CTA
constexpr int kNORM_MAX_CHUNKS = 16;      // 16-byte chunks a thread holds: K <= 16 * V * kTPR

struct RmsNormArgs
{
    const void* x;
    const void* weight;
    const void* residual; // or null
    const void* gate;     // or null
    void* y;
    void* residualOut;    // s = x + residual (or x), where not null
    int64_t m;
    int k;
    float epsilon;
    int weightOffset;
};

/* The elements a thread loads at once (16 bytes). */
template <typename T>
struct NormIo
{
    static constexpr int kV = 16 / sizeof(T);
};

/* The sum over the kTPR threads of a row group, in the xor-butterfly order of the header. */
template <int kTPR>
__device__ __forceinline__ float groupSum(float v, float* smem)
{
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1)
    {
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    }
    if constexpr (kTPR == 32)
    {
        return v;
    }
    else
    {
        const int warp = threadIdx.x >> 5;
        const int lane = threadIdx.x & 31;
        if (lane == 0)
        {
            smem[warp] = v;
        }
        __syncthreads();
        float w = smem[lane & 7];
#pragma unroll
        for (int o = 4; o >= 1; o >>= 1)
        {
            w = __fadd_rn(w, __shfl_xor_sync(0xffffffffu, w, o));
        }
        return w;
    }
}

/* One row group per row: kTPR threads (32: a warp, 8 rows a CTA; 256: the CTA), kC chunks each. */
template <typename T, int kTPR, int kC>
__global__ void __launch_bounds__(kNORM_THREADS) rmsNormKernel(RmsNormArgs a)
{
    using Io = NormIo<T>;
    constexpr int kV = Io::kV;
    __shared__ float smem[8];
    const int lane = threadIdx.x % kTPR;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * (kNORM_THREADS / kTPR) + threadIdx.x / kTPR;
    // A warp-a-row CTA may have rows past m; they compute nothing but still take part in no barrier
    // (kTPR == 32 has none).
    if (kTPR == 32 && row >= a.m)
    {
        return;
    }
    const int chunks = a.k / kV;
    const size_t base = static_cast<size_t>(row) * a.k;
    const T* x = static_cast<const T*>(a.x) + base;
    const T* res = a.residual ? static_cast<const T*>(a.residual) + base : nullptr;
    uint4 held[kC];
    float ss = 0.0f;
#pragma unroll
    for (int c = 0; c < kC; ++c)
    {
        const int chunk = lane + c * kTPR;
        if (chunk < chunks)
        {
            uint4 v = *reinterpret_cast<const uint4*>(x + chunk * kV);
            if (res != nullptr)
            {
                const uint4 r = *reinterpret_cast<const uint4*>(res + chunk * kV);
                T* vs = reinterpret_cast<T*>(&v);
                const T* rs = reinterpret_cast<const T*>(&r);
#pragma unroll
                for (int j = 0; j < kV; ++j)
                {
                    vs[j] = elementStore<T>(__fadd_rn(elementToFloat(vs[j]), elementToFloat(rs[j])));
                }
            }
            if (a.residualOut != nullptr)
            {
                // s: x + residual, or x itself (the torch op's second output without a residual).
                *reinterpret_cast<uint4*>(static_cast<T*>(a.residualOut) + base + chunk * kV) = v;
            }
            held[c] = v;
            const T* vs = reinterpret_cast<const T*>(&held[c]);
#pragma unroll
            for (int j = 0; j < kV; ++j)
            {
                const float h = elementToFloat(vs[j]);
                ss = __fadd_rn(ss, __fmul_rn(h, h));
            }
        }
    }
    ss = groupSum<kTPR>(ss, smem);
    const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, static_cast<float>(a.k)), a.epsilon)));
    const T* w = static_cast<const T*>(a.weight);
    const T* g = a.gate ? static_cast<const T*>(a.gate) + base : nullptr;
    T* y = static_cast<T*>(a.y) + base;
#pragma unroll
    for (int c = 0; c < kC; ++c)
    {
        const int chunk = lane + c * kTPR;
        if (chunk < chunks)
        {
            const uint4 wv = *reinterpret_cast<const uint4*>(w + chunk * kV);
            uint4 gv{};
            if (g != nullptr)
            {
                gv = *reinterpret_cast<const uint4*>(g + chunk * kV);
            }
            const T* vs = reinterpret_cast<const T*>(&held[c]);
            const T* ws = reinterpret_cast<const T*>(&wv);
            const T* gs = reinterpret_cast<const T*>(&gv);
            uint4 out;
            T* os = reinterpret_cast<T*>(&out);
#pragma unroll
            for (int j = 0; j < kV; ++j)
            {
                const float t = __fmul_rn(elementToFloat(vs[j]), r);
                const float wf = elementToFloat(ws[j]);
                float u = a.weightOffset ? elementToFloat(elementStore<T>(__fmul_rn(t, __fadd_rn(1.0f, wf))))
                                         : elementToFloat(elementStore<T>(__fmul_rn(elementToFloat(elementStore<T>(t)), wf)));
                if (g != nullptr)
                {
                    const float z = elementToFloat(gs[j]);
                    u = __fmul_rn(u, __fdiv_rn(z, __fadd_rn(1.0f, expf(-z))));
                }
                os[j] = elementStore<T>(u);
            }
            *reinterpret_cast<uint4*>(y + chunk * kV) = out;
        }
    }
}

} // namespace metrale

#endif // METRALE_RMS_NORM_KERNEL_CUH
