/*
 * Activation pre-passes of the projections (docs/ops.md, "Activation formats"): each writes the
 * 16-bit A operand of projGemm.cuh (and its per-row scales) into the launcher's workspace.
 *
 * Invariants:
 * - Every quantity of row m is computed from row m of x alone (one CTA per row), so the pre-pass
 *   keeps row invariance.
 * - The arithmetic is the contract's, with explicit roundings: sx = amax / 448 (correctly rounded,
 *   1 where amax == 0) or the static input_scale; xq = e4m3(x / sx), saturating to +-448;
 *   ga = amax / 2688 or input_scale; sa = e4m3(bmax / (6*ga));
 *   eff = float(sa) * ga; xq = e2m1(x / eff) (0 where eff == 0).
 * - The A operand holds exact values: fp8 values as f16 (every e4m3 value is an f16), nvfp4 factors
 *   e2m1 * e4m3 as f16 (at most 6 significant bits, in [2^-10, 2688]).
 */
#ifndef METRALE_ACT_QUANT_CUH
#define METRALE_ACT_QUANT_CUH

#include <cstdint>
#include <cuda_runtime.h>

#include "metraleNumerics.cuh"

namespace metrale
{

constexpr int kACT_THREADS = 256;

__device__ __forceinline__ float warpMax(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
    {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    }
    return v;
}

/* max over the CTA (kACT_THREADS threads); every thread gets the result. */
__device__ __forceinline__ float blockMax(float v)
{
    __shared__ float red[kACT_THREADS / 32];
    v = warpMax(v);
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0)
    {
        red[warp] = v;
    }
    __syncthreads();
    float r = red[0];
#pragma unroll
    for (int i = 1; i < kACT_THREADS / 32; ++i)
    {
        r = fmaxf(r, red[i]);
    }
    __syncthreads();
    return r;
}

/* bf16(x) for any x dtype, [total] elements. */
static __global__ void toBf16Kernel(const void* __restrict__ x, int32_t dtype, __nv_bfloat16* __restrict__ out, size_t total)
{
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
    {
        out[i] = __float2bfloat16_rn(loadXBf16(x, dtype, i));
    }
}

/* FP8 per-row (nbx == 1) or per-(row, 128) (nbx == ceil(K/128)) dynamic quantization.
 * xq: f16 [M, K] (exact e4m3 values); sx: float [M, nbx]. One CTA per row: row m, by the whole CTA
 * (quantFp8Kernel; the grouped-expert PDL kernel, moeW8a8Kernel.cu). */
__device__ __forceinline__ void quantFp8Row(const void* __restrict__ x, int32_t dtype, __half* __restrict__ xq,
    float* __restrict__ sx, int K, int nbx, int m)
{
    const size_t base = static_cast<size_t>(m) * K;
    if (nbx == 1)
    {
        float amax = 0.0f;
#pragma unroll 8  // independent loads in flight: the row is read with one latency, not K/256
        for (int k = threadIdx.x; k < K; k += kACT_THREADS)
        {
            amax = fmaxf(amax, fabsf(loadXBf16(x, dtype, base + k)));
        }
        amax = blockMax(amax);
        const float s = amax > 0.0f ? __fdiv_rn(amax, kE4M3_MAX) : 1.0f;
        if (threadIdx.x == 0)
        {
            sx[m] = s;
        }
#pragma unroll 8  // independent loads in flight: the row is read with one latency, not K/256
        for (int k = threadIdx.x; k < K; k += kACT_THREADS)
        {
            const uint8_t q = e4m3Encode(__fdiv_rn(loadXBf16(x, dtype, base + k), s));
            xq[base + k] = __half(__nv_cvt_fp8_to_halfraw(q, __NV_E4M3));
        }
        return;
    }
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    for (int b = warp; b < nbx; b += kACT_THREADS / 32)
    {
        float v[4];
        float amax = 0.0f;
#pragma unroll
        for (int e = 0; e < 4; ++e)
        {
            const int k = b * kFP8_BLOCK + 32 * e + lane;
            v[e] = k < K ? loadXBf16(x, dtype, base + k) : 0.0f;
            amax = fmaxf(amax, fabsf(v[e]));
        }
        amax = warpMax(amax);
        const float s = amax > 0.0f ? __fdiv_rn(amax, kE4M3_MAX) : 1.0f;
        if (lane == 0)
        {
            sx[static_cast<size_t>(m) * nbx + b] = s;
        }
#pragma unroll
        for (int e = 0; e < 4; ++e)
        {
            const int k = b * kFP8_BLOCK + 32 * e + lane;
            if (k < K)
            {
                const uint8_t q = e4m3Encode(__fdiv_rn(v[e], s));
                xq[base + k] = __half(__nv_cvt_fp8_to_halfraw(q, __NV_E4M3));
            }
        }
    }
}

static __global__ void __launch_bounds__(kACT_THREADS) quantFp8Kernel(const void* __restrict__ x, int32_t dtype,
    __half* __restrict__ xq, float* __restrict__ sx, int K, int nbx)
{
    quantFp8Row(x, dtype, xq, sx, K, nbx, blockIdx.x);
}

/* FP8 quantization with the static scale (activation_scale_granularity tensor): no amax pass,
 * one elementwise pass over all [total = M*K] elements, xq = e4m3(bf16(x) / *inputScale) saturating
 * (exact f16); the scale is copied to sx[0..M) so the GEMM reads per-row scales as for `row`. */
static __global__ void __launch_bounds__(kACT_THREADS) quantFp8StaticKernel(const void* __restrict__ x,
    int32_t dtype, const float* __restrict__ inputScale, __half* __restrict__ xq, float* __restrict__ sx,
    size_t total, int M)
{
    const float s = __ldg(inputScale);
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
    {
        if (i < static_cast<size_t>(M))
        {
            sx[i] = s;
        }
        const uint8_t q = e4m3Encode(__fdiv_rn(loadXBf16(x, dtype, i), s));
        xq[i] = __half(__nv_cvt_fp8_to_halfraw(q, __NV_E4M3));
    }
}

/* NVFP4 dynamic quantization (K a multiple of 16). xf: f16 [M, K] of the exact factors
 * e2m1(xq) * float(sa); ga: float [M]. input_scale (device, [1]) or NULL for the per-row scale. */
/* One row of it, by the whole CTA: row `src` of x into row `dst` of xf and ga (the grouped-expert
 * kernels gather rows and pick each row's expert's input_scale; the dense kernel passes m, m). */
__device__ __forceinline__ void quantNvfp4Row(const void* __restrict__ x, int32_t dtype,
    const float* __restrict__ inputScale, __half* __restrict__ xf, float* __restrict__ ga, int K, int src, int dst)
{
    const size_t base = static_cast<size_t>(src) * K;
    const size_t out = static_cast<size_t>(dst) * K;
    float gScale;
    if (inputScale != nullptr)
    {
        gScale = *inputScale;
    }
    else
    {
        float amax = 0.0f;
#pragma unroll 8  // independent loads in flight: the row is read with one latency, not K/256
        for (int k = threadIdx.x; k < K; k += kACT_THREADS)
        {
            amax = fmaxf(amax, fabsf(loadXBf16(x, dtype, base + k)));
        }
        amax = blockMax(amax);
        gScale = amax > 0.0f ? __fdiv_rn(amax, kNVFP4_GLOBAL_DIV) : 1.0f;
    }
    if (threadIdx.x == 0)
    {
        ga[dst] = gScale;
    }
    const float sixG = __fmul_rn(kE2M1_MAX, gScale);
    for (int blk = threadIdx.x; blk < K / kNVFP4_BLOCK; blk += kACT_THREADS)
    {
        float v[kNVFP4_BLOCK];
        float bmax = 0.0f;
#pragma unroll
        for (int e = 0; e < kNVFP4_BLOCK; ++e)
        {
            v[e] = loadXBf16(x, dtype, base + blk * kNVFP4_BLOCK + e);
            bmax = fmaxf(bmax, fabsf(v[e]));
        }
        const uint8_t sa = e4m3Encode(__fdiv_rn(bmax, sixG));
        const float saf = e4m3Decode(sa);
        const float eff = __fmul_rn(saf, gScale);
        uint32_t packed[kNVFP4_BLOCK / 2];
#pragma unroll
        for (int e = 0; e < kNVFP4_BLOCK; e += 2)
        {
            float f[2];
#pragma unroll
            for (int u = 0; u < 2; ++u)
            {
                const uint32_t code = eff == 0.0f ? 0u : e2m1Encode(__fdiv_rn(v[e + u], eff));
                f[u] = __fmul_rn(e2m1Decode(code), saf);  // exact
            }
            packed[e / 2] = packHalf2(f[0], f[1]);  // exact
        }
        uint4* to = reinterpret_cast<uint4*>(xf + out + blk * kNVFP4_BLOCK);
        to[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
        to[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
    }
}

static __global__ void __launch_bounds__(kACT_THREADS) quantNvfp4Kernel(const void* __restrict__ x, int32_t dtype,
    const float* __restrict__ inputScale, __half* __restrict__ xf, float* __restrict__ ga, int K)
{
    quantNvfp4Row(x, dtype, inputScale, xf, ga, K, blockIdx.x, blockIdx.x);
}

/* Grid for an elementwise pass over `total` elements. */
inline unsigned elementwiseBlocks(size_t total)
{
    const size_t b = (total + kACT_THREADS - 1) / kACT_THREADS;
    return static_cast<unsigned>(b < 65535u * 8u ? b : 65535u * 8u);
}

} // namespace metrale

#endif // METRALE_ACT_QUANT_CUH
