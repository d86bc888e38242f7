/*
 * The wgmma tier of the projection GEMM (sm_90a, m >= kWG_MIN_M rows): swap-AB, tokens as wgmma's N.
 *
 * A CTA holds two consumer warpgroups (64 weight rows each: the wgmma's M) and a producer warpgroup
 * (all 128 threads copy; setmaxnreg gives its registers to the consumers).
 * The weights are the A operand from registers. Two ways to get them there (WgSmemCodes below):
 * for policies with kWG_SMEM_CODES (W4A16) the producer copies the weight tile's codes and meta
 * words of each 128-k block into the pipeline stage (16-byte and 4-byte cp.async, completing on the
 * stage's mbarrier through cp.async.mbarrier.arrive.noinc), and every consumer warp reads its 16
 * weight rows' codes from shared memory, takes the policy's blockState from the staged meta (as the
 * shared-memory tiers do) and dequantizes them with the policy's own `dequant`, whose A fragment (per
 * warp, the m16n8k16 A layout) is wgmma's register-A fragment. Why not global loads into registers:
 * a register-A wgmma is preceded by WARPGROUP.ARRIVE, which waits for every global load in flight,
 * so codes loaded a block ahead cost one memory latency per block (the H200 runs of kern3). The
 * other policies stream their codes and meta into a two-block register ring in the consumers
 * (consumeWgmmaRegs), which measured faster for them (WgSmemCodes). The
 * activations are the B operand: kN rows of the token tile per 128-k block, one bulk copy
 * (cp.async.bulk, the TMA engine) per pipeline stage into the same stage, kST stages (as many as the
 * shared memory holds, at most 4 or 6), released by the consumers' mbarrier arrivals.
 *
 * Invariants (row invariance, projGemm.cuh):
 * - The same arithmetic as the other tiers, operand for operand: the slices of projSlices(n, k), each
 *   accumulated from +0 over its 128-k blocks in ascending order, in steps s = 0..7 of one 16-term
 *   instruction each; instruction position 2t + e holds k = 128 b + 32 t + 4 s + e and position
 *   2t + 8 + e holds k = 128 b + 32 t + 4 s + 2 + e, for both operands; the slices summed from the
 *   left, ((0 + acc_0) + acc_1) + ...; the same finish / bias / rounding per element.
 * - bf16 (f16) wgmma m64nNk16 and mma.sync m16n8k16 give the same float32 bits for the same k order
 *   and C, whatever N (tests/gpu/wgmma_equiv.cu measures it on the H200). So the token tile kN may
 *   change with m; the K order never does.
 * - The B operand's k order comes from its layout in memory (wgOperandOffset): the pre-pass writes
 *   the 16-bit operand so that a natural, contiguous copy puts every k at the contract's instruction
 *   position. Layout, per 128-k block b and group of 8 rows q: 16 chunks c = 2 s + h (step s, half h)
 *   of 8 rows x 8 values (16 bytes a row: one wgmma core matrix); value i = 2 t + e of row r is
 *   k = 128 b + 32 t + 4 s + 2 h + e. A (b, q) is 2048 contiguous bytes, and a token tile of a block
 *   is kN / 8 consecutive ones: one copy. Values past K are +0 (as the other tiers' zero fill).
 * - Per-block scaled policies (P::kPER_BLOCK) are not served here (a third accumulator set); they
 *   stay on the mma.sync tiers, which give the same bits.
 */
#ifndef METRALE_PROJ_WGMMA_CUH
#define METRALE_PROJ_WGMMA_CUH

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <type_traits>

#include "metraleNumerics.cuh"
#include "projGemm.cuh"
#include "projTiers.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define METRALE_SM90A 1  // wgmma and setmaxnreg: the sm_90a build only
#endif

namespace metrale
{

constexpr int kWG_CONSUMERS = 2;                      // consumer warpgroups per CTA
constexpr int kWG_ROWS = 64 * kWG_CONSUMERS;          // weight rows per CTA
constexpr int kWG_THREADS = 128 * kWG_CONSUMERS + 128; // + the producer warpgroup (one thread copies)
// setmaxnreg, <= 168 x 384 (the launch's registers): the copying producer warpgroup of the
// shared-memory codes path 128 x 40 + 256 x 232; the one-thread producer of the register path
// 128 x 24 + 256 x 240.
constexpr int kWG_PRODUCER_REGS = 40;
constexpr int kWG_CONSUMER_REGS = 232;
constexpr int kWG_PRODUCER_REGS_R = 24;
constexpr int kWG_CONSUMER_REGS_R = 240;

/*
 * Whether policy P's wgmma tier takes the weight codes and meta through shared memory
 * (P::kWG_SMEM_CODES; consumeWgmma / produceWgmma, and the CTA raster in groups of kWG_RASTER token
 * tiles) or streams them into the consumers' registers (default; consumeWgmmaRegs, blockIdx.x over
 * the weight tiles first). Measured on the H200 (kernels-20261201-1231-82d7cc2.json against
 * kernels-20261201-1209-a24630d.json / -1028-ecfea67.json): the shared-memory path made W4A16 10-18%
 * faster at M >= 64, W4A4 2-8% and W8A8 4-14% slower at M = 64..1024. Both paths compute the same
 * arithmetic in the same k order (the same bits).
 */
template <class P, class = void>
struct WgSmemCodes
{
    static constexpr bool value = false;
};
template <class P>
struct WgSmemCodes<P, std::void_t<decltype(P::kWG_SMEM_CODES)>>
{
    static constexpr bool value = P::kWG_SMEM_CODES;
};
/* Whether a shared-memory-codes policy may run the deep mainloop (consumeWgmmaDeep): P::kWG_DEEP.
 * W4A16 only: its bits under deep are measured equal to the base mainloop's (tests/gpu); FloatProj's
 * 16-bit codes gave different bits under deep on the H200 (fc01e90) and stay on the base one. */
template <class P, class = void>
struct WgDeep
{
    static constexpr bool value = false;
};
template <class P>
struct WgDeep<P, std::void_t<decltype(P::kWG_DEEP)>>
{
    static constexpr bool value = WgSmemCodes<P>::value && P::kWG_DEEP;
};
constexpr int kWG_RASTER = 8;                          // token tiles per raster group

/* Byte offset of x[m, k] in the wgmma operand of a launch whose rows form mg groups of 8. */
__host__ __device__ __forceinline__ size_t wgOperandOffset(int m, int k, int mg)
{
    const int b = k >> 7;
    const int kk = k & 127;
    const int c = 2 * ((kk >> 2) & 7) + ((kk >> 1) & 1);  // 2 s + h
    const int i = 2 * (kk >> 5) + (kk & 1);               // 2 t + e
    return ((((static_cast<size_t>(b) * mg + (m >> 3)) * 16 + c) * 8 + (m & 7)) * 16) + 2 * i;
}

/* Bytes of the wgmma operand of [m, k]: every 128-k block and every row group of 8 complete. */
inline size_t wgOperandBytes(int64_t m, int64_t k)
{
    const size_t mg = static_cast<size_t>((m + 7) / 8);
    const size_t nkb = static_cast<size_t>((k + 127) / 128);
    return (nkb * mg * 2048 + 255) / 256 * 256;
}

/*
 * x (float32 / float16 / bf16 rounded to bf16 as toBf16Kernel does; kRaw: 16-bit values copied as
 * they are) into the wgmma operand layout. One CTA of 128 threads per (block, row group): thread
 * (r, c) writes the 16-byte row r of chunk c; values past m or k are +0.
 */
template <bool kRaw>
__global__ void __launch_bounds__(128) wgOperandKernel(const void* __restrict__ x, int32_t dtype,
    uint16_t* __restrict__ out, int M, int K, int mg)
{
    const int grp = blockIdx.x % mg;
    const int b = blockIdx.x / mg;
    const int c = threadIdx.x & 15;
    const int r = threadIdx.x >> 4;
    const int m = 8 * grp + r;
    uint32_t w[4];
#pragma unroll
    for (int t = 0; t < 4; ++t)
    {
        const int k0 = 128 * b + 32 * t + 4 * (c >> 1) + 2 * (c & 1);
        uint32_t v[2] = {0u, 0u};
#pragma unroll
        for (int e = 0; e < 2; ++e)
        {
            if (m < M && k0 + e < K)
            {
                const size_t idx = static_cast<size_t>(m) * K + k0 + e;
                if constexpr (kRaw)
                {
                    v[e] = static_cast<const uint16_t*>(x)[idx];
                }
                else
                {
                    v[e] = __bfloat16_as_ushort(__float2bfloat16_rn(loadXBf16(x, dtype, idx)));
                }
            }
        }
        w[t] = v[0] | (v[1] << 16);
    }
    *reinterpret_cast<uint4*>(out + static_cast<size_t>(blockIdx.x) * 1024 + c * 64 + r * 8)
        = make_uint4(w[0], w[1], w[2], w[3]);
}

/* d (+)= a * B: wgmma m64nNk16, A from registers (the m16n8k16 A fragment per warp), B through its
 * shared-memory descriptor, float32 accumulators. */
template <bool kF16, int kN>
struct WgmmaRS;

template <>
struct WgmmaRS<false, 64>
{
    __device__ static void run(float (&d)[32], const uint32_t (&a)[4], uint64_t desc)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
            "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
    }
};

template <>
struct WgmmaRS<true, 64>
{
    __device__ static void run(float (&d)[32], const uint32_t (&a)[4], uint64_t desc)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
            "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
    }
};

template <>
struct WgmmaRS<false, 128>
{
    __device__ static void run(float (&d)[64], const uint32_t (&a)[4], uint64_t desc)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
            "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
    }
};

template <>
struct WgmmaRS<true, 128>
{
    __device__ static void run(float (&d)[64], const uint32_t (&a)[4], uint64_t desc)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
            "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
    }
};

/* The B descriptor: K-major, no swizzle, core matrices of 8 rows x 16 bytes; the next 8 k at +128
 * bytes (leading byte offset), the next 8 rows at +2048 (stride byte offset). */
__device__ __forceinline__ uint64_t wgDescB(uint32_t saddr)
{
    return static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(128 >> 4) << 16)
        | (static_cast<uint64_t>(2048 >> 4) << 32);
}

__device__ __forceinline__ void wgFence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgCommit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kN>
__device__ __forceinline__ void wgWait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kN) : "memory");
}
/* Pins the accumulators' reads and writes between the wgmma fences and waits. */
template <int kR>
__device__ __forceinline__ void fenceRegs(float (&d)[kR])
{
#pragma unroll
    for (int i = 0; i < kR; ++i)
    {
        asm volatile("" : "+f"(d[i])::"memory");
    }
}

__device__ __forceinline__ void mbarInit(uint64_t* bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smemAddr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarExpectTx(uint64_t* bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smemAddr(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbarArrive(uint64_t* bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smemAddr(bar)) : "memory");
}
__device__ __forceinline__ void mbarWait(uint64_t* bar, uint32_t parity)
{
    // The retry loop inside one asm statement (PTX labels are local to the braces): no branch the
    // compiler could take for divergent around the wgmma instructions.
    asm volatile(
        "{\n.reg .pred p;\nWAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra WAIT;\n}\n" ::"r"(smemAddr(bar)),
        "r"(parity)
        : "memory");
}
/* bytes (a multiple of 16) global -> shared through the bulk-copy engine, completing on bar. */
__device__ __forceinline__ void bulkCopy(void* dst, const void* src, uint32_t bytes, uint64_t* bar)
{
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
            smemAddr(dst)),
        "l"(src), "r"(bytes), "r"(smemAddr(bar))
        : "memory");
}

/*
 * The one-thread producer of a pipeline of kST stages: per block of the walk (cur, nWalk blocks),
 * wait until the consumers have released the stage, then copy(slot, kb) starts the block's copies,
 * completing on full[slot] (the register path's activations; the FP8 tier's activations and weights).
 */
/* A wgmma CTA's set-up: thread 0 initializes the ring's kST full mbarriers (fullCount arrivals each) and
 * empty ones (one arrival a consumer warp), every thread builds its share of the policy's table, then a
 * CTA barrier. */
template <class P, int kST>
__device__ __forceinline__ void wgRingInit(uint64_t* full, uint64_t* empty, int fullCount, uint8_t* table)
{
    if (threadIdx.x == 0)
    {
        for (int s = 0; s < kST; ++s)
        {
            mbarInit(&full[s], fullCount);
            mbarInit(&empty[s], 4 * kWG_CONSUMERS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    P::initTable(table, threadIdx.x, kWG_THREADS);
    __syncthreads();
}

template <int kST, class Copy>
__device__ __forceinline__ void produceStages(SliceCursor cur, int nWalk, uint64_t* full, uint64_t* empty, Copy&& copy)
{
    int slot = 0;
    uint32_t phase = 0;
    for (int i = 0; i < nWalk; ++i)
    {
        if (i >= kST)
        {
            mbarWait(&empty[slot], phase ^ 1u);
        }
        copy(slot, cur.block());
        cur.next();
        if (++slot == kST)
        {
            slot = 0;
            phase ^= 1u;
        }
    }
}

/*
 * The raster of a (weight tiles gx x token tiles gy) grid: tile ids in order walk groups of kWG_RASTER
 * token tiles, all weight tiles of a group, token tile fastest, so that one wave's weights and
 * activations stay in the L2 (a layout choice only: each CTA computes the same tile wherever it falls
 * in the order). m0: the CTA's first token, n0: its first weight row (rows: weight rows per CTA).
 */
__device__ __forceinline__ void wgRasterTileAt(int id, int gx, int gy, int kN, int& m0, int& n0, int rows)
{
    const int group = id / (kWG_RASTER * gx);
    const int inGroup = id - group * kWG_RASTER * gx;
    const int span = min(kWG_RASTER, gy - group * kWG_RASTER);
    m0 = (group * kWG_RASTER + inGroup % span) * kN;
    n0 = (inGroup / span) * rows;
}

/* The raster's tile of this CTA in a grid of (weight tiles, token tiles). */
__device__ __forceinline__ void wgRasterTile(int kN, int& m0, int& n0, int rows = kWG_ROWS)
{
    const int gx = static_cast<int>(gridDim.x);
    const int gy = static_cast<int>(gridDim.y);
    wgRasterTileAt(static_cast<int>(blockIdx.y) * gx + static_cast<int>(blockIdx.x), gx, gy, kN, m0, n0, rows);
}

/* Shared-memory layout (bytes): kST stages, each the activations (kN rows x 128 k), the weight
 * codes (kWG_ROWS rows x P::kCB bytes) and the meta words (kWG_ROWS rows x P::kMW); the full / empty
 * mbarriers, the slices' sum, the policy's table. Codes: the 16-byte chunk v (0 .. kCB / 64 - 1) of
 * quad lane t of CTA row r at v * (kWG_ROWS * 64) + r * 64 + t * 16, so that a quarter warp's reads
 * (rows g, g + 1, lanes t) are 128 contiguous bytes; meta: row r's words at r * kMW * 4. */
template <class P, int kN, int kST, bool kDeep = false>
struct WgLayout
{
    static constexpr bool kS = WgSmemCodes<P>::value;  // codes and meta in the stage
    static constexpr int kB = kN * 256;
    static constexpr int kCodes = kB;
    static constexpr int kMeta = kCodes + (kS ? kWG_ROWS * P::kCB : 0);
    static constexpr int kStage = kMeta + (kS ? kWG_ROWS * P::kMW * 4 : 0);
    static constexpr int kBar = kST * kStage;
    static constexpr int kTot = kBar + 128;                          // the slices' sum, [kN / 2][256] floats
    static constexpr int kTable = kTot + (kDeep ? 0 : (kN / 2) * 128 * kWG_CONSUMERS * 4);  // deep: the sum in registers
    static constexpr int kSmem = kTable + P::kTABLE_BYTES;
    static_assert(kSmem <= 227 * 1024, "shared memory");
    static_assert(kST >= 2 && kST * 16 <= 128, "mbarriers");
    static_assert(kStage % 16 == 0, "16-byte aligned stages");
};

/* The deepest ring (at most kMax stages) that fits the shared memory beside the rest. */
template <class P, int kN, int kMax, bool kDeep = false>
constexpr int wgStages()
{
    constexpr int stage = kN * 256 + (WgSmemCodes<P>::value ? kWG_ROWS * P::kCB + kWG_ROWS * P::kMW * 4 : 0);
    constexpr int rest = 128 + (kDeep ? 0 : (kN / 2) * 128 * kWG_CONSUMERS * 4) + P::kTABLE_BYTES;
    constexpr int fit = (227 * 1024 - rest) / stage;
    return fit < kMax ? fit : kMax;
}

/* The wgmma consumers' epilogue: thread (g, t) of warp wq holds weight rows nRow[hr] for
 * tokens m0 + 8 j + 2 t + e; tot is the slices' sum (the split: this slice's, for wgReduceKernel). */
template <class P, int kN, bool kLo = false>
__device__ __forceinline__ void wgEpilogue(const typename P::Params& p, const float (&tot)[kN / 2],
    void* __restrict__ Y, float* __restrict__ part, int M, int N, int32_t yDtype, int m0, const int (&nRow)[2],
    const bool (&nOk)[2], int t, int mLo = 0)
{
    // kLo (the grouped launch, moeProjKernel.cuh): only rows m >= mLo are stored too; the tile's rows
    // before mLo are another expert's, computed here with this expert's weights and never stored.
    // Epilogue: thread (g, t) of warp wq holds weight rows nRow[hr] for tokens m0 + 8 j + 2 t + e.
    if (part != nullptr)
    {
        // Split: this slice's sum (0 + acc_z) for wgReduceKernel, which folds the slices in order.
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
                    if (nOk[hr] && m < M)
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
                if (m < M && (!kLo || m >= mLo))
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
}

/*
 * The consumer warpgroups' part of projWgmmaKernel, register path (WgSmemCodes false). Per block, in slice order: wait for its stage,
 * issue the 8 wgmmas (one group) on the A fragments dequantized during the previous block, dequantize
 * the next block's fragments into the other of two register sets while they run (its codes were
 * loaded two blocks ahead), wait, release the stage, fold the running slice into the sum after a
 * slice's last block. The sum lives in shared memory (this thread's column), which pays for the
 * second fragment set; no register the tensor cores read is written before the wait.
 */
template <class P, int kN, int kST, bool kLo = false>
__device__ __forceinline__ void consumeWgmmaRegs(const typename P::Params& p, uint8_t* smem, uint64_t* full,
    uint64_t* empty, const uint8_t* table, void* __restrict__ Y, float* __restrict__ part, int M, int N, int K,
    int32_t yDtype, int slices, int nkb, int m0, int n0, int mLo = 0)
{
#ifdef METRALE_SM90A
    using L = WgLayout<P, kN, kST>;
    constexpr int kCW = P::kCB / 16;  // code words per thread per weight row per block
    constexpr int kCV = kCW / 4;      // 16-byte loads of them
    constexpr int kACC = kN / 2;      // accumulators per thread: kN / 8 n8 column tiles x 4
    const int tid = threadIdx.x;
    const int warpId = tid >> 5;
    const int lane = tid & 31;
    // Warp wq of warpgroup wg holds weight rows n0 + 64 wg + 16 wq + (0..15).
    const int wg = warpId >> 2;
    const int wq = warpId & 3;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int nBase = n0 + 64 * wg + 16 * wq;
    const int rowBytes = K * P::kCODE_BITS / 8;
    const int cEnd = rowBytes - t * (P::kCB / 4);
    int nRow[2];
    bool nOk[2];
    const uint8_t* cRow[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
    {
        nRow[hr] = nBase + g + 8 * hr;
        nOk[hr] = nRow[hr] < N;
        cRow[hr] = p.codes + static_cast<long long>(nOk[hr] ? nRow[hr] : 0) * rowBytes + t * (P::kCB / 4);
    }
    struct Slot
    {
        uint4 c[2][kCV];
        typename P::StreamMeta m[2];
    };
    auto load = [&](Slot& s, int kb) {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
        {
#pragma unroll
            for (int v = 0; v < kCV; ++v)
            {
                const int off = kb * P::kCB + 16 * v;
                s.c[hr][v] = (nOk[hr] && off < cEnd) ? ldgStream(cRow[hr] + off) : make_uint4(0u, 0u, 0u, 0u);
            }
            s.m[hr] = P::loadStreamMeta(p, t, kb, nRow[hr], nOk[hr]);
        }
    };
    // A block's codes as the policy's dequant takes them, and its scale state.
    struct Deq
    {
        uint32_t codes[2][kCW];
        typename P::BlockState bs[2];
    };
    auto prepare = [&](const Slot& rs, Deq& d) {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
        {
#pragma unroll
            for (int v = 0; v < kCV; ++v)
            {
                d.codes[hr][4 * v + 0] = rs.c[hr][v].x;
                d.codes[hr][4 * v + 1] = rs.c[hr][v].y;
                d.codes[hr][4 * v + 2] = rs.c[hr][v].z;
                d.codes[hr][4 * v + 3] = rs.c[hr][v].w;
            }
            d.bs[hr] = P::streamState(p, rs.m[hr]);
        }
    };
    // The A fragment of step s (the policy's dequant, as in every tier).
    auto dequantStep = [&](const Deq& d, int s, uint32_t (&a)[4]) {
        P::dequant(d.codes[0], d.bs[0], s, table, lane, a[0], a[2]);
        P::dequant(d.codes[1], d.bs[1], s, table, lane, a[1], a[3]);
    };

    // The running slice in registers; the sum of the finished slices in shared memory (this thread's
    // column of totS), which frees the registers for two sets of A fragments.
    float cur[kACC];
    float* totS = reinterpret_cast<float*>(smem + L::kTot) + tid;
#pragma unroll
    for (int i = 0; i < kACC; ++i)
    {
        cur[i] = 0.0f;
        totS[i * 128 * kWG_CONSUMERS] = 0.0f;
    }
    SliceCursor ldCur(nkb, slices);  // the next block to load into the ring
    SliceCursor cmCur(nkb, slices);  // the next block to compute
    int nWalk = nkb;                 // blocks this CTA walks: all, or its slice's (split)
    if (part != nullptr)
    {
        ldCur.seek(blockIdx.z);
        cmCur.seek(blockIdx.z);
        nWalk = cmCur.cnt;
    }
    Slot ring[2];  // the codes of blocks i + 1 and i + 2 while block i runs
    int loaded = 0;
    auto loadNext = [&](Slot& s) {
        if (loaded < nWalk)
        {
            load(s, ldCur.block());
            ldCur.next();
            ++loaded;
        }
    };
    loadNext(ring[0]);
    loadNext(ring[1]);
    uint32_t aA[8][4];  // A fragments: block i in one set, block i + 1 dequantized into the other
    uint32_t aB[8][4];
    {
        Deq d;
        prepare(ring[0], d);
#pragma unroll
        for (int s = 0; s < 8; ++s)
        {
            dequantStep(d, s, aA[s]);
        }
    }
    ring[0] = ring[1];
    loadNext(ring[1]);

    const uint32_t stage0 = smemAddr(smem);
    int slot = 0;
    uint32_t phase = 0;
    // One block on the fragments `a` while the next block's go into `an` (no register the tensor
    // cores read is written before the wait), then release the stage and fold at a slice's end.
    auto step = [&](const uint32_t (&a)[8][4], uint32_t (&an)[8][4]) {
        const bool last = cmCur.lastOfSlice();
        cmCur.next();
        Deq d;  // block i + 1 (stale codes past the last block: dequantized, never issued)
        prepare(ring[0], d);
        mbarWait(&full[slot], phase);
        fenceRegs(cur);
        wgFence();
        const uint64_t desc = wgDescB(stage0 + slot * L::kStage);
#pragma unroll
        for (int s = 0; s < 8; ++s)
        {
            WgmmaRS<P::kF16, kN>::run(cur, a[s], desc + static_cast<uint64_t>(16 * s));  // + 256 s bytes
        }
        wgCommit();
#pragma unroll
        for (int s = 0; s < 8; ++s)
        {
            dequantStep(d, s, an[s]);
        }
        ring[0] = ring[1];
        loadNext(ring[1]);
        wgWait<0>();
        fenceRegs(cur);
        if (lane == 0)
        {
            mbarArrive(&empty[slot]);
        }
        if (last)
        {
#pragma unroll
            for (int e = 0; e < kACC; ++e)
            {
                float& tv = totS[e * 128 * kWG_CONSUMERS];
                tv = __fadd_rn(tv, cur[e]);
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
    for (int i = 0; i < nWalk; i += 2)
    {
        step(aA, aB);
        if (i + 1 < nWalk)
        {
            step(aB, aA);
        }
    }
    // The walk's last block ends the last slice: totS holds the sum.
    float tot[kACC];
#pragma unroll
    for (int e = 0; e < kACC; ++e)
    {
        tot[e] = totS[e * 128 * kWG_CONSUMERS];
    }

    wgEpilogue<P, kN, kLo>(p, tot, Y, part, M, N, yDtype, m0, nRow, nOk, t, mLo);
#endif
}

/*
 * The consumer warpgroups' part of projWgmmaKernel. Per block, in slice order: issue the 8 wgmmas
 * (one group) on the A fragments dequantized during the previous block, then wait for the next
 * block's stage and dequantize its codes and meta (from shared memory, copied there by the producer
 * warpgroup) into the other of two register sets while the wgmmas run, wait for them, release the
 * stage, fold the running slice into the sum after a slice's last block. No global load is in flight
 * at a wgmma's WARPGROUP.ARRIVE (which would wait for it): the codes and meta reach the consumers
 * through shared memory only. The sum lives in shared memory (this thread's column), which pays for
 * the second fragment set; no register the tensor cores read is written before the wait.
 */
template <class P, int kN, int kST>
__device__ __forceinline__ void consumeWgmma(const typename P::Params& p, uint8_t* smem, uint64_t* full,
    uint64_t* empty, const uint8_t* table, void* __restrict__ Y, float* __restrict__ part, int M, int N, int K,
    int32_t yDtype, int slices, int nkb, int m0, int n0)
{
#ifdef METRALE_SM90A
    using L = WgLayout<P, kN, kST>;
    constexpr int kCW = P::kCB / 16;  // code words per thread per weight row per block
    constexpr int kCV = kCW / 4;      // 16-byte chunks of them
    constexpr int kACC = kN / 2;      // accumulators per thread: kN / 8 n8 column tiles x 4
    const int tid = threadIdx.x;
    const int warpId = tid >> 5;
    const int lane = tid & 31;
    // Warp wq of warpgroup wg holds weight rows n0 + 64 wg + 16 wq + (0..15).
    const int wg = warpId >> 2;
    const int wq = warpId & 3;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int rBase = 64 * wg + 16 * wq + g;  // the CTA row of hr = 0
    int nRow[2];
    bool nOk[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
    {
        nRow[hr] = n0 + rBase + 8 * hr;
        nOk[hr] = nRow[hr] < N;
    }
    // A block's codes as the policy's dequant takes them, and its scale state.
    struct Deq
    {
        uint32_t codes[2][kCW];
        typename P::BlockState bs[2];
    };
    // Block kb's codes and meta from the stage at st (smem offset), as the shared-memory tiers do.
    auto fetch = [&](int st, int kb, Deq& d) {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
        {
            const int r = rBase + 8 * hr;
#pragma unroll
            for (int v = 0; v < kCV; ++v)
            {
                const uint4 c4 = *reinterpret_cast<const uint4*>(smem + st + L::kCodes + v * (kWG_ROWS * 64) + r * 64 + t * 16);
                d.codes[hr][4 * v + 0] = c4.x;
                d.codes[hr][4 * v + 1] = c4.y;
                d.codes[hr][4 * v + 2] = c4.z;
                d.codes[hr][4 * v + 3] = c4.w;
            }
            d.bs[hr] = P::blockState(p, reinterpret_cast<const uint32_t*>(smem + st + L::kMeta) + r * P::kMW, t, kb,
                nRow[hr]);
        }
    };
    // The A fragment of step s (the policy's dequant, as in every tier).
    auto dequantStep = [&](const Deq& d, int s, uint32_t (&a)[4]) {
        P::dequant(d.codes[0], d.bs[0], s, table, lane, a[0], a[2]);
        P::dequant(d.codes[1], d.bs[1], s, table, lane, a[1], a[3]);
    };

    // The running slice in registers; the sum of the finished slices in shared memory (this thread's
    // column of totS), which frees the registers for two sets of A fragments.
    float cur[kACC];
    float* totS = reinterpret_cast<float*>(smem + L::kTot) + tid;
#pragma unroll
    for (int i = 0; i < kACC; ++i)
    {
        cur[i] = 0.0f;
        totS[i * 128 * kWG_CONSUMERS] = 0.0f;
    }
    SliceCursor ldCur(nkb, slices);  // the next block to dequantize
    SliceCursor cmCur(nkb, slices);  // the next block to compute
    int nWalk = nkb;                 // blocks this CTA walks: all, or its slice's (split)
    if (part != nullptr)
    {
        ldCur.seek(blockIdx.z);
        cmCur.seek(blockIdx.z);
        nWalk = cmCur.cnt;
    }
    uint32_t aA[8][4];  // A fragments: block i in one set, block i + 1 dequantized into the other
    uint32_t aB[8][4];
    mbarWait(&full[0], 0u);
    {
        Deq d;
        fetch(0, ldCur.block(), d);
        ldCur.next();
#pragma unroll
        for (int s = 0; s < 8; ++s)
        {
            dequantStep(d, s, aA[s]);
        }
    }

    const uint32_t stage0 = smemAddr(smem);
    int slot = 0;
    uint32_t phase = 0;
    int i = 0;
    // Block i on the fragments `a` (its stage's full barrier was waited for when its codes were
    // read) while block i + 1's go into `an`, then release the stage and fold at a slice's end.
    auto step = [&](const uint32_t (&a)[8][4], uint32_t (&an)[8][4]) {
        const bool last = cmCur.lastOfSlice();
        cmCur.next();
        fenceRegs(cur);
        wgFence();
        const uint64_t desc = wgDescB(stage0 + slot * L::kStage);
#pragma unroll
        for (int s = 0; s < 8; ++s)
        {
            WgmmaRS<P::kF16, kN>::run(cur, a[s], desc + static_cast<uint64_t>(16 * s));  // + 256 s bytes
        }
        wgCommit();
        const int nslot = slot + 1 == kST ? 0 : slot + 1;
        const uint32_t nphase = slot + 1 == kST ? phase ^ 1u : phase;
        if (i + 1 < nWalk)
        {
            mbarWait(&full[nslot], nphase);
            Deq d;
            fetch(nslot * L::kStage, ldCur.block(), d);
            ldCur.next();
#pragma unroll
            for (int s = 0; s < 8; ++s)
            {
                dequantStep(d, s, an[s]);
            }
        }
        wgWait<0>();
        fenceRegs(cur);
        if (lane == 0)
        {
            mbarArrive(&empty[slot]);
        }
        if (last)
        {
#pragma unroll
            for (int e = 0; e < kACC; ++e)
            {
                float& tv = totS[e * 128 * kWG_CONSUMERS];
                tv = __fadd_rn(tv, cur[e]);
                cur[e] = 0.0f;
            }
        }
        slot = nslot;
        phase = nphase;
        ++i;
    };
#pragma unroll 1
    while (i < nWalk)
    {
        step(aA, aB);
        if (i < nWalk)
        {
            step(aB, aA);
        }
    }
    // The walk's last block ends the last slice: totS holds the sum.
    float tot[kACC];
#pragma unroll
    for (int e = 0; e < kACC; ++e)
    {
        tot[e] = totS[e * 128 * kWG_CONSUMERS];
    }

    wgEpilogue<P, kN>(p, tot, Y, part, M, N, yDtype, m0, nRow, nOk, t);
#endif
}

/*
 * The deep variant of consumeWgmma (METRALE_W4A16_WG=deep, launchProjWgmma): the same arithmetic in
 * the same k order (each slice from +0 over its blocks in ascending order, steps s = 0..7 of each, one
 * wgmma m64nNk16 a step; the slices folded from the left with __fadd_rn), only scheduled deeper.
 * Per step: dequantize the step's A fragment into slot s % kWG_RING of a small ring, wgmma.fence,
 * the wgmma, commit it as a group of its own and wait until at most kWG_RING - 1 groups are pending
 * (so the slot written next is free), which keeps kWG_RING - 1 wgmmas in flight across the 128-k
 * blocks. A block's stage is released once its last wgmma is known done (after step 2 of the next
 * block's, or at the slice's end). The slices' sum is in registers (no shared-memory sum: more
 * stages), and the pipe drains (wait_group 0) only at a slice's end, outside the blocks' loop.
 */
constexpr int kWG_RING = 4;  // A-fragment slots (a divisor of 8: the slot is a constant per step)

template <class P, int kN, int kST, bool kLo = false>
__device__ __forceinline__ void consumeWgmmaDeep(const typename P::Params& p, uint8_t* smem, uint64_t* full,
    uint64_t* empty, const uint8_t* table, void* __restrict__ Y, float* __restrict__ part, int M, int N, int K,
    int32_t yDtype, int slices, int nkb, int m0, int n0, int& slot, uint32_t& phase, int mLo = 0)
{
#ifdef METRALE_SM90A
    using L = WgLayout<P, kN, kST, true>;
    constexpr int kCW = P::kCB / 16;  // code words per thread per weight row per block
    constexpr int kCV = kCW / 4;      // 16-byte chunks of them
    constexpr int kACC = kN / 2;      // accumulators per thread: kN / 8 n8 column tiles x 4
    const int tid = threadIdx.x;
    const int warpId = tid >> 5;
    const int lane = tid & 31;
    // Warp wq of warpgroup wg holds weight rows n0 + 64 wg + 16 wq + (0..15).
    const int wg = warpId >> 2;
    const int wq = warpId & 3;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int rBase = 64 * wg + 16 * wq + g;  // the CTA row of hr = 0
    int nRow[2];
    bool nOk[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
    {
        nRow[hr] = n0 + rBase + 8 * hr;
        nOk[hr] = nRow[hr] < N;
    }
    // A block's codes as the policy's dequant takes them, and its scale state.
    struct Deq
    {
        uint32_t codes[2][kCW];
        typename P::BlockState bs[2];
    };
    // Block kb's codes and meta from the stage at st (smem offset), as the shared-memory tiers do.
    auto fetch = [&](int st, int kb, Deq& d) {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
        {
            const int r = rBase + 8 * hr;
#pragma unroll
            for (int v = 0; v < kCV; ++v)
            {
                const uint4 c4 = *reinterpret_cast<const uint4*>(smem + st + L::kCodes + v * (kWG_ROWS * 64) + r * 64 + t * 16);
                d.codes[hr][4 * v + 0] = c4.x;
                d.codes[hr][4 * v + 1] = c4.y;
                d.codes[hr][4 * v + 2] = c4.z;
                d.codes[hr][4 * v + 3] = c4.w;
            }
            d.bs[hr] = P::blockState(p, reinterpret_cast<const uint32_t*>(smem + st + L::kMeta) + r * P::kMW, t, kb,
                nRow[hr]);
        }
    };
    // The A fragment of step s (the policy's dequant, as in every tier).
    auto dequantStep = [&](const Deq& d, int s, uint32_t (&a)[4]) {
        P::dequant(d.codes[0], d.bs[0], s, table, lane, a[0], a[2]);
        P::dequant(d.codes[1], d.bs[1], s, table, lane, a[1], a[3]);
    };

    static_assert(8 % kWG_RING == 0 && kWG_RING >= 3, "ring slots");
    float cur[kACC];  // the running slice
    float tot[kACC];  // the sum of the finished slices, ((0 + acc_0) + acc_1) + ...
#pragma unroll
    for (int i = 0; i < kACC; ++i)
    {
        cur[i] = 0.0f;
        tot[i] = 0.0f;
    }
    SliceCursor sc(nkb, slices);  // its q, r: the blocks of a slice
    int zBegin = 0;
    int zEnd = slices;
    if (part != nullptr)
    {
        zBegin = static_cast<int>(blockIdx.z);
        zEnd = zBegin + 1;
    }
    const uint32_t stage0 = smemAddr(smem);
    uint32_t ring[kWG_RING][4];
#pragma unroll 1
    for (int z = zBegin; z < zEnd; ++z)
    {
        const int cnt = sc.q + (z < sc.r ? 1 : 0);
        int prev = -1;  // the stage of the previous block of this slice, not yet released
#pragma unroll 1
        for (int j = 0; j < cnt; ++j)
        {
            const int kb = z + slices * j;
            mbarWait(&full[slot], phase);
            Deq d;
            fetch(slot * L::kStage, kb, d);
            const uint64_t desc = wgDescB(stage0 + slot * L::kStage);
#pragma unroll
            for (int s = 0; s < 8; ++s)
            {
                dequantStep(d, s, ring[s % kWG_RING]);
                wgFence();
                WgmmaRS<P::kF16, kN>::run(cur, ring[s % kWG_RING], desc + static_cast<uint64_t>(16 * s));
                wgCommit();
                wgWait<kWG_RING - 1>();
                if (s == kWG_RING - 2 && prev >= 0 && lane == 0)
                {
                    mbarArrive(&empty[prev]);  // the previous block's 8 wgmmas are done
                }
            }
            prev = slot;
            if (++slot == kST)
            {
                slot = 0;
                phase ^= 1u;
            }
        }
        wgWait<0>();
        fenceRegs(cur);
        if (lane == 0)
        {
            mbarArrive(&empty[prev]);
        }
#pragma unroll
        for (int e = 0; e < kACC; ++e)
        {
            tot[e] = __fadd_rn(tot[e], cur[e]);
            cur[e] = 0.0f;
        }
        fenceRegs(cur);
    }
    wgEpilogue<P, kN, kLo>(p, tot, Y, part, M, N, yDtype, m0, nRow, nOk, t, mLo);
#endif
}

/*
 * The producer warpgroup, all 128 threads: per block in slice order, wait for the stage to be free;
 * thread 0 starts the activations' bulk copy (expect_tx on the stage's full barrier); every thread
 * copies kWG_ROWS * kCB / 2048 of the weight tile's 16-byte code chunks (its fixed chunk j of rows
 * pt / kCH + (128 / kCH) i: whole rows of a block are contiguous 64 or 128 bytes in global memory;
 * bytes past the row's end and rows past N zero-filled, as the register ring's loads were) and the
 * meta words of row pt (P::metaSrc, zero-filled where it gives none, as the shared-memory tiers
 * stage them), and arrives on the full barrier when they land (cp.async.mbarrier.arrive.noinc).
 */
template <class P, int kN, int kST, bool kDeep = false>
__device__ __forceinline__ void produceWgmma(const typename P::Params& p, const uint8_t* __restrict__ Xw,
    uint8_t* smem, uint64_t* full, uint64_t* empty, bool split, int mg, int N, int K, int slices, int nkb, int m0,
    int n0, int& slot, uint32_t& phase, int& filled)
{
#ifdef METRALE_SM90A
    using L = WgLayout<P, kN, kST, kDeep>;
    constexpr int kCH = P::kCB / 16;   // 16-byte chunks per row per block
    constexpr int kCV = kCH / 4;       // of them per quad lane
    constexpr int kRS = 128 / kCH;     // rows between one thread's chunks
    constexpr int kCI = kWG_ROWS / kRS;
    static_assert(kWG_ROWS == 128, "one producer thread per weight row for the meta");
    const int pt = threadIdx.x - 128 * kWG_CONSUMERS;
    const int j = pt % kCH;
    const int r0 = pt / kCH;
    const int rowBytes = K * P::kCODE_BITS / 8;
    const uint8_t* cSrc = p.codes + static_cast<long long>(n0 + r0) * rowBytes + 16 * j;
    const long long cStride = static_cast<long long>(kRS) * rowBytes;
    const int cRows = N - n0 - r0 > 0 ? (N - n0 - r0 + kRS - 1) / kRS : 0;  // chunks c with row r0 + kRS c < N - n0
    const int dOff = L::kCodes + (j % kCV) * (kWG_ROWS * 64) + r0 * 64 + (j / kCV) * 16;
    const int rows = min(kN, 8 * mg - m0);
    const uint32_t bytesB = static_cast<uint32_t>(rows) * 256u;
    SliceCursor cur(nkb, slices);
    int nWalk = nkb;
    if (split)
    {
        cur.seek(blockIdx.z);
        nWalk = cur.cnt;
    }
    for (int i = 0; i < nWalk; ++i)
    {
        if (filled >= kST)
        {
            mbarWait(&empty[slot], phase ^ 1u);
        }
        const int kb = cur.block();
        uint8_t* st = smem + slot * L::kStage;
        if (pt == 0)
        {
            mbarExpectTx(&full[slot], bytesB);
            bulkCopy(st, Xw + (static_cast<size_t>(kb) * mg + (m0 >> 3)) * 2048, bytesB, &full[slot]);
        }
        // Chunk c is valid for c < nOk (rows inside N; none past the row's end).
        const int nOk = kb * P::kCB + 16 * j < rowBytes ? cRows : 0;
        const uint8_t* src = cSrc + kb * P::kCB;
#pragma unroll
        for (int c = 0; c < kCI; ++c)
        {
            cpAsync16(st + dOff + kRS * c * 64, c < nOk ? src : p.codes, c < nOk ? 16 : 0);
            src += cStride;
        }
        if constexpr (P::kMW > 0)
        {
            uint32_t* ms = reinterpret_cast<uint32_t*>(st + L::kMeta) + pt * P::kMW;
#pragma unroll
            for (int w = 0; w < P::kMW; ++w)
            {
                if (!P::metaUsed(p, w))
                {
                    continue;  // a word this launch never reads
                }
                const void* src = p.codes;
                int bytes = 0;
                if (n0 + pt < N)
                {
                    P::metaSrc(p, n0 + pt, kb, w, src, bytes);
                }
                cpAsync4(ms + w, src, bytes);
            }
        }
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smemAddr(&full[slot])) : "memory");
        cur.next();
        ++filled;
        if (++slot == kST)
        {
            slot = 0;
            phase ^= 1u;
        }
    }
#endif
}

template <class P, int kN, int kST, bool kDeep = false, bool kPersist = false>
__global__ void __launch_bounds__(kWG_THREADS, 1) projWgmmaKernel(const typename P::Params p,
    const uint8_t* __restrict__ Xw, void* __restrict__ Y, float* __restrict__ part, int M, int N, int K,
    int32_t yDtype, int slices)
{
#ifdef METRALE_SM90A
    static_assert(!kPersist || (kDeep && WgSmemCodes<P>::value), "persistent CTAs: the deep shared-memory path");
    if constexpr (WgSmemCodes<P>::value)
    {
        using L = WgLayout<P, kN, kST, kDeep>;
        extern __shared__ __align__(128) uint8_t smem[];  // 16-byte alignment suffices (no swizzle)
        uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::kBar);
        uint64_t* empty = full + kST;
        uint8_t* table = smem + L::kTable;

        const int tid = threadIdx.x;
        const int warpId = tid >> 5;
        const int nkb = (K + 127) >> 7;
        const int mg = (M + 7) >> 3;
        int m0 = 0;  // the raster: groups of kWG_RASTER token tiles, token tile fastest
        int n0 = 0;
        // kPersist: gridDim.x CTAs walk the raster's tile ids blockIdx.x, + gridDim.x, ... (gx weight
        // tiles x gy token tiles; never split), the ring's slot and phase carried from tile to tile, so
        // the next tile's first stages fill under this tile's last blocks and its epilogue; else one
        // tile a CTA.
        const int gx = (N + kWG_ROWS - 1) / kWG_ROWS;
        const int gy = (M + kN - 1) / kN;
        if constexpr (!kPersist)
        {
            wgRasterTile(kN, m0, n0);
        }
        wgRingInit<P, kST>(full, empty, 1 + 128, table);  // the bulk copy's expect_tx arrival + 128 cp.async arrivals

        if (warpId >= 4 * kWG_CONSUMERS)
        {
            // The producer: the token tile's activations, the weight tile's codes and meta, in slice order.
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWG_PRODUCER_REGS));
            int slot = 0;
            uint32_t phase = 0;
            int filled = 0;
            if constexpr (kPersist)
            {
                for (int tile = static_cast<int>(blockIdx.x); tile < gx * gy; tile += static_cast<int>(gridDim.x))
                {
                    wgRasterTileAt(tile, gx, gy, kN, m0, n0, kWG_ROWS);
                    produceWgmma<P, kN, kST, kDeep>(p, Xw, smem, full, empty, false, mg, N, K, slices, nkb, m0, n0,
                        slot, phase, filled);
                }
            }
            else
            {
                produceWgmma<P, kN, kST, kDeep>(p, Xw, smem, full, empty, part != nullptr, mg, N, K, slices, nkb, m0,
                    n0, slot, phase, filled);
            }
            asm volatile("cp.async.wait_all;\n" ::: "memory");
        }
        else
        {
            asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kWG_CONSUMER_REGS));
            if constexpr (kPersist)
            {
                int slot = 0;
                uint32_t phase = 0;
                for (int tile = static_cast<int>(blockIdx.x); tile < gx * gy; tile += static_cast<int>(gridDim.x))
                {
                    wgRasterTileAt(tile, gx, gy, kN, m0, n0, kWG_ROWS);
                    consumeWgmmaDeep<P, kN, kST>(p, smem, full, empty, table, Y, nullptr, M, N, K, yDtype, slices, nkb,
                        m0, n0, slot, phase);
                }
            }
            else if constexpr (kDeep)
            {
                int slot = 0;
                uint32_t phase = 0;
                consumeWgmmaDeep<P, kN, kST>(p, smem, full, empty, table, Y, part, M, N, K, yDtype, slices, nkb, m0,
                    n0, slot, phase);
            }
            else
            {
                consumeWgmma<P, kN, kST>(p, smem, full, empty, table, Y, part, M, N, K, yDtype, slices, nkb, m0,
                    n0);
            }
        }
    }
    else
    {
        // The register path: the codes and meta streamed by the consumers, CTAs in grid order.
        using L = WgLayout<P, kN, kST>;
        extern __shared__ __align__(128) uint8_t smem[];  // 16-byte alignment suffices (no swizzle)
        uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::kBar);
        uint64_t* empty = full + kST;
        uint8_t* table = smem + L::kTable;

        const int tid = threadIdx.x;
        const int warpId = tid >> 5;
        const int nkb = (K + 127) >> 7;
        const int mg = (M + 7) >> 3;
        const int m0 = blockIdx.y * kN;
        const int n0 = blockIdx.x * kWG_ROWS;
        wgRingInit<P, kST>(full, empty, 1, table);  // the bulk copy's expect_tx arrival

        if (warpId >= 4 * kWG_CONSUMERS)
        {
            // The producer: one thread copies the token tile's blocks in slice order.
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWG_PRODUCER_REGS_R));
            if (tid == 128 * kWG_CONSUMERS)
            {
                const int rows = min(kN, 8 * mg - m0);
                const uint32_t bytes = static_cast<uint32_t>(rows) * 256u;
                SliceCursor cur(nkb, slices);
                int nWalk = nkb;
                if (part != nullptr)
                {
                    cur.seek(blockIdx.z);
                    nWalk = cur.cnt;
                }
                produceStages<kST>(cur, nWalk, full, empty, [&](int slot, int kb) {
                    mbarExpectTx(&full[slot], bytes);
                    const uint8_t* src = Xw + (static_cast<size_t>(kb) * mg + (m0 >> 3)) * 2048;
                    bulkCopy(smem + slot * L::kStage, src, bytes, &full[slot]);
                });
            }
        }
        else
        {
            asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kWG_CONSUMER_REGS_R));
            consumeWgmmaRegs<P, kN, kST>(p, smem, full, empty, table, Y, part, M, N, K, yDtype, slices, nkb, m0, n0);
        }
    }
#else
    __trap();  // launched only where wgmmaAvailable() found sm_90a machine code
#endif
}

/* Token tile: a function of m and the weight's shape (never of the bits). 128 rows when that still
 * gives a wave of CTAs, else 64. */
inline int wgTokenTile(int64_t m, int64_t n)
{
    const int64_t ctas128 = ((n + kWG_ROWS - 1) / kWG_ROWS) * ((m + 127) / 128);
    return (m > 64 && ctas128 >= 132) ? 128 : 64;
}

/*
 * Whether the slices go to CTAs of their own (grid.z = slices), where the tile grid alone would fill
 * its waves of 132 CTAs (one per SM) less than 70%: each CTA sums its slice from +0 and writes it to
 * the float32 buffer `part` [slices, m, n]; wgReduceKernel then folds them per element in slice order,
 * from +0, as the single-CTA walk does, so the bits are the same. A layout choice of (m, n, k) only.
 * Measured on the H200 (benchmarks/results/kernels-20261201-0905-637bff1.md): the split wins
 * 1.4-2.7x on 24-61% full grids (8B-down / 8B-qkv / 32B-down at M = 64, 32B-down at M = 256) and loses
 * up to 1.4x on nearly full ones (the buffer's traffic and the per-CTA prologue).
 */
inline bool wgSplit(int64_t m, int64_t n, int64_t k)
{
    const int64_t tn = wgTokenTile(m, n);
    const int64_t ctas = ((n + kWG_ROWS - 1) / kWG_ROWS) * ((m + tn - 1) / tn);
    const int64_t waves = (ctas + 131) / 132;
    return projSlices(n, k) > 1 && ctas * 10 < waves * 132 * 7;
}

/* Workspace bytes of the split's slice sums (0 where the tier does not split). */
inline size_t wgPartBytes(int64_t m, int64_t n, int64_t k)
{
    if (!wgmmaTierFor(m) || !wgSplit(m, n, k))
    {
        return 0;
    }
    return (static_cast<size_t>(projSlices(n, k)) * m * n * 4 + 255) / 256 * 256;
}

/* y = finish(((0 + part_0) + part_1) + ...) (+ bias), per element, rounded to y's dtype. */
template <class P>
__global__ void __launch_bounds__(256) wgReduceKernel(const typename P::Params p, const float* __restrict__ part,
    void* __restrict__ Y, int M, int N, int slices, int32_t yDtype)
{
    const size_t total = static_cast<size_t>(M) * N;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
    {
        float v = 0.0f;
        for (int s = 0; s < slices; ++s)
        {
            v = __fadd_rn(v, part[s * total + i]);
        }
        const int m = static_cast<int>(i / N);
        const int n = static_cast<int>(i - static_cast<size_t>(m) * N);
        v = P::finish(p, v, m, n);
        if (p.bias != nullptr)
        {
            v = __fadd_rn(v, p.bias[n]);
        }
        storeY(Y, yDtype, i, v);
    }
}

/* The device's SMs (132 where the runtime does not say). */
inline int wgSms()
{
    int dev = 0;
    int sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess
        || sms <= 0)
    {
        sms = 132;
    }
    return sms;
}

/* The CTAs of a persistent launch (kPersist, here and in projWgmmaFp8.cuh): one an SM (the kernels' shared
 * memory allows one), at most the tiles. A function of the device and the shape, never of the bits:
 * every tile is computed alike whichever CTA walks it. */
inline int wgPersistentCtas(int tiles)
{
    const int sms = wgSms();
    return tiles < sms ? tiles : sms;
}

template <class P, int kN, int kST, bool kDeep = false, bool kPersist = false>
inline cudaError_t launchProjWgmmaN(const typename P::Params& p, const uint16_t* Xw, void* y, float* part, int m,
    int n, int k, int32_t yDtype, int slices, cudaStream_t stream)
{
    using L = WgLayout<P, kN, kST, kDeep>;
    auto kern = projWgmmaKernel<P, kN, kST, kDeep, kPersist>;
    cudaError_t e = raiseSmemOnce<projWgmmaKernel<P, kN, kST, kDeep, kPersist>>(L::kSmem);
    if (e != cudaSuccess)
    {
        return e;
    }
    const int gx = (n + kWG_ROWS - 1) / kWG_ROWS;
    const int gy = (m + kN - 1) / kN;
    const dim3 grid = kPersist ? dim3(wgPersistentCtas(gx * gy), 1, 1) : dim3(gx, gy, part != nullptr ? slices : 1);
    kern<<<grid, kWG_THREADS, L::kSmem, stream>>>(p, reinterpret_cast<const uint8_t*>(Xw), y, part, m, n, k, yDtype,
        slices);
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

/* Which mainloop the deep-capable consumers (WgDeep: W4A16) run, read at each call from
 * METRALE_W4A16_WG: "base" the base one (consumeWgmma), anything else or unset the deep one
 * (consumeWgmmaDeep, 3-7% faster at M >= 64 on the H200: w4a16-variants-20261202-0333-6c93393.md).
 * Both give the same bits (the same arithmetic in the same order); a speed choice for the benchmark. */
inline bool wgDeepMainloop()
{
    const char* v = std::getenv("METRALE_W4A16_WG");
    return v == nullptr || std::strcmp(v, "base") != 0;
}

/* The deep launch's schedule, read at each call from METRALE_W4A16_WG (the same tiles in the same k
 * order whatever it says: the same bits). The default (unset or anything not below): CTAs persistent
 * (kPersist) where the tiles outnumber the SMs, the token tile at m > 64 from the SMs' rounds
 * (wgDeepTokenTile). "persist": persistent, wgTokenTile's tile (5ad8fe6's default); "deep": one tile a
 * CTA, wgTokenTile's tile (the kernel before that); "t64", "t128": persistent, the tile at m > 64 forced
 * (measurements for the tile's rule). */
struct WgDeepSchedule
{
    bool persist = true;
    int tile = 0;        // 64 / 128: forced at m > 64
    bool rounds = true;  // wgDeepTokenTile (else wgTokenTile)
};

inline WgDeepSchedule wgDeepVariant()
{
    const char* v = std::getenv("METRALE_W4A16_WG");
    WgDeepSchedule s;
    if (v == nullptr)
    {
        return s;
    }
    if (std::strcmp(v, "deep") == 0)
    {
        s.persist = false;
        s.rounds = false;
    }
    else if (std::strcmp(v, "persist") == 0)
    {
        s.rounds = false;
    }
    else if (std::strcmp(v, "t64") == 0)
    {
        s.tile = 64;
    }
    else if (std::strcmp(v, "t128") == 0)
    {
        s.tile = 128;
    }
    return s;
}

/* The deep tier's token tile without the split (a function of m, n and the device's SM count, never of
 * the bits: wgmma's bits do not depend on its N): 64 at m <= 64; above, 64 only where its tiles take no
 * more rounds of one-CTA-an-SM tiles than the 128 tile's, else 128. Measured on the H200
 * (w4a16-variants-20261204-1443-5ad8fe6.md, persistent CTAs): a 64-token CTA costs 0.7-0.8 of a 128 one
 * (the dequantization of its weight tile is the same), so 64 wins only at equal rounds (8B-down M = 256:
 * 81.4 us against 102.0; 8B-qkv M = 128: 29.8 against 38.1) and loses where it doubles them (8B-up M = 128:
 * 53.6 against 37.7, 8B-down M = 512: 161.1 against 115.8, 8B-qkv M = 256: 57.1 against 41.0). */
inline int wgDeepTokenTile(int64_t m, int64_t n)
{
    if (m <= 64)
    {
        return 64;
    }
    const int64_t sms = wgSms();
    const int64_t gx = (n + kWG_ROWS - 1) / kWG_ROWS;
    const int64_t rounds64 = (gx * ((m + 63) / 64) + sms - 1) / sms;
    const int64_t rounds128 = (gx * ((m + 127) / 128) + sms - 1) / sms;
    return rounds64 <= rounds128 ? 64 : 128;
}

/* The deep shared-memory launch of policy Q (WgDeep<Q>): the token tile of the schedule (wgDeepTokenTile
 * by default; wgTokenTile where the slices split, whose grid wgSplit sized), persistent CTAs where the
 * schedule asks and the tiles outnumber the SMs without the split (measured on the H200,
 * w4a16-variants-20261204-1423-21ec979.md: geomean of the best anchor at M = 64 / 256 / 1024 / 4096 1.03 /
 * 2.02 / 1.70 / 1.53 against one tile a CTA's 1.03 / 2.04 / 1.72 / 1.55). */
template <class Q>
inline cudaError_t launchProjWgmmaDeep(const typename Q::Params& p, const uint16_t* Xw, void* y, float* pb, int m,
    int n, int k, int32_t yDtype, int slices, cudaStream_t stream, WgDeepSchedule sched)
{
    const int tn = pb != nullptr ? wgTokenTile(m, n)
        : sched.tile != 0 && m > 64 ? sched.tile
        : sched.rounds ? wgDeepTokenTile(m, n) : wgTokenTile(m, n);
    const long long tiles = static_cast<long long>((n + kWG_ROWS - 1) / kWG_ROWS) * ((m + tn - 1) / tn);
    const bool pers = sched.persist && pb == nullptr && tiles > wgSms();
    if (tn == 128)
    {
        constexpr int kS = wgStages<Q, 128, 6, true>();
        return pers ? launchProjWgmmaN<Q, 128, kS, true, true>(p, Xw, y, pb, m, n, k, yDtype, slices, stream)
                    : launchProjWgmmaN<Q, 128, kS, true>(p, Xw, y, pb, m, n, k, yDtype, slices, stream);
    }
    constexpr int kS = wgStages<Q, 64, 8, true>();
    return pers ? launchProjWgmmaN<Q, 64, kS, true, true>(p, Xw, y, pb, m, n, k, yDtype, slices, stream)
                : launchProjWgmmaN<Q, 64, kS, true>(p, Xw, y, pb, m, n, k, yDtype, slices, stream);
}

/* The wgmma tier on the operand Xw (wgOperandOffset layout); part: the split's buffer
 * (wgPartBytes), used where wgSplit says so. */
template <class P>
inline cudaError_t launchProjWgmma(const typename P::Params& p, const uint16_t* Xw, void* y, void* part, int m, int n,
    int k, int32_t yDtype, int slices, cudaStream_t stream)
{
    float* pb = wgSplit(m, n, k) ? static_cast<float*>(part) : nullptr;
    if (pb == nullptr && wgSplit(m, n, k))
    {
        return cudaErrorInvalidValue;
    }
    if constexpr (WgDeep<P>::value)
    {
        if (wgDeepMainloop())
        {
            return launchProjWgmmaDeep<P>(p, Xw, y, pb, m, n, k, yDtype, slices, stream, wgDeepVariant());
        }
    }

    if (wgTokenTile(m, n) == 128)
    {
        return launchProjWgmmaN<P, 128, wgStages<P, 128, 4>()>(p, Xw, y, pb, m, n, k, yDtype, slices, stream);
    }
    return launchProjWgmmaN<P, 64, wgStages<P, 64, 6>()>(p, Xw, y, pb, m, n, k, yDtype, slices, stream);
}

/* Whether sm_90a machine code of kKern was loaded for this device (an sm_90 GPU with the library built
 * for sm_90a; a pure function of the device, cached per device and kernel). */
template <auto kKern>
inline bool sm90aKernelLoaded()
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
        const bool ok = cudaFuncGetAttributes(&a, kKern) == cudaSuccess
            && cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess;
        c = (ok && a.binaryVersion == 90 && major == 9) ? 1 : 2;
        (void) cudaGetLastError();
    }
    return c == 1;
}

/* Whether this device runs the wgmma tier. */
template <class P>
inline bool wgmmaAvailable()
{
    return sm90aKernelLoaded<projWgmmaKernel<P, 64, wgStages<P, 64, 6>()>>();
}

/* Whether m rows of policy P go to the wgmma tier (projTiers.h: wgmmaTierFor, and the device). */
template <class P>
inline bool useWgmma(int64_t m)
{
    if constexpr (P::kPER_BLOCK)
    {
        return false;
    }
    else
    {
        return wgmmaTierFor(m) && wgmmaAvailable<P>();
    }
}

/* The operand of the wgmma tier in the workspace: from x (any dtype, rounded to bf16), or raw
 * 16-bit values (kRaw: an f16 pre-pass result). */
template <bool kRaw>
inline cudaError_t wgOperand(const void* x, int32_t xDtype, int64_t m, int64_t k, void* dst, cudaStream_t stream)
{
    const int mg = static_cast<int>((m + 7) / 8);
    const int nkb = static_cast<int>((k + 127) / 128);
    wgOperandKernel<kRaw><<<mg * nkb, 128, 0, stream>>>(x, xDtype, static_cast<uint16_t*>(dst), static_cast<int>(m),
        static_cast<int>(k), mg);
    return cudaGetLastError();
}

} // namespace metrale

#endif // METRALE_PROJ_WGMMA_CUH
