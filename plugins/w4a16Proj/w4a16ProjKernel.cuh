/*
 * W4A16Proj (op version 2) weight policy for projGemm.cuh, projStream.cuh and projWgmma.cuh: int4
 * codes with bfloat16 group scales and optional zero points, dequantized in registers to the bf16
 * operand fragment.
 *
 * Invariants (docs/ops.md): wb[n, k] = bf16((code - z) * s), one rounding of the exact product.
 * Two elements at a time in bf16x2: LOP3 of the code nibbles into the bf16 values 128 + code (the
 * magic 0x4300: exponent 2^7, the nibble in the low mantissa bits; exact), an HFMA2 adding
 * -(128 + z) (an exact small integer), and an HFMA2 multiplying by the bf16 scale with -0 added
 * (the product rounded once, RNE, as bf16(float32((code - z) * s)) is: that product is exact in
 * float32). The contract's nibble order puts k and k + 1 in one byte; the fragment needs them in
 * the two halves of a register, so a PRMT pairs the byte with the same byte of the word shifted by
 * 4 first. A thread's 32 codes per block lie in one group (group size >= 32, groups start at
 * multiples of it; the last may be partial).
 */
#ifndef METRALE_W4A16_PROJ_KERNEL_CUH
#define METRALE_W4A16_PROJ_KERNEL_CUH

#include <cstdint>

#include "projGemm.cuh"
#include "projLaunch.cuh"

namespace metrale
{

/* (a & mask) | bits in one LOP3: the constants go in registers (ptxas keeps one immediate per LOP3). */
__device__ __forceinline__ uint32_t maskOr(uint32_t a, uint32_t mask, uint32_t bits)
{
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(mask), "r"(bits));
    return d;
}

/* Bytes of {a, b} picked by sel (PRMT). */
__device__ __forceinline__ uint32_t bytePerm(uint32_t a, uint32_t b, uint32_t sel)
{
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

/* a * b + c in bf16x2, one RNE rounding per half (HFMA2.BF16; sm_80 and later). */
__device__ __forceinline__ uint32_t fmaBf16x2(uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

struct W4A16Policy : NoTable, IdentityEpilogue
{
    static constexpr bool kF16 = false;
    static constexpr int kCB = 64;        // 128 codes per row per block
    static constexpr int kCODE_BITS = 4;
    static constexpr int kSCALE_WORDS = 3; // up to 4 bf16 scales from an even index: 3 words
    static constexpr int kMW = kSCALE_WORDS + 2;  // + 2 words covering the zero points
    static constexpr bool kPER_BLOCK = false;
    static constexpr bool kWG_SMEM_CODES = true;  // projWgmma.cuh: codes and meta through shared memory
    static constexpr bool kWG_DEEP = true;        // projWgmma.cuh: may run the deep mainloop (WgDeep)
    static constexpr uint32_t kMAGIC = 0x43004300u;     // bf16x2 (128, 128)
    static constexpr uint32_t kNIBBLES = 0x000F000Fu;
    static constexpr uint32_t kONE = 0x3F803F80u;       // bf16x2 (1, 1)
    static constexpr uint32_t kNEG_ZERO = 0x80008000u;  // bf16x2 (-0, -0)

    struct Params
    {
        const uint8_t* codes;     // [N, K/2]
        const uint16_t* scale;    // [N, G] bf16 bit patterns
        const uint8_t* zeroPoint; // [N, G] or null (8)
        const float* bias;        // [N] or null
        int groups;               // G = ceil(K / group_size): the last group may be partial
        int groupShift;           // log2(group_size)
        int perBlock;             // 128 / group_size
        int totalGroups;          // N * G (< 2^31, launcher check)
    };

    struct BlockState
    {
        uint32_t s2;   // bf16x2 (s, s)
        uint32_t nz2;  // bf16x2 (-(128 + z), -(128 + z))
    };

    __device__ static void metaSrc(const Params& p, int n, int kb, int w, const void*& src, int& bytes)
    {
        // The 4-byte words holding the block's perBlock scales (from the even index below the
        // first), and the zero-point words when there are zero points; only whole words inside the
        // tensors are copied (blockState reads a tail from global memory). 32-bit indices
        // (launcher check).
        const int first = n * p.groups + kb * p.perBlock;
        if (w < kSCALE_WORDS)
        {
            const int elem = (first & ~1) + 2 * w;
            if (2 * w <= p.perBlock && elem + 2 <= p.totalGroups)
            {
                src = p.scale + elem;
                bytes = 4;
            }
        }
        else if (p.zeroPoint != nullptr)
        {
            const int wordAddr = (first & ~3) + 4 * (w - kSCALE_WORDS);
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
        return w < kSCALE_WORDS ? 2 * w <= p.perBlock : p.zeroPoint != nullptr;
    }

    __device__ static BlockState makeState(uint32_t sBits, uint32_t z)
    {
        const uint32_t nz = 0xC300u | z;  // bf16 -(128 + z): exponent 2^7, z in the low mantissa bits
        return BlockState{sBits | (sBits << 16), nz | (nz << 16)};
    }

    __device__ static BlockState blockState(const Params& p, const uint32_t* mw, int t, int kb, int n)
    {
        const int gi = (32 * t) >> p.groupShift;  // the thread's group within the block
        const int first = n * p.groups + kb * p.perBlock;
        const int addr = first + gi;
        const uint32_t s = addr < (p.totalGroups & ~1) ? reinterpret_cast<const uint16_t*>(mw)[(first & 1) + gi]
            : addr < p.totalGroups                    ? p.scale[addr]
                                                      : 0u;
        uint32_t z = 8;
        if (p.zeroPoint != nullptr)
        {
            const int off = (first & 3) + gi;
            const uint8_t zb = addr < (p.totalGroups & ~3) ? reinterpret_cast<const uint8_t*>(mw + kSCALE_WORDS)[off]
                : addr < p.totalGroups                       ? p.zeroPoint[addr]
                                                             : 0;
            z = zb & 0xFu;
        }
        return makeState(s, z);
    }

    /* The streaming tiers' view of the same meta: the thread's group scale and zero point, read
     * from global memory (zero where blockState's staged copy is zero-filled). */
    struct StreamMeta
    {
        uint32_t s;
        uint32_t z;
    };
    __device__ static StreamMeta loadStreamMeta(const Params& p, int t, int kb, int n, bool nOk)
    {
        StreamMeta r{0u, p.zeroPoint != nullptr ? 0u : 8u};
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
                r.z = __ldg(p.zeroPoint + addr);  // masked at use (streamState): no wait here
            }
        }
        return r;
    }
    __device__ static BlockState streamState(const Params&, const StreamMeta& m)
    {
        return makeState(m.s, m.z & 0xFu);
    }

    /* The ring streaming tier's view (projStreamRing.cuh, K a multiple of 128, so every block's group
     * exists): the thread's scale and zero-point addresses in block kb0 of row n (a row inside the
     * tensor), stepped to the same slice's next block by ringNext; z8 holds the 8 of a missing zero
     * point. ringLoad reads what loadStreamMeta reads, ringState makes streamState's values (PRMT
     * instead of shifts: the same bits). */
    struct RingMeta
    {
        const uint16_t* s;
        const uint8_t* z;
    };
    struct RingStep
    {
        int s;
        int z;
    };
    __device__ static RingMeta ringMeta(const Params& p, int t, int n, int kb0, const uint8_t* z8)
    {
        const int addr = n * p.groups + kb0 * p.perBlock + ((32 * t) >> p.groupShift);
        return RingMeta{p.scale + addr, p.zeroPoint != nullptr ? p.zeroPoint + addr : z8};
    }
    __device__ static RingStep ringStep(const Params& p, int kbStep)
    {
        return RingStep{kbStep * p.perBlock, p.zeroPoint != nullptr ? kbStep * p.perBlock : 0};
    }
    __device__ static void ringNext(RingMeta& r, const RingStep& st)
    {
        r.s += st.s;
        r.z += st.z;
    }
    __device__ static StreamMeta ringLoad(const RingMeta& r)
    {
        return StreamMeta{__ldg(r.s), __ldg(r.z)};
    }
    __device__ static BlockState ringState(const StreamMeta& m)
    {
        // (s, s) and (0xC300 | z, 0xC300 | z): bytes picked by PRMT, the zero point's high nibble masked.
        const uint32_t s2 = bytePerm(m.s, 0u, 0x1010u);
        const uint32_t nz2 = bytePerm(m.z, 0xC3C3C3C3u, 0x4040u) & 0xFF0FFF0Fu;
        return BlockState{s2, nz2};
    }

    /* Step s of a block: elements k = 4s + j (j = 0..3) of the thread's 32, as (j = 0, 1) in b0 and
     * (j = 2, 3) in b1: nibbles 4(s & 1) + j of code word s / 2. */
    template <int kCW>
    __device__ static void dequant(const uint32_t (&codes)[kCW], const BlockState& b, int s, const uint8_t*, int,
        uint32_t& b0, uint32_t& b1)
    {
        const uint32_t w = codes[s >> 1];
        // Bytes (w.b, w.b + 1, (w >> 4).b, (w >> 4).b + 1) with b = 0 or 2: nibble 2j of the pair's
        // byte at bit 0, nibble 2j + 1 at bit 16, for the pair j = 0 and, 8 bits up, j = 1.
        const uint32_t x = bytePerm(w, w >> 4, (s & 1) ? 0x7632u : 0x5410u);
        const uint32_t lo = maskOr(x, kNIBBLES, kMAGIC);
        const uint32_t hi = maskOr(x >> 8, kNIBBLES, kMAGIC);
        b0 = fmaBf16x2(fmaBf16x2(lo, kONE, b.nz2), b.s2, kNEG_ZERO);
        b1 = fmaBf16x2(fmaBf16x2(hi, kONE, b.nz2), b.s2, kNEG_ZERO);
    }
};

/* The W4A16 checks of the dense and the grouped launcher (after their own shape and routing checks):
 * cudaSuccess, or why not. */
inline cudaError_t w4a16Supported(int64_t n, int64_t k, int64_t group_size)
{
    if (group_size != 32 && group_size != 64 && group_size != 128)
    {
        return cudaErrorNotSupported;
    }
    if (k % 2 != 0)
    {
        return cudaErrorInvalidValue;
    }
    if (k % contract::kW4A16_KERNEL_K_MULTIPLE != 0)
    {
        return cudaErrorNotSupported;  // 16-byte weight rows for the copies (plugins/KERNELS.md, Limits)
    }
    const int64_t groups = (k + group_size - 1) / group_size;  // a partial last group (op version 2)
    if (n * groups > kMAX_DIM || n * (k / 2) > kMAX_DIM)
    {
        return cudaErrorNotSupported;  // 32-bit indexing of the weight and its scales
    }
    return cudaSuccess;
}

/* W4A16Policy::Params, as the dense and the grouped launcher take them (host). */
inline W4A16Policy::Params w4a16Params(const int8_t* weight, const void* weight_scale, const int8_t* zero_point,
    const float* bias, int64_t n, int64_t k, int64_t group_size)
{
    W4A16Policy::Params p{};
    p.codes = reinterpret_cast<const uint8_t*>(weight);
    p.scale = static_cast<const uint16_t*>(weight_scale);  // bf16 (op version 2)
    p.zeroPoint = reinterpret_cast<const uint8_t*>(zero_point);
    p.bias = bias;
    p.groups = static_cast<int>((k + group_size - 1) / group_size);
    p.groupShift = group_size == 32 ? 5 : group_size == 64 ? 6 : 7;
    p.perBlock = static_cast<int>(128 / group_size);
    p.totalGroups = static_cast<int>(n * p.groups);
    return p;
}

} // namespace metrale

#endif // METRALE_W4A16_PROJ_KERNEL_CUH
