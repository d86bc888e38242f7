/*
 * W4A16Proj weight policy for projGemm.cuh: int4 codes with float32 group scales and optional zero
 * points, dequantized in registers to the bf16 B fragment.
 *
 * Invariants (docs/ops.md): wb[n, k] = bf16((code - z) * s) with the product rounded once to
 * float32, then once to bf16. The magic-number decode builds (code - z) * 2^(4p) exactly in float32
 * and multiplies by s * 2^(-4p) (exact power-of-two scaling), so the one float32 rounding is that of
 * (code - z) * s. A thread's 32 codes per block lie in one group (group size >= 32).
 */
#ifndef METRALE_W4A16_PROJ_KERNEL_CUH
#define METRALE_W4A16_PROJ_KERNEL_CUH

#include <cstdint>

#include "projGemm.cuh"

namespace metrale
{

/* (a & mask) | bits in one LOP3: the constants go in registers (ptxas keeps one immediate per LOP3). */
__device__ __forceinline__ uint32_t maskOr(uint32_t a, uint32_t mask, uint32_t bits)
{
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(mask), "r"(bits));
    return d;
}

struct W4A16Policy : NoTable
{
    static constexpr bool kF16 = false;
    static constexpr int kCB = 64;        // 128 codes per row per block
    static constexpr int kCODE_BITS = 4;
    static constexpr int kMW = 6;         // up to 4 scales + 2 words covering the zero points
    static constexpr bool kPER_BLOCK = false;

    struct Params
    {
        const uint8_t* codes;     // [N, K/2]
        const float* scale;       // [N, G]
        const uint8_t* zeroPoint; // [N, G] or null (8)
        const float* bias;        // [N] or null
        int groups;               // G = ceil(K / group_size): the last group may be partial
        int groupShift;           // log2(group_size)
        int perBlock;             // 128 / group_size
        int totalGroups;          // N * G (< 2^31, launcher check)
    };

    struct BlockState
    {
        float s[4];   // s * 2^(-4p)
        float off[4]; // 2^23 + z * 2^(4p)
    };

    __device__ static void metaSrc(const Params& p, int n, int kb, int w, const void*& src, int& bytes)
    {
        // Only the words a block needs are copied: perBlock scales, and the zero-point words when
        // there are zero points. Indices fit in 32 bits (launcher check).
        const int first = n * p.groups + kb * p.perBlock;
        if (w < 4)
        {
            if (w < p.perBlock && kb * p.perBlock + w < p.groups)
            {
                src = p.scale + first + w;
                bytes = 4;
            }
        }
        else if (p.zeroPoint != nullptr)
        {
            const int wordAddr = (first & ~3) + 4 * (w - 4);
            if (wordAddr + 4 <= p.totalGroups)
            {
                src = p.zeroPoint + wordAddr;
                bytes = 4;
            }
        }
    }

    /* Whether meta word w is copied at all (uniform per launch): skips dead copies. */
    __device__ static bool metaUsed(const Params& p, int w)
    {
        return w < 4 ? w < p.perBlock : p.zeroPoint != nullptr;
    }

    /* The exact power-of-two rescaling of the magic-number decode, from the group's s and z. */
    __device__ static BlockState makeState(float s, float z)
    {
        BlockState b;
#pragma unroll
        for (int q = 0; q < 4; ++q)
        {
            const float pw = static_cast<float>(1 << (4 * q));
            b.s[q] = __fmul_rn(s, 1.0f / static_cast<float>(1 << (4 * q)));  // exact: a power of two
            b.off[q] = __fadd_rn(8388608.0f, __fmul_rn(z, pw));
        }
        return b;
    }

    __device__ static BlockState blockState(const Params& p, const uint32_t* mw, int t, int kb, int n)
    {
        const int gi = (32 * t) >> p.groupShift;  // the thread's group within the block
        const float s = __uint_as_float(mw[gi]);
        float z = 8.0f;
        if (p.zeroPoint != nullptr)
        {
            const int first = n * p.groups + kb * p.perBlock;
            const int off = (first & 3) + gi;
            const int addr = first + gi;
            const uint8_t zb = addr < (p.totalGroups & ~3) ? reinterpret_cast<const uint8_t*>(mw + 4)[off]
                : addr < p.totalGroups                       ? p.zeroPoint[addr]
                                                             : 0;
            z = static_cast<float>(zb & 0xF);
        }
        return makeState(s, z);
    }

    /* The streaming tier's view of the same meta: the thread's group scale and zero point, read
     * from global memory (zero where blockState's staged copy is zero-filled). */
    struct StreamMeta
    {
        float s;
        uint32_t z;
    };
    __device__ static StreamMeta loadStreamMeta(const Params& p, int t, int kb, int n, bool nOk)
    {
        StreamMeta r{0.0f, p.zeroPoint != nullptr ? 0u : 8u};
        const int gcol = kb * p.perBlock + ((32 * t) >> p.groupShift);
        if (nOk)
        {
            const int addr = n * p.groups + gcol;
            if (gcol < p.groups)
            {
                r.s = __ldg(p.scale + addr);
            }
            if (p.zeroPoint != nullptr && addr < p.totalGroups)
            {
                r.z = __ldg(p.zeroPoint + addr) & 0xFu;
            }
        }
        return r;
    }
    __device__ static BlockState streamState(const Params&, const StreamMeta& m)
    {
        return makeState(m.s, static_cast<float>(m.z));
    }

    template <int kCW>
    __device__ static void dequant(const uint32_t (&codes)[kCW], const BlockState& b, int s, const uint8_t*, int,
        uint32_t& b0, uint32_t& b1)
    {
        const uint32_t w = codes[s >> 1];
        const uint32_t h = (s & 1) ? (w >> 16) : w;
        float v[4];
#pragma unroll
        for (int q = 0; q < 4; ++q)
        {
            const float f = __uint_as_float(maskOr(h, 0xFu << (4 * q), 0x4B000000u));
            v[q] = __fmul_rn(__fsub_rn(f, b.off[q]), b.s[q]);
        }
        b0 = packBf16x2(v[0], v[1]);
        b1 = packBf16x2(v[2], v[3]);
    }

    __device__ static float finish(const Params&, float acc, int, int)
    {
        return acc;
    }
    __device__ static float blockRowScale(const Params&, int, int)
    {
        return 1.0f;
    }
    __device__ static float blockColScale(const Params&, int, int)
    {
        return 1.0f;
    }
};

} // namespace metrale

#endif // METRALE_W4A16_PROJ_KERNEL_CUH
