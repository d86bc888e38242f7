/*
 * The FP8 wgmma tier of W8A8Proj (fp8 activations, per-row activation x per-channel weight scales):
 * every m, sm_90a. Swap-AB as projWgmma.cuh: the e4m3 weight codes are wgmma's A operand, the e4m3
 * activations its B operand, the tokens its N (8 to 128, from m); both operands from shared memory
 * (no conversion at all), filled by a producer warpgroup: the activations by one bulk copy per stage
 * (the TMA engine), the weights by 16-byte cp.async copies of all 128 producer threads, both
 * completing on the stage's mbarrier.
 *
 * Why shared memory for the weights (not registers, as the bf16 tier's dequantized A): a wgmma that
 * reads A from registers is preceded by WARPGROUP.ARRIVE, which waits for every global load in
 * flight, so codes loaded blocks ahead into registers arrive no earlier than the next block (seen in
 * the SASS and on the H200 at 2dada97 / 8a179ac: the tier ran one memory latency per block).
 *
 * Invariants (row invariance; docs/ops.md, the fp8 format):
 * - One FP8 instruction and one promotion interval at every m: each 128-k block is four chained
 *   `wgmma m64nNk32 e4m3` (the first from zero, instruction q over k = 128 b + 32 q + (0..31) in
 *   ascending positions), and its float32 result (the tensor core's partial sum, whose short
 *   accumulator is not float32) is promoted once into a float32 register, `cur = cur + partial`
 *   (DeepGEMM's promotion). The slices of projSlices(n, k) are walked as in every tier (each from +0
 *   over its blocks in ascending order, summed from the left), then (acc * sx[m]) * sw[n]. FP8
 *   mma.sync (f16 HMMA) and FP8 wgmma never share bits, so this tier serves every m, 1 included, on
 *   a device that has it (elsewhere the f16 mma.sync tiers serve every m: other bits, the same on
 *   that device for every m).
 * - wgmma bits do not depend on the instruction's N (measured on the H200, /work/shared/tools), so
 *   the token tile may change with m; the k order never does.
 * - Shared-memory layouts (no swizzle, K-major core matrices of 8 rows x 16 bytes): weights, per
 *   stage and consumer warpgroup, core matrix (8-row group r, 16-k chunk c) at (8 r + c) * 128;
 *   activations as the operand in global memory (wgFp8OperandOffset), written by the quantization
 *   pre-pass itself: per (block, 8 rows) 1024 contiguous bytes, chunk c at 128 c; a token tile of a
 *   block is kN / 8 consecutive ones: one copy. Values past K are +0 (the weights' through the
 *   copies' zero fill), rows past M +0.
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
    return (((static_cast<size_t>(b) * mg + (m >> 3)) * 8 + ((k & 127) >> 4)) * 8 + (m & 7)) * 16 + (k & 15);
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

/* d = (scaleD ? d : 0) + A * B: wgmma m64nNk32 e4m3 x e4m3, both operands through their shared-memory
 * descriptors, float32 results (the tensor core's own accumulator inside the instruction). */
template <int kN>
struct WgmmaFp8;

template <>
struct WgmmaFp8<8>
{
    __device__ static void run(float (&d)[4], uint64_t descA, uint64_t descB, int scaleD)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "l"(descA), "l"(descB), "r"(scaleD));
    }
};

template <>
struct WgmmaFp8<16>
{
    __device__ static void run(float (&d)[8], uint64_t descA, uint64_t descB, int scaleD)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
            : "l"(descA), "l"(descB), "r"(scaleD));
    }
};

template <>
struct WgmmaFp8<32>
{
    __device__ static void run(float (&d)[16], uint64_t descA, uint64_t descB, int scaleD)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
            : "l"(descA), "l"(descB), "r"(scaleD));
    }
};

template <>
struct WgmmaFp8<64>
{
    __device__ static void run(float (&d)[32], uint64_t descA, uint64_t descB, int scaleD)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "l"(descA), "l"(descB), "r"(scaleD));
    }
};

template <>
struct WgmmaFp8<128>
{
    __device__ static void run(float (&d)[64], uint64_t descA, uint64_t descB, int scaleD)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "l"(descA), "l"(descB), "r"(scaleD));
    }
};

/* An operand descriptor (A or B): K-major, no swizzle, core matrices of 8 rows x 16 bytes; the next
 * 16 k at +128 bytes (leading byte offset), the next 8 rows at +1024 (stride byte offset). */
__device__ __forceinline__ uint64_t wgFp8DescB(uint32_t saddr)
{
    return static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(128 >> 4) << 16)
        | (static_cast<uint64_t>(1024 >> 4) << 32);
}

/* Shared memory (bytes): kST stages of [the weights' 128 rows x 128 k | kN activation rows x 128 k],
 * then the full / empty mbarriers. */
template <int kN, int kST>
struct WgFp8Layout
{
    static constexpr int kA = kWG_ROWS * 128;
    static constexpr int kStage = kA + kN * 128;
    static constexpr int kBar = kST * kStage;
    static constexpr int kSmem = kBar + 2 * kST * 8;
    static_assert(kSmem <= 227 * 1024, "shared memory");
};

/* The producer warpgroup's registers: it computes the weights' copy addresses (8 row pointers). */
constexpr int kWG_FP8_PRODUCER_REGS = 40;
constexpr int kWG_FP8_CONSUMER_REGS = 232;  // 128 x 40 + 256 x 232 <= 64K

/*
 * The consumer warpgroups: per block, in slice order, wait for its stage, issue the block's four
 * wgmmas (the first from zero) into the partial set, wait, release the stage, promote
 * (cur += partial), fold the running slice into the sum after its last block.
 */
template <class P, int kN, int kST>
__device__ __forceinline__ void consumeWgmmaFp8(const typename P::Params& p, uint8_t* smem, uint64_t* full,
    uint64_t* empty, void* __restrict__ Y, float* __restrict__ part, int M, int N, int K, int32_t yDtype,
    int slices, int nkb, int m0, int mLo, int mHi, int n0)
{
#ifdef METRALE_SM90A
    using L = WgFp8Layout<kN, kST>;
    constexpr int kACC = kN / 2;
    const int tid = threadIdx.x;
    const int warpId = tid >> 5;
    const int lane = tid & 31;
    const int wg = warpId >> 2;
    const int wq = warpId & 3;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int nBase = n0 + 64 * wg + 16 * wq;
    SliceCursor cmCur(nkb, slices);
    int nWalk = nkb;
    if (part != nullptr)
    {
        cmCur.seek(blockIdx.z);
        nWalk = cmCur.cnt;
    }
    float cur[kACC];
    float pt[kACC];
    float tot[kACC];
#pragma unroll
    for (int i = 0; i < kACC; ++i)
    {
        cur[i] = 0.0f;
        pt[i] = 0.0f;
        tot[i] = 0.0f;
    }
    const uint32_t stage0 = smemAddr(smem);
    int slot = 0;
    uint32_t phase = 0;
#pragma unroll 1
    for (int i = 0; i < nWalk; ++i)
    {
        const bool last = cmCur.lastOfSlice();
        cmCur.next();
        mbarWait(&full[slot], phase);
        // The weights came through cp.async (the generic proxy); wgmma reads through the async proxy.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        fenceRegs(pt);
        wgFence();
        const uint32_t st = stage0 + slot * L::kStage;
        const uint64_t descA = wgFp8DescB(st + wg * (64 * 128));
        const uint64_t descB = wgFp8DescB(st + L::kA);
#pragma unroll
        for (int q = 0; q < 4; ++q)
        {
            // + 256 q bytes: the chunks 2 q, 2 q + 1 of both operands
            WgmmaFp8<kN>::run(pt, descA + static_cast<uint64_t>(16 * q), descB + static_cast<uint64_t>(16 * q),
                q > 0 ? 1 : 0);
        }
        wgCommit();
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
                tot[e] = __fadd_rn(tot[e], cur[e]);
                cur[e] = 0.0f;
            }
        }
        if (++slot == kST)
        {
            slot = 0;
            phase ^= 1u;
        }
    }

    // Epilogue: thread (g, t) of warp wq holds weight rows n0 + 64 wg + 16 wq + g (+ 8) for tokens
    // m0 + 8 j + 2 t + e.
    int nRow[2];
    bool nOk[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
    {
        nRow[hr] = nBase + g + 8 * hr;
        nOk[hr] = nRow[hr] < N;
    }
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
 * The producer warpgroup, all 128 threads: per block in slice order, wait for the stage to be free;
 * thread 0 starts the activations' bulk copy (expect_tx on the stage's full barrier); every thread
 * copies 8 of the weight tile's 1024 16-byte chunks (its fixed 16-k chunk c of 8 rows; bytes past K
 * zero-filled, rows past N read row N - 1, whose outputs are never stored) and arrives on the full
 * barrier when they land (cp.async.mbarrier.arrive.noinc). Thread p writes chunks p + 128 i: 16
 * consecutive bytes per thread in shared memory (no bank conflicts), 64-byte runs of 8 rows in
 * global memory (whole sectors).
 */
template <class P, int kN, int kST>
__device__ __forceinline__ void produceWgmmaFp8(const typename P::Params& p, const uint8_t* __restrict__ Xw,
    uint8_t* smem, uint64_t* full, uint64_t* empty, bool split, int mg, int N, int K, int slices, int nkb, int m0,
    int n0)
{
#ifdef METRALE_SM90A
    using L = WgFp8Layout<kN, kST>;
    const int pt = threadIdx.x - 128 * kWG_CONSUMERS;
    const int r8 = pt & 7;
    const int c = (pt >> 3) & 7;
    const uint8_t* rowPtr[8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
    {
        const int row = min(n0 + 8 * ((pt >> 6) + 2 * i) + r8, N - 1);
        rowPtr[i] = p.codes + static_cast<long long>(row) * K + 16 * c;
    }
    const int rows = min(kN, 8 * mg - m0);
    const uint32_t bytesB = static_cast<uint32_t>(rows) * 128u;
    SliceCursor cur(nkb, slices);
    int nWalk = nkb;
    if (split)
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
        const int kb = cur.block();
        uint8_t* st = smem + slot * L::kStage;
        if (pt == 0)
        {
            mbarExpectTx(&full[slot], bytesB);
            bulkCopy(st + L::kA, Xw + (static_cast<size_t>(kb) * mg + (m0 >> 3)) * 1024, bytesB, &full[slot]);
        }
        const int valid = kb * 128 + 16 * c < K ? 16 : 0;
#pragma unroll
        for (int j = 0; j < 8; ++j)
        {
            cpAsync16(st + (pt + 128 * j) * 16, rowPtr[j] + kb * 128, valid);
        }
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smemAddr(&full[slot])) : "memory");
        cur.next();
        if (++slot == kST)
        {
            slot = 0;
            phase ^= 1u;
        }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
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
            mbarInit(&full[s], 1 + 128);  // the bulk copy's expect_tx arrival + 128 cp.async arrivals
            mbarInit(&empty[s], 4 * kWG_CONSUMERS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if ((tid >> 5) >= 4 * kWG_CONSUMERS)
    {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWG_FP8_PRODUCER_REGS));
        produceWgmmaFp8<P, kN, kST>(p, Xw, smem, full, empty, part != nullptr, mg, N, K, slices, nkb, m0, n0);
    }
    else
    {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kWG_FP8_CONSUMER_REGS));
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
    static constexpr int kST = kN <= 32 ? 10 : kN == 64 ? 8 : 6;
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
