/*
 * W8A8Proj weight policies for projGemm.cuh: FP8 e4m3 codes with per-channel or 128x128 block
 * scales.
 *
 * Invariants (docs/ops.md):
 * - bf16 activations: wb[n, k] = bf16(fp8(code) * s), the product rounded once to float32.
 * - fp8 activations: the mma multiplies e4m3 values exactly (both operands as f16, fp32
 *   accumulate). row x channel scales once per element at the end, (acc * sx[m]) * sw[n]; every other
 *   combination accumulates acc += (partial_b * sx[m, b]) * sw[n, b] per 128-k block b.
 */
#ifndef METRALE_W8A8_PROJ_KERNEL_CUH
#define METRALE_W8A8_PROJ_KERNEL_CUH

#include <cstdint>

#include "metrale/kernels.h"
#include "projGemm.cuh"

namespace metrale
{

struct W8A8Params
{
    const uint8_t* codes;  // [N, K] e4m3 bits
    const float* scale;    // [N] or [ceil(N/128), ceil(K/128)]
    const float* bias;     // [N] or null
    const float* sx;       // fp8 activations: [M, nbx] activation scales (workspace)
    int blockScales;       // 1: weight scales per 128x128 block
    int kBlocks;           // ceil(K/128)
    int nbx;               // columns of sx: 1 (row) or kBlocks (row_block128)
};

__device__ __forceinline__ float w8a8WeightScale(const W8A8Params& p, int n, int kb)
{
    return p.blockScales ? p.scale[static_cast<long long>(n >> 7) * p.kBlocks + kb] : p.scale[n];
}

/* bf16 activations (W8A16): dequantize to bf16 in registers. */
struct W8A8Bf16Policy : NoTable, IdentityEpilogue
{
    static constexpr bool kF16 = false;
    static constexpr int kCB = 128;
    static constexpr int kCODE_BITS = 8;
    static constexpr int kMW = 1;  // the weight scale of (row, block)
    static constexpr bool kPER_BLOCK = false;
    using Params = W8A8Params;
    struct BlockState
    {
        float s;
    };

    __device__ static void metaSrc(const Params& p, int n, int kb, int, const void*& src, int& bytes)
    {
        src = p.blockScales ? p.scale + static_cast<long long>(n >> 7) * p.kBlocks + kb : p.scale + n;
        bytes = 4;
    }
    __device__ static bool metaUsed(const Params&, int)
    {
        return true;
    }
    __device__ static BlockState blockState(const Params&, const uint32_t* mw, int, int, int)
    {
        return BlockState{__uint_as_float(mw[0])};
    }
    struct StreamMeta
    {
        float s;
    };
    __device__ static StreamMeta loadStreamMeta(const Params& p, int, int kb, int n, bool nOk)
    {
        return StreamMeta{nOk ? __ldg(p.blockScales ? p.scale + static_cast<long long>(n >> 7) * p.kBlocks + kb : p.scale + n)
                              : 0.0f};
    }
    __device__ static BlockState streamState(const Params&, const StreamMeta& m)
    {
        return BlockState{m.s};
    }
    template <int kCW>
    __device__ static void dequant(const uint32_t (&codes)[kCW], const BlockState& b, int s, const uint8_t*, int,
        uint32_t& b0, uint32_t& b1)
    {
        const uint32_t w = codes[s];
        const uint32_t h01 = e4m3x2ToHalf2(w);
        const uint32_t h23 = e4m3x2ToHalf2(w >> 16);
        const float f0 = __half2float(__ushort_as_half(static_cast<unsigned short>(h01 & 0xFFFFu)));
        const float f1 = __half2float(__ushort_as_half(static_cast<unsigned short>(h01 >> 16)));
        const float f2 = __half2float(__ushort_as_half(static_cast<unsigned short>(h23 & 0xFFFFu)));
        const float f3 = __half2float(__ushort_as_half(static_cast<unsigned short>(h23 >> 16)));
        b0 = packBf16x2(__fmul_rn(f0, b.s), __fmul_rn(f1, b.s));
        b1 = packBf16x2(__fmul_rn(f2, b.s), __fmul_rn(f3, b.s));
    }
};

/* fp8 activations, the weight codes go to the mma as exact f16. */
template <bool kPerBlock>
struct W8A8Fp8Policy : NoTable
{
    static constexpr bool kF16 = true;
    static constexpr int kCB = 128;
    static constexpr int kCODE_BITS = 8;
    static constexpr int kMW = 0;
    static constexpr bool kPER_BLOCK = kPerBlock;
    using Params = W8A8Params;
    struct BlockState
    {
    };

    __device__ static void metaSrc(const Params&, int, int, int, const void*&, int&) {}
    __device__ static bool metaUsed(const Params&, int)
    {
        return false;
    }
    __device__ static BlockState blockState(const Params&, const uint32_t*, int, int, int)
    {
        return BlockState{};
    }
    struct StreamMeta
    {
    };
    __device__ static StreamMeta loadStreamMeta(const Params&, int, int, int, bool)
    {
        return StreamMeta{};
    }
    __device__ static BlockState streamState(const Params&, const StreamMeta&)
    {
        return BlockState{};
    }
    template <int kCW>
    __device__ static void dequant(const uint32_t (&codes)[kCW], const BlockState&, int s, const uint8_t*, int,
        uint32_t& b0, uint32_t& b1)
    {
        const uint32_t w = codes[s];
        b0 = e4m3x2ToHalf2(w);
        b1 = e4m3x2ToHalf2(w >> 16);
    }
    /* row x channel: (acc * sx[m]) * sw[n]; per-block combinations are already scaled. */
    __device__ static float finish(const Params& p, float acc, int m, int n)
    {
        if constexpr (kPerBlock)
        {
            return acc;
        }
        else
        {
            return __fmul_rn(__fmul_rn(acc, p.sx[m]), p.scale[n]);
        }
    }
    __device__ static float blockRowScale(const Params& p, int m, int kb)
    {
        return p.sx[static_cast<long long>(m) * p.nbx + (p.nbx == 1 ? 0 : kb)];
    }
    __device__ static float blockColScale(const Params& p, int n, int kb)
    {
        return w8a8WeightScale(p, n, kb);
    }
};

/* The weight side of W8A8Params, as the dense and the grouped launcher take it (host; sx and nbx
 * are the fp8 pre-pass's). */
inline W8A8Params w8a8Params(const int8_t* weight, const float* weight_scale, int32_t weight_scale_granularity,
    const float* bias, int64_t k)
{
    W8A8Params p{};
    p.codes = reinterpret_cast<const uint8_t*>(weight);
    p.scale = weight_scale;
    p.bias = bias;
    p.blockScales = weight_scale_granularity == kMETRALE_WSCALE_BLOCK128 ? 1 : 0;
    p.kBlocks = static_cast<int>((k + kFP8_BLOCK - 1) / kFP8_BLOCK);
    return p;
}

} // namespace metrale

#endif // METRALE_W8A8_PROJ_KERNEL_CUH
