/*
 * W4A4Proj weight policies for projGemm.cuh: NVFP4 weights (e2m1 codes, e4m3 scales per 16 k, a
 * float32 global scale).
 *
 * Invariants (docs/ops.md):
 * - nvfp4 activations, the NVFP4 emulation on Hopper (no FP4 tensor cores): both mma operands are the
 *   exact factors e2m1 * e4m3 as f16 (at most 6 significant bits, within f16's normal range), so each
 *   product is exact in float32; the accumulator is multiplied once by (ga[m] * gw) at the end.
 * - bf16 activations: wb[n, k] = bf16((e2m1 * s16) * gw), the first product exact, one float32
 *   rounding, then one bf16 rounding.
 * - e2m1 pairs are decoded through a lane-replicated table in shared memory (E2m1Table), which
 *   reads 32 distinct banks for any codes.
 */
#ifndef METRALE_W4A4_PROJ_KERNEL_CUH
#define METRALE_W4A4_PROJ_KERNEL_CUH

#include <cstdint>

#include "projGemm.cuh"

namespace metrale
{

struct W4A4Params
{
    const uint8_t* codes;        // [N, K/2] e2m1 codes
    const uint8_t* scale;        // [N, K/16] e4m3 bits
    const float* globalScale;    // [1] (device)
    const float* bias;           // [N] or null
    const float* ga;             // nvfp4: [M] activation global scales (workspace)
    int scaleCols;               // K / 16
    long long totalScaleBytes;   // N * K / 16
};

/* Both policies read the same meta: three words covering the row's eight scale bytes of a block. */
struct W4A4Meta
{
    static constexpr int kMW = 3;
    __device__ static void metaSrc(const W4A4Params& p, int n, int kb, int w, const void*& src, int& bytes)
    {
        const long long first = static_cast<long long>(n) * p.scaleCols + 8ll * kb;
        const long long wordAddr = (first & ~3ll) + 4 * w;
        if (wordAddr + 4 <= p.totalScaleBytes)  // whole words; a partial last word: scaleHalf
        {
            src = p.scale + wordAddr;
            bytes = 4;
        }
    }
    __device__ static bool metaUsed(const W4A4Params&, int)
    {
        return true;
    }
    /* The e4m3 scale of 16-block e (0, 1) of quad lane t, as f16 bits; 0 past the end of the row. */
    __device__ static uint16_t scaleHalf(const W4A4Params& p, const uint32_t* mw, int t, int kb, int n, int e)
    {
        const long long first = static_cast<long long>(n) * p.scaleCols + 8ll * kb;
        const int col = 8 * kb + 2 * t + e;
        if (col >= p.scaleCols)
        {
            return 0;
        }
        const long long addr = first + 2 * t + e;
        const uint8_t b = addr < (p.totalScaleBytes & ~3ll)
            ? reinterpret_cast<const uint8_t*>(mw)[static_cast<int>(first & 3) + 2 * t + e]
            : addr < p.totalScaleBytes ? p.scale[addr] : 0;
        return __half_raw(__nv_cvt_fp8_to_halfraw(b, __NV_E4M3)).x;
    }

    /* The streaming tier's view: the two e4m3 scale bytes of quad lane t (16-blocks 0 and 1), read
     * from global memory; 0 past the end of the row, as scaleHalf. Each byte is loaded into a
     * register of its own and combined only at use (streamScaleHalf): nothing waits for the loads
     * issued ahead (a shift and OR right after them would). */
    struct StreamMeta
    {
        uint32_t b[2];
    };
    __device__ static StreamMeta loadStreamMeta(const W4A4Params& p, int t, int kb, int n, bool nOk)
    {
        StreamMeta r{{0u, 0u}};
        if (nOk)
        {
#pragma unroll
            for (int e = 0; e < 2; ++e)
            {
                const int col = 8 * kb + 2 * t + e;
                const long long addr = static_cast<long long>(n) * p.scaleCols + col;
                if (col < p.scaleCols && addr < p.totalScaleBytes)
                {
                    r.b[e] = __ldg(p.scale + addr);
                }
            }
        }
        return r;
    }
    __device__ static uint16_t streamScaleHalf(const StreamMeta& m, int e)
    {
        return __half_raw(__nv_cvt_fp8_to_halfraw(static_cast<uint8_t>(m.b[e]), __NV_E4M3)).x;
    }
};

struct W4A4Nvfp4Policy : E2m1Table, W4A4Meta, IdentityEpilogue
{
    static constexpr bool kF16 = true;
    static constexpr int kCB = 64;
    static constexpr int kCODE_BITS = 4;
    static constexpr bool kPER_BLOCK = false;
    using Params = W4A4Params;
    struct BlockState
    {
        uint32_t s2[2];  // f16x2 (s, s) of the two 16-blocks
    };

    __device__ static BlockState blockState(const Params& p, const uint32_t* mw, int t, int kb, int n)
    {
        BlockState b;
#pragma unroll
        for (int e = 0; e < 2; ++e)
        {
            const uint32_t h = scaleHalf(p, mw, t, kb, n, e);
            b.s2[e] = h | (h << 16);
        }
        return b;
    }
    __device__ static BlockState streamState(const Params&, const StreamMeta& m)
    {
        BlockState b;
#pragma unroll
        for (int e = 0; e < 2; ++e)
        {
            const uint32_t h = streamScaleHalf(m, e);
            b.s2[e] = h | (h << 16);
        }
        return b;
    }
    template <int kCW>
    __device__ static void dequant(const uint32_t (&codes)[kCW], const BlockState& b, int s, const uint8_t* table,
        int lane, uint32_t& b0, uint32_t& b1)
    {
        const uint32_t w = codes[s >> 1];
        const uint32_t t0 = lookup(table, w, 2 * (s & 1), lane);
        const uint32_t t1 = lookup(table, w, 2 * (s & 1) + 1, lane);
        const uint32_t sc = b.s2[s >> 2];
        const __half2 r0 = __hmul2(*reinterpret_cast<const __half2*>(&t0), *reinterpret_cast<const __half2*>(&sc));
        const __half2 r1 = __hmul2(*reinterpret_cast<const __half2*>(&t1), *reinterpret_cast<const __half2*>(&sc));
        b0 = *reinterpret_cast<const uint32_t*>(&r0);
        b1 = *reinterpret_cast<const uint32_t*>(&r1);
    }
    __device__ static float finish(const Params& p, float acc, int m, int)
    {
        return __fmul_rn(acc, __fmul_rn(p.ga[m], *p.globalScale));
    }
};

struct W4A4Bf16Policy : E2m1Table, W4A4Meta, IdentityEpilogue
{
    static constexpr bool kF16 = false;
    static constexpr int kCB = 64;
    static constexpr int kCODE_BITS = 4;
    static constexpr bool kPER_BLOCK = false;
    using Params = W4A4Params;
    struct BlockState
    {
        float s[2];
        float gw;
    };

    __device__ static BlockState blockState(const Params& p, const uint32_t* mw, int t, int kb, int n)
    {
        BlockState b;
#pragma unroll
        for (int e = 0; e < 2; ++e)
        {
            b.s[e] = __half2float(__ushort_as_half(scaleHalf(p, mw, t, kb, n, e)));
        }
        b.gw = *p.globalScale;
        return b;
    }
    __device__ static BlockState streamState(const Params& p, const StreamMeta& m)
    {
        BlockState b;
#pragma unroll
        for (int e = 0; e < 2; ++e)
        {
            b.s[e] = __half2float(__ushort_as_half(streamScaleHalf(m, e)));
        }
        b.gw = *p.globalScale;
        return b;
    }
    template <int kCW>
    __device__ static void dequant(const uint32_t (&codes)[kCW], const BlockState& b, int s, const uint8_t* table,
        int lane, uint32_t& b0, uint32_t& b1)
    {
        const uint32_t w = codes[s >> 1];
        const float sc = b.s[s >> 2];
        uint32_t out[2];
#pragma unroll
        for (int u = 0; u < 2; ++u)
        {
            const uint32_t tv = lookup(table, w, 2 * (s & 1) + u, lane);
            const float lo = __half2float(__ushort_as_half(static_cast<unsigned short>(tv & 0xFFFFu)));
            const float hi = __half2float(__ushort_as_half(static_cast<unsigned short>(tv >> 16)));
            out[u] = packBf16x2(__fmul_rn(__fmul_rn(lo, sc), b.gw), __fmul_rn(__fmul_rn(hi, sc), b.gw));
        }
        b0 = out[0];
        b1 = out[1];
    }
};

/* The weight side of W4A4Params, as the dense and the grouped launcher take it (host; ga is the
 * nvfp4 pre-pass's). */
inline W4A4Params w4a4Params(const int8_t* weight, const int8_t* weight_scale, const float* weight_global_scale,
    const float* bias, int64_t n, int64_t k)
{
    W4A4Params p{};
    p.codes = reinterpret_cast<const uint8_t*>(weight);
    p.scale = reinterpret_cast<const uint8_t*>(weight_scale);
    p.globalScale = weight_global_scale;
    p.bias = bias;
    p.scaleCols = static_cast<int>(k / kNVFP4_BLOCK);
    p.totalScaleBytes = n * (k / kNVFP4_BLOCK);
    return p;
}

} // namespace metrale

#endif // METRALE_W4A4_PROJ_KERNEL_CUH
