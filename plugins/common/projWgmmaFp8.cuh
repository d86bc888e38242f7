/*
 * The FP8 wgmma tier of W8A8Proj (fp8 activations, per-row activation x per-channel weight scales):
 * every m, sm_90a. Swap-AB as projWgmma.cuh: the e4m3 weight codes are wgmma's A operand straight
 * from registers (no conversion at all), the e4m3 activations its B operand in shared memory (one
 * bulk copy per stage, mbarriers, a producer warpgroup), the tokens its N (8 to 128, from m).
 *
 * Invariants (row invariance; docs/ops.md, the fp8 format):
 * - One FP8 instruction and one promotion interval at every m: each 128-k block is four chained
 *   `wgmma m64nNk32 e4m3` (the first from zero), and its float32 result (the tensor core's partial
 *   sum, whose short accumulator is not float32) is promoted once into a float32 register,
 *   `cur = cur + partial` (DeepGEMM's promotion). The slices of projSlices(n, k) are walked as in
 *   every tier (each from +0 over its blocks in ascending order, summed from the left), then
 *   (acc * sx[m]) * sw[n]. FP8 mma.sync (f16 HMMA) and FP8 wgmma never share bits, so this tier
 *   serves every m, 1 included, on a device that has it (elsewhere the f16 mma.sync tiers serve
 *   every m: other bits, the same on that device for every m).
 * - wgmma bits do not depend on the instruction's N (measured on the H200, /work/shared/tools), so
 *   the token tile may change with m; the k order never does.
 * - The k order: in instruction q (0..3) of block b, position 16 h + 4 t + i (quad lane t's register
 *   a_{2h} for row g, a_{2h+1} for row g + 8) holds k = 128 b + 32 t + 8 q + 4 h + i, so that a
 *   thread's codes of a row and block are 32 contiguous bytes (two 16-byte loads) and the
 *   activations are laid out to match (wgFp8OperandOffset, written by the quantization pre-pass
 *   itself: one pass, no f16 copy). Per (block b, group of 8 rows): 8 chunks c = 2 q + h of 8 rows x
 *   16 bytes (one wgmma core matrix), 1024 contiguous bytes; a token tile of a block is kN / 8
 *   consecutive ones: one copy. Values past K and rows past M are +0.
 */
#ifndef METRALE_PROJ_WGMMA_FP8_CUH
#define METRALE_PROJ_WGMMA_FP8_CUH

#include <cstdint>
#include <cuda_runtime.h>

#include "actQuant.cuh"
#include "metraleNumerics.cuh"
#include "projGemm.cuh"
#include "projTiers.h"
#include "projWgmma.cuh"

namespace metrale
{

/* Byte offset of xq[m, k] in the FP8 wgmma operand of a launch whose rows form mg groups of 8. */
__host__ __device__ __forceinline__ size_t wgFp8OperandOffset(int m, int k, int mg)
{
    const int b = k >> 7;
    const int w = (k & 127) >> 2;  // 8 t + 2 q + h
    return (((static_cast<size_t>(b) * mg + (m >> 3)) * 8 + (w & 7)) * 8 + (m & 7)) * 16 + 4 * (w >> 3) + (k & 3);
}

/* Bytes of the FP8 wgmma operand of [m, k]: every 128-k block and every row group of 8 complete. */
inline size_t wgFp8OperandBytes(int64_t m, int64_t k)
{
    const size_t mg = static_cast<size_t>((m + 7) / 8);
    const size_t nkb = static_cast<size_t>((k + 127) / 128);
    return (nkb * mg * 1024 + 255) / 256 * 256;
}

/*
 * FP8 per-row quantization (docs/ops.md: sx = amax / 448, xq = e4m3(x / sx)) written straight into
 * the wgmma operand layout: one CTA per row of 8 mg (rows past M write +0), 4 consecutive k a word.
 */
static __global__ void __launch_bounds__(kACT_THREADS) quantFp8WgKernel(const void* __restrict__ x, int32_t dtype,
    uint8_t* __restrict__ xw, float* __restrict__ sx, int M, int K, int mg)
{
    const int m = blockIdx.x;
    const int words = ((K + 127) >> 7) * 32;
    if (m >= M)
    {
        for (int w = threadIdx.x; w < words; w += kACT_THREADS)
        {
            *reinterpret_cast<uint32_t*>(xw + wgFp8OperandOffset(m, 4 * w, mg)) = 0u;
        }
        return;
    }
    const size_t base = static_cast<size_t>(m) * K;
    float amax = 0.0f;
#pragma unroll 8
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
#pragma unroll 4
    for (int w = threadIdx.x; w < words; w += kACT_THREADS)
    {
        uint32_t word = 0u;
#pragma unroll
        for (int j = 0; j < 4; ++j)
        {
            const int k = 4 * w + j;
            if (k < K)
            {
                word |= static_cast<uint32_t>(e4m3Encode(__fdiv_rn(loadXBf16(x, dtype, base + k), s))) << (8 * j);
            }
        }
        *reinterpret_cast<uint32_t*>(xw + wgFp8OperandOffset(m, 4 * w, mg)) = word;
    }
}

/* d = (scaleD ? d : 0) + a * B: wgmma m64nNk32 e4m3 x e4m3, A from registers, B through its
 * descriptor, float32 results (the tensor core's own accumulator inside the instruction). */
template <int kN>
struct WgmmaFp8;

template <>
struct WgmmaFp8<8>
{
    __device__ static void run(float (&d)[4], const uint32_t (&a)[4], uint64_t desc, int scaleD)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, %8, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scaleD));
    }
};

template <>
struct WgmmaFp8<16>
{
    __device__ static void run(float (&d)[8], const uint32_t (&a)[4], uint64_t desc, int scaleD)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, "
            "{%8, %9, %10, %11}, %12, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scaleD));
    }
};

template <>
struct WgmmaFp8<32>
{
    __device__ static void run(float (&d)[16], const uint32_t (&a)[4], uint64_t desc, int scaleD)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
            "{%16, %17, %18, %19}, %20, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scaleD));
    }
};

template <>
struct WgmmaFp8<64>
{
    __device__ static void run(float (&d)[32], const uint32_t (&a)[4], uint64_t desc, int scaleD)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
            "{%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scaleD));
    }
};

template <>
struct WgmmaFp8<128>
{
    __device__ static void run(float (&d)[64], const uint32_t (&a)[4], uint64_t desc, int scaleD)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
            "{%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scaleD));
    }
};


/* The B descriptor: K-major, no swizzle, core matrices of 8 rows x 16 bytes; the next 16 k at +128
 * bytes (leading byte offset), the next 8 rows at +1024 (stride byte offset). */
__device__ __forceinline__ uint64_t wgFp8DescB(uint32_t saddr)
{
    return static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(128 >> 4) << 16)
        | (static_cast<uint64_t>(1024 >> 4) << 32);
}

/* Shared memory (bytes): kST stages of kN rows x 128 k, the mbarriers, the slices' sum where it does
 * not fit in registers (kN = 128: [64][256] floats). */
template <int kN, int kST>
struct WgFp8Layout
{
    static constexpr int kStage = kN * 128;
    static constexpr int kBar = kST * kStage;
    static constexpr bool kTOT_SMEM = kN >= 128;
    static constexpr int kTot = kBar + 128;
    static constexpr int kSmem = kTot + (kTOT_SMEM ? (kN / 2) * 128 * kWG_CONSUMERS * 4 : 0);
    static_assert(kSmem <= 227 * 1024, "shared memory");
    static_assert(kST * 16 <= 128, "mbarriers");
};

/* Register-ring depth (blocks of codes in registers, kRING - 1 loads ahead) per token tile. */
template <int kN>
struct WgFp8Ring
{
    static constexpr int kRING = kN >= 128 ? 3 : kN >= 64 ? 4 : 6;
};

/*
 * The consumer warpgroups: per block, in slice order, wait for its stage, issue the block's four
 * wgmmas on the codes in ring slot r (the first from zero), load the codes kRING - 1 blocks ahead
 * into the slot whose wgmmas finished last, wait, release the stage, promote (cur += partial), fold
 * the running slice into the sum after its last block.
 */
template <class P, int kN, int kST>
__device__ __forceinline__ void consumeWgmmaFp8(const typename P::Params& p, uint8_t* smem, uint64_t* full,
    uint64_t* empty, void* __restrict__ Y, float* __restrict__ part, int M, int N, int K, int32_t yDtype,
    int slices, int nkb, int m0, int mLo, int mHi, int n0)
{
#ifdef METRALE_SM90A
    using L = WgFp8Layout<kN, kST>;
    constexpr int kACC = kN / 2;
    constexpr int kRING = WgFp8Ring<kN>::kRING;
    const int tid = threadIdx.x;
    const int warpId = tid >> 5;
    const int lane = tid & 31;
    const int wg = warpId >> 2;
    const int wq = warpId & 3;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int nBase = n0 + 64 * wg + 16 * wq;
    const int cEnd = K - 32 * t;  // this thread's bytes of a row start at 128 b + 32 t
    int nRow[2];
    bool nOk[2];
    const uint8_t* cRow[2];
    const uint8_t* rowBase[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
    {
        nRow[hr] = nBase + g + 8 * hr;
        nOk[hr] = nRow[hr] < N;
        rowBase[hr] = p.codes + static_cast<long long>(nOk[hr] ? nRow[hr] : 0) * K;
        cRow[hr] = rowBase[hr] + 32 * t;
    }
    // A block's A fragments as wgmmas take them: a[q] = {row g word 2q, row g + 8 word 2q, row g word
    // 2q + 1, row g + 8 word 2q + 1}. Loaded a 4-byte word at a time straight into those registers
    // (L1-cached: a warp's first word of a row brings the row's 128 bytes), so that nothing reads a
    // load before the block's wgmmas do: 16-byte loads would need register copies into this layout,
    // which the compiler places right after the loads and which then wait for them.
    struct Slot
    {
        uint32_t a[4][4];
    };
    SliceCursor ldCur(nkb, slices);
    SliceCursor cmCur(nkb, slices);
    int nWalk = nkb;
    if (part != nullptr)
    {
        ldCur.seek(blockIdx.z);
        cmCur.seek(blockIdx.z);
        nWalk = cmCur.cnt;
    }
    int loaded = 0;
    auto loadNext = [&](Slot& s) {
        if (loaded < nWalk)
        {
            const int kb = ldCur.block();
#pragma unroll
            for (int hr = 0; hr < 2; ++hr)
            {
#pragma unroll
                for (int h = 0; h < 2; ++h)
                {
                    // Rows past N read row 0 (their outputs are never stored). Bytes past K (the
                    // last block) re-read the row's first 16 bytes instead: finite codes times the
                    // operand's +0 there, the same at every m, and no read past the weight.
                    const int off = kb * 128 + 16 * h;
                    const uint8_t* at = cRow[hr] + off;
                    const uint32_t* src = reinterpret_cast<const uint32_t*>(off < cEnd ? at : rowBase[hr]);
#pragma unroll
                    for (int w = 0; w < 4; ++w)
                    {
                        const int j = 4 * h + w;  // word j of the thread's 32 bytes: a[j / 2][2 (j % 2) + hr]
                        s.a[j >> 1][2 * (j & 1) + hr] = __ldg(src + w);
                    }
                }
            }
            ldCur.next();
            ++loaded;
        }
    };
    Slot ring[kRING];
#pragma unroll
    for (int r = 0; r + 1 < kRING; ++r)
    {
        loadNext(ring[r]);
    }

    float cur[kACC];
    float pt[kACC];
    float totR[L::kTOT_SMEM ? 1 : kACC];
    float* totS = reinterpret_cast<float*>(smem + L::kTot) + tid;
#pragma unroll
    for (int i = 0; i < kACC; ++i)
    {
        cur[i] = 0.0f;
        pt[i] = 0.0f;
        if constexpr (L::kTOT_SMEM)
        {
            totS[i * 128 * kWG_CONSUMERS] = 0.0f;
        }
        else
        {
            totR[i] = 0.0f;
        }
    }
    const uint32_t stage0 = smemAddr(smem);
    int slot = 0;
    uint32_t phase = 0;
    auto step = [&](Slot& s, Slot& refill) {
        const bool last = cmCur.lastOfSlice();
        cmCur.next();
        mbarWait(&full[slot], phase);
        fenceRegs(pt);
        wgFence();
        const uint64_t desc = wgFp8DescB(stage0 + slot * L::kStage);
#pragma unroll
        for (int q = 0; q < 4; ++q)
        {
            WgmmaFp8<kN>::run(pt, s.a[q], desc + static_cast<uint64_t>(16 * q), q > 0 ? 1 : 0);  // + 256 q bytes
        }
        wgCommit();
        loadNext(refill);  // the slot of the previous block, whose wgmmas have completed
        wgWait<0>();
        fenceRegs(pt);
        if (lane == 0)
        {
            mbarArrive(&empty[slot]);
        }
#pragma unroll
        for (int e = 0; e < kACC; ++e)
        {
            cur[e] = __fadd_rn(cur[e], pt[e]);  // the promotion: once per 128-k block
        }
        if (last)
        {
#pragma unroll
            for (int e = 0; e < kACC; ++e)
            {
                if constexpr (L::kTOT_SMEM)
                {
                    float& tv = totS[e * 128 * kWG_CONSUMERS];
                    tv = __fadd_rn(tv, cur[e]);
                }
                else
                {
                    totR[e] = __fadd_rn(totR[e], cur[e]);
                }
                cur[e] = 0.0f;
            }
        }
        if (++slot == kST)
        {
            slot = 0;
            phase ^= 1u;
        }
    };
#pragma unroll 1
    for (int i = 0; i < nWalk; i += kRING)
    {
#pragma unroll
        for (int r = 0; r < kRING; ++r)
        {
            if (i + r < nWalk)
            {
                step(ring[r], ring[(r + kRING - 1) % kRING]);
            }
        }
    }
    float tot[kACC];
#pragma unroll
    for (int e = 0; e < kACC; ++e)
    {
        if constexpr (L::kTOT_SMEM)
        {
            tot[e] = totS[e * 128 * kWG_CONSUMERS];
        }
        else
        {
            tot[e] = totR[e];
        }
    }

    // Epilogue: thread (g, t) of warp wq holds weight rows nRow[hr] for tokens m0 + 8 j + 2 t + e.
    if (part != nullptr)
    {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
        {
#pragma unroll
            for (int j = 0; j < kN / 8; ++j)
            {
#pragma unroll
                for (int e = 0; e < 2; ++e)
                {
                    const int m = m0 + 8 * j + 2 * t + e;
                    if (nOk[hr] && m >= mLo && m < mHi)
                    {
                        part[(static_cast<size_t>(blockIdx.z) * M + m) * N + nRow[hr]] = tot[4 * j + 2 * hr + e];
                    }
                }
            }
        }
        return;
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
    {
        if (!nOk[hr])
        {
            continue;
        }
        const int n = nRow[hr];
        const float bias = p.bias != nullptr ? p.bias[n] : 0.0f;
#pragma unroll
        for (int j = 0; j < kN / 8; ++j)
        {
#pragma unroll
            for (int e = 0; e < 2; ++e)
            {
                const int m = m0 + 8 * j + 2 * t + e;
                if (m >= mLo && m < mHi)
                {
                    float v = P::finish(p, tot[4 * j + 2 * hr + e], m, n);
                    if (p.bias != nullptr)
                    {
                        v = __fadd_rn(v, bias);
                    }
                    storeY(Y, yDtype, static_cast<size_t>(m) * N + n, v);
                }
            }
        }
    }
#endif
}

/*
 * One CTA's tile: weight rows [n0, n0 + kWG_ROWS) against the token columns [m0, m0 + kN) of the
 * operand Xw (mg groups of 8 rows; m0 a multiple of 8), stored for rows [mLo, mHi) only. The dense
 * kernel below calls it with its grid position; the grouped-expert kernel (moeProj/) with an expert's
 * weights and rows, so every expert computes exactly this arithmetic (a column's bits do not depend
 * on the other columns of the tile). part: the split's buffer (dense only; blockIdx.z is the slice).
 */
template <class P, int kN, int kST>
__device__ __forceinline__ void projWgmmaFp8Tile(const typename P::Params& p, const uint8_t* __restrict__ Xw,
    void* __restrict__ Y, float* __restrict__ part, int M, int mg, int N, int K, int32_t yDtype, int slices,
    int n0, int m0, int mLo, int mHi)
{
#ifdef METRALE_SM90A
    using L = WgFp8Layout<kN, kST>;
    extern __shared__ __align__(128) uint8_t smem[];
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::kBar);
    uint64_t* empty = full + kST;
    const int tid = threadIdx.x;
    const int nkb = (K + 127) >> 7;
    if (tid == 0)
    {
        for (int s = 0; s < kST; ++s)
        {
            mbarInit(&full[s], 1);
            mbarInit(&empty[s], 4 * kWG_CONSUMERS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if ((tid >> 5) >= 4 * kWG_CONSUMERS)
    {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWG_PRODUCER_REGS));
        if (tid == 128 * kWG_CONSUMERS)
        {
            const int rows = min(kN, 8 * mg - m0);
            const uint32_t bytes = static_cast<uint32_t>(rows) * 128u;
            SliceCursor cur(nkb, slices);
            int nWalk = nkb;
            if (part != nullptr)
            {
                cur.seek(blockIdx.z);
                nWalk = cur.cnt;
            }
            int slot = 0;
            uint32_t phase = 0;
            for (int i = 0; i < nWalk; ++i)
            {
                if (i >= kST)
                {
                    mbarWait(&empty[slot], phase ^ 1u);
                }
                mbarExpectTx(&full[slot], bytes);
                bulkCopy(smem + slot * L::kStage, Xw + (static_cast<size_t>(cur.block()) * mg + (m0 >> 3)) * 1024,
                    bytes, &full[slot]);
                cur.next();
                if (++slot == kST)
                {
                    slot = 0;
                    phase ^= 1u;
                }
            }
        }
    }
    else
    {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kWG_CONSUMER_REGS));
        consumeWgmmaFp8<P, kN, kST>(p, smem, full, empty, Y, part, M, N, K, yDtype, slices, nkb, m0, mLo, mHi, n0);
    }
#endif
}

template <class P, int kN, int kST>
__global__ void __launch_bounds__(kWG_THREADS, 1) projWgmmaFp8Kernel(const typename P::Params p,
    const uint8_t* __restrict__ Xw, void* __restrict__ Y, float* __restrict__ part, int M, int N, int K,
    int32_t yDtype, int slices)
{
#ifdef METRALE_SM90A
    const int m0 = blockIdx.y * kN;
    projWgmmaFp8Tile<P, kN, kST>(p, Xw, Y, part, M, (M + 7) >> 3, N, K, yDtype, slices, blockIdx.x * kWG_ROWS, m0,
        m0, M);
#else
    __trap();  // launched only where wgFp8Available() found sm_90a machine code
#endif
}

/* The (token tile, stages) instantiations: kN = 8, 16, 32, 64, 128. */
template <int kN>
struct WgFp8Stages
{
    static constexpr int kST = kN <= 32 ? 8 : kN == 64 ? 6 : 4;
};

/* Token tile: a function of m and the weight's shape only. */
inline int wgFp8TokenTile(int64_t m, int64_t n)
{
    if (m <= 32)
    {
        return m <= 8 ? 8 : m <= 16 ? 16 : 32;
    }
    const int64_t ctas128 = ((n + kWG_ROWS - 1) / kWG_ROWS) * ((m + 127) / 128);
    return (m > 64 && ctas128 >= 132) ? 128 : 64;
}

/* Whether the slices get CTAs of their own (as wgSplit, for this tier's token tile). */
inline bool wgFp8Split(int64_t m, int64_t n, int64_t k)
{
    const int64_t tn = wgFp8TokenTile(m, n);
    const int64_t ctas = ((n + kWG_ROWS - 1) / kWG_ROWS) * ((m + tn - 1) / tn);
    const int64_t waves = (ctas + 131) / 132;
    return projSlices(n, k) > 1 && ctas * 10 < waves * 132 * 7;
}

/* Workspace bytes of the split's slice sums (0 where the tier does not split). */
inline size_t wgFp8PartBytes(int64_t m, int64_t n, int64_t k)
{
    return wgFp8Split(m, n, k) ? (static_cast<size_t>(projSlices(n, k)) * m * n * 4 + 255) / 256 * 256 : 0;
}

template <class P, int kN, int kST>
inline cudaError_t launchProjWgmmaFp8N(const typename P::Params& p, const uint8_t* Xw, void* y, float* part, int m,
    int n, int k, int32_t yDtype, int slices, cudaStream_t stream)
{
    using L = WgFp8Layout<kN, kST>;
    auto kern = projWgmmaFp8Kernel<P, kN, kST>;
    static unsigned long long done = 0;  // the raised smem limit, per device (a race only repeats it)
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
    {
        return e;
    }
    const unsigned long long bit = 1ull << (dev & 63);
    if (!(done & bit))
    {
        e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmem);
        if (e != cudaSuccess)
        {
            return e;
        }
        done |= bit;
    }
    const dim3 grid((n + kWG_ROWS - 1) / kWG_ROWS, (m + kN - 1) / kN, part != nullptr ? slices : 1);
    kern<<<grid, kWG_THREADS, L::kSmem, stream>>>(p, Xw, y, part, m, n, k, yDtype, slices);
    e = cudaGetLastError();
    if (e != cudaSuccess || part == nullptr)
    {
        return e;
    }
    const size_t total = static_cast<size_t>(m) * n;
    const unsigned blocks = static_cast<unsigned>((total + 255) / 256 < 132u * 16u ? (total + 255) / 256 : 132u * 16u);
    wgReduceKernel<P><<<blocks, 256, 0, stream>>>(p, part, y, m, n, slices, yDtype);
    return cudaGetLastError();
}

/* The FP8 wgmma tier on the operand Xw (wgFp8OperandOffset layout); part: the split's buffer
 * (wgFp8PartBytes), used where wgFp8Split says so. */
template <class P>
inline cudaError_t launchProjWgmmaFp8(const typename P::Params& p, const uint8_t* Xw, void* y, void* part, int m,
    int n, int k, int32_t yDtype, cudaStream_t stream)
{
    const int slices = projSlices(n, k);
    float* pb = wgFp8Split(m, n, k) ? static_cast<float*>(part) : nullptr;
    if (pb == nullptr && wgFp8Split(m, n, k))
    {
        return cudaErrorInvalidValue;
    }
    switch (wgFp8TokenTile(m, n))
    {
    case 8: return launchProjWgmmaFp8N<P, 8, WgFp8Stages<8>::kST>(p, Xw, y, pb, m, n, k, yDtype, slices, stream);
    case 16: return launchProjWgmmaFp8N<P, 16, WgFp8Stages<16>::kST>(p, Xw, y, pb, m, n, k, yDtype, slices, stream);
    case 32: return launchProjWgmmaFp8N<P, 32, WgFp8Stages<32>::kST>(p, Xw, y, pb, m, n, k, yDtype, slices, stream);
    case 64: return launchProjWgmmaFp8N<P, 64, WgFp8Stages<64>::kST>(p, Xw, y, pb, m, n, k, yDtype, slices, stream);
    default:
        return launchProjWgmmaFp8N<P, 128, WgFp8Stages<128>::kST>(p, Xw, y, pb, m, n, k, yDtype, slices, stream);
    }
}

/* Whether this device runs the FP8 wgmma tier (sm_90a machine code loaded; cached per device). */
template <class P>
inline bool wgFp8Available()
{
    static int cache[64] = {};  // 0 unknown, 1 yes, 2 no
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess)
    {
        return false;
    }
    int& c = cache[dev & 63];
    if (c == 0)
    {
        cudaFuncAttributes a{};
        int major = 0;
        const bool ok = cudaFuncGetAttributes(&a, projWgmmaFp8Kernel<P, 8, WgFp8Stages<8>::kST>) == cudaSuccess
            && cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess;
        c = (ok && a.binaryVersion == 90 && major == 9) ? 1 : 2;
        (void) cudaGetLastError();
    }
    return c == 1;
}

} // namespace metrale

#endif // METRALE_PROJ_WGMMA_FP8_CUH
