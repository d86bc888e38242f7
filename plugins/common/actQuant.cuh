/*
 * Activation pre-passes of the projections (docs/ops.md, "Activation formats"): each writes the
 * 16-bit A operand of projGemm.cuh (and its per-row scales) into the launcher's workspace.
 *
 * Invariants:
 * - Every quantity of row m is computed from row m of x alone, so the pre-pass keeps row
 *   invariance. A row is one CTA's (blockIdx.x) at many rows, or split over gridDim.y CTAs at few
 *   (actRowChunks): chunk blockIdx.y does only its range of the row's blocks, with the row's amax
 *   computed whole in each chunk CTA, so the bits do not depend on the split (the amax is a max,
 *   order-free; each element's arithmetic is the same code).
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
#include <cstdlib>
#include <cuda_runtime.h>

#include "metraleNumerics.cuh"

namespace metrale
{

constexpr int kACT_THREADS = 256;

/*
 * The row split of the pre-passes at few rows (a speed choice: the bits are the same at every split).
 * One CTA per row leaves all but M SMs idle at decode (M = 1..16), and the per-element work
 * (__fdiv_rn, the e4m3 / e2m1 encodings) of a K = 12288 row then takes 3 units of 16 elements a
 * thread on one SM. Chunks of at least kACT_CHUNK_MIN elements: a CTA then has at most 64 of those
 * units (one a thread, 2 warps), and a thread never less than one, so smaller chunks would shorten
 * no thread's work and only add CTAs that each read the whole row for its amax; at most
 * kACT_TARGET_CTAS CTAs of real rows (two per SM of the H200's 132) in all.
 *
 * Why each chunk CTA reads the whole row for the amax instead of sharing it through a cluster's
 * distributed shared memory: the row is small (24 KB at K = 12288 in bf16) and L2-resident after
 * the first read, the read is one round of 16-byte loads (rowAmax: 6 a thread at K = 12288, all in
 * flight), and the re-read is bounded by kACT_TARGET_CTAS rows from L2 in all; a cluster would need
 * the cluster launch attribute (sm_90 code only, so a second form for the sm_80 code and beside the
 * PDL attribute of moeLaunch), a cluster barrier, and at most 8 (portable) CTAs a row.
 */
constexpr int kACT_TARGET_CTAS = 264;
constexpr int kACT_CHUNK_MIN = 1024;

/* gridDim.y of a pre-pass over `rows` rows of k elements: ceil(k / kACT_CHUNK_MIN) chunks, at most
 * kACT_TARGET_CTAS / rows (so 1 from 264 rows up), at least 1 and at most k / 16 (a chunk holds a
 * 16-element unit at least). METRALE_ACT_CHUNKS (a positive integer, read at each call, i.e. at
 * CUDA-graph capture) sets the chunks instead, within the same bounds, for the benchmarks and the
 * bitwise tests (1: the one-CTA-a-row grid). */
inline unsigned actRowChunks(int64_t rows, int64_t k)
{
    const int64_t most = k / 16 < 1 ? 1 : k / 16 > 65535 ? 65535 : k / 16;
    const char* env = std::getenv("METRALE_ACT_CHUNKS");
    const long long forced = env != nullptr ? std::atoll(env) : 0;
    int64_t c;
    if (forced > 0)
    {
        c = forced;
    }
    else
    {
        const int64_t byWork = (k + kACT_CHUNK_MIN - 1) / kACT_CHUNK_MIN;
        const int64_t byRows = kACT_TARGET_CTAS / (rows > 0 ? rows : 1);
        c = byWork < byRows ? byWork : byRows;
    }
    return static_cast<unsigned>(c < 1 ? 1 : c > most ? most : c);
}

/* The grid of a pre-pass over `rows` rows of k elements: a row a CTA along x, its chunks along y. */
inline dim3 actRowGrid(int64_t rows, int64_t k)
{
    return dim3(static_cast<unsigned>(rows), actRowChunks(rows, k));
}

/* This CTA's chunk [*begin, *end) of a row's `units` work units, chunk blockIdx.y of gridDim.y,
 * the boundaries multiples of `granule` units (the last chunk ends at `units`; a chunk past the
 * end is empty). gridDim.y == 1: [0, units). */
__device__ __forceinline__ void actChunk(int units, int granule, int* begin, int* end)
{
    const int groups = (units + granule - 1) / granule;
    const int per = (groups + static_cast<int>(gridDim.y) - 1) / static_cast<int>(gridDim.y) * granule;
    const int b = static_cast<int>(blockIdx.y) * per;
    *begin = b < units ? b : units;
    *end = b + per < units ? b + per : units;
}

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

/* max |x| over one 16-byte vector w of kPER elements of dtype kDTYPE, each as loadXBf16 gives it. */
template <int32_t kDTYPE, int kPER>
__device__ __forceinline__ float vecAmax(const uint4 w, float amax)
{
#pragma unroll
    for (int e = 0; e < kPER; ++e)
    {
        amax = fmaxf(amax, fabsf(loadXBf16(&w, kDTYPE, e)));
    }
    return amax;
}

/* max |bf16(x)| over elements [base, base + K) of x, by the whole CTA, every thread getting it
 * (blockMax): 16-byte loads where the row is 16-byte aligned and whole vectors, else element by
 * element; each element as loadXBf16 gives it, and a max's order changes nothing, so the value is
 * the element-by-element loop's. */
__device__ __forceinline__ float rowAmax(const void* __restrict__ x, int32_t dtype, size_t base, int K)
{
    const int per = dtype == kMETRALE_FLOAT32 ? 4 : 8;
    const size_t bytes = dtype == kMETRALE_FLOAT32 ? 4 : 2;
    const uint8_t* row = static_cast<const uint8_t*>(x) + base * bytes;
    float amax = 0.0f;
    if (K % per == 0 && (reinterpret_cast<uintptr_t>(row) & 15u) == 0)
    {
        const uint4* v = reinterpret_cast<const uint4*>(row);
        const int n = K / per;
        if (dtype == kMETRALE_BFLOAT16)
        {
#pragma unroll 8  // independent loads in flight: the row is read with one latency
            for (int i = threadIdx.x; i < n; i += kACT_THREADS)
            {
                amax = vecAmax<kMETRALE_BFLOAT16, 8>(v[i], amax);
            }
        }
        else if (dtype == kMETRALE_FLOAT16)
        {
#pragma unroll 8
            for (int i = threadIdx.x; i < n; i += kACT_THREADS)
            {
                amax = vecAmax<kMETRALE_FLOAT16, 8>(v[i], amax);
            }
        }
        else
        {
#pragma unroll 8
            for (int i = threadIdx.x; i < n; i += kACT_THREADS)
            {
                amax = vecAmax<kMETRALE_FLOAT32, 4>(v[i], amax);
            }
        }
    }
    else
    {
#pragma unroll 8  // independent loads in flight: the row is read with one latency, not K/256
        for (int k = threadIdx.x; k < K; k += kACT_THREADS)
        {
            amax = fmaxf(amax, fabsf(loadXBf16(x, dtype, base + k)));
        }
    }
    return blockMax(amax);
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
 * xq: f16 [M, K] (exact e4m3 values); sx: float [M, nbx]. Row m, by the whole CTA, or its chunk
 * blockIdx.y of gridDim.y (actChunk: elements for nbx == 1, each chunk CTA computing the row's amax
 * whole and chunk 0 writing sx; 128-blocks otherwise, which need no row amax) (quantFp8Kernel; the
 * grouped-expert PDL kernel, moeW8a8Kernel.cu). */
__device__ __forceinline__ void quantFp8Row(const void* __restrict__ x, int32_t dtype, __half* __restrict__ xq,
    float* __restrict__ sx, int K, int nbx, int m)
{
    const size_t base = static_cast<size_t>(m) * K;
    if (nbx == 1)
    {
        int k0, k1;
        actChunk(K, 32, &k0, &k1);  // whole warps' 64-byte reads
        if (k0 == k1 && blockIdx.y != 0)
        {
            return;
        }
        const float amax = rowAmax(x, dtype, base, K);
        const float s = amax > 0.0f ? __fdiv_rn(amax, kE4M3_MAX) : 1.0f;
        if (threadIdx.x == 0 && blockIdx.y == 0)
        {
            sx[m] = s;
        }
#pragma unroll 8  // independent loads in flight: the chunk is read with one latency, not its size/256
        for (int k = k0 + threadIdx.x; k < k1; k += kACT_THREADS)
        {
            const uint8_t q = e4m3Encode(__fdiv_rn(loadXBf16(x, dtype, base + k), s));
            xq[base + k] = __half(__nv_cvt_fp8_to_halfraw(q, __NV_E4M3));
        }
        return;
    }
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    int b0, b1;
    actChunk(nbx, 1, &b0, &b1);
    for (int b = b0 + warp; b < b1; b += kACT_THREADS / 32)
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
/* One row of it, by the whole CTA, or its chunk blockIdx.y of gridDim.y (actChunk over the row's
 * 16-element blocks; each chunk CTA computes the row's amax whole, chunk 0 writes ga): row `src` of
 * x into row `dst` of xf and ga (the grouped-expert kernels gather rows and pick each row's expert's
 * input_scale; the dense kernel passes m, m). */
__device__ __forceinline__ void quantNvfp4Row(const void* __restrict__ x, int32_t dtype,
    const float* __restrict__ inputScale, __half* __restrict__ xf, float* __restrict__ ga, int K, int src, int dst)
{
    const size_t base = static_cast<size_t>(src) * K;
    const size_t out = static_cast<size_t>(dst) * K;
    int blk0, blk1;
    actChunk(K / kNVFP4_BLOCK, 1, &blk0, &blk1);
    if (blk0 == blk1 && blockIdx.y != 0)
    {
        return;
    }
    float gScale;
    if (inputScale != nullptr)
    {
        gScale = *inputScale;
    }
    else
    {
        const float amax = rowAmax(x, dtype, base, K);
        gScale = amax > 0.0f ? __fdiv_rn(amax, kNVFP4_GLOBAL_DIV) : 1.0f;
    }
    if (threadIdx.x == 0 && blockIdx.y == 0)
    {
        ga[dst] = gScale;
    }
    const float sixG = __fmul_rn(kE2M1_MAX, gScale);
    for (int blk = blk0 + threadIdx.x; blk < blk1; blk += kACT_THREADS)
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
