/*
 * FloatProj weight policy for projGemm.cuh / projStream.cuh / projWgmma.cuh: bfloat16 weights that
 * go to the mma as they are (W4A16's bf16 arithmetic without the dequantization).
 *
 * Invariants (docs/ops.md, "FloatProj"):
 * - y[m, n] = round_T(sum_k bf16(x[m, k]) * w[n, k] (+ bias[n])): exact products, float32
 *   accumulation in the projection tiers' one order (plugins/KERNELS.md: 128-k blocks in
 *   projSlices slices, quad lane t feeds k = 128 b + 32 t + 4 s + j in step s), so a row's bits do
 *   not depend on m, as for every projection.
 * - A thread's 32 k of a row and block are 64 contiguous bytes: code word 2s holds k = 4s, 4s+1 and
 *   word 2s+1 holds 4s+2, 4s+3 of its 32, which are the mma's B fragment registers b0 and b1.
 */
#ifndef METRALE_FLOAT_PROJ_KERNEL_CUH
#define METRALE_FLOAT_PROJ_KERNEL_CUH

#include <cstdint>

#include "metrale/kernels.h"
#include "projGemm.cuh"

namespace metrale
{

struct FloatProjParams
{
    const uint8_t* codes; // [N, K] bf16 bit patterns
    const float* bias;    // [N] or null
};

struct FloatProjPolicy : NoTable, IdentityEpilogue
{
    static constexpr bool kF16 = false;
    static constexpr int kCB = 256; // 128 bf16 per row per block
    static constexpr int kCODE_BITS = 16;
    static constexpr int kMW = 0;
    static constexpr bool kPER_BLOCK = false;
    static constexpr bool kWG_SMEM_CODES = true; // projWgmma.cuh: the weight tile through shared memory
    using Params = FloatProjParams;
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
        b0 = codes[2 * s];
        b1 = codes[2 * s + 1];
    }
};

inline FloatProjParams floatProjParams(const void* weight, const float* bias)
{
    FloatProjParams p{};
    p.codes = static_cast<const uint8_t*>(weight);
    p.bias = bias;
    return p;
}

} // namespace metrale

#endif // METRALE_FLOAT_PROJ_KERNEL_CUH
