/*
 * The one GEMM skeleton behind every metrale projection: y[m, n] = finish(sum_k x[m, k] * w[n, k]).
 *
 * x is a 16-bit operand (bf16, or f16 for the fp8 / nvfp4 activation formats, where every value is
 * exact in f16) of shape [M, K], row-major: the mma's B operand, one 16-byte shared-memory load per
 * two steps. w comes as packed codes that a weight policy `P` dequantizes in registers straight into
 * the mma's A fragment (16 weight rows). A tile configuration `C` fixes the CTA shape.
 *
 * Invariants (row invariance, docs/ops.md):
 * - The 128-k blocks form S slices (projTiers.h: projSlices(n, k), never a function of M): slice s
 *   holds the blocks b = s (mod S). Every slice is accumulated by mma.sync m16n8k16 (fp32
 *   accumulate) from zero over its blocks in ascending order, each block in steps s = 0..7; in step
 *   s quad lane t supplies k = 128*b + 32*t + 4*s + j (j = 0..3) at instruction positions 2t, 2t+1,
 *   2t+8, 2t+9, for both operands. The output is the slices' sum from the left, starting from +0:
 *   ((0 + acc_0) + acc_1) + ..., one float32 addition each. Here a warp walks the slices one
 *   after the other (two accumulator sets: the running slice and the sum); the streaming tier
 *   (projStream.cuh) gives each slice its own warp. Nothing of this depends on M, on the tile
 *   configuration or on where the row sits.
 * - Blocks past K are never issued (no padding mma); zero-filled tails inside the last block multiply
 *   zero activations by finite weights.
 * - Per-block scaling (fp8 block scales) is `acc_s = acc_s + (partial * row_scale) * col_scale` per
 *   block of slice s, per element; the final scale and bias are per element.
 * - Pipeline: cp.async multistage (global -> shared), one __syncthreads per stage.
 */
#ifndef METRALE_PROJ_GEMM_CUH
#define METRALE_PROJ_GEMM_CUH

#include <cstdint>
#include <type_traits>
#include <cuda_runtime.h>

#include "metraleNumerics.cuh"
#include "projTiers.h"

namespace metrale
{

__device__ __forceinline__ uint32_t smemAddr(const void* p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* 16 bytes of streamed weight codes: read once, not kept in L1. */
__device__ __forceinline__ uint4 ldgStream(const void* ptr)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ptr));
    return v;
}

/* 16-byte global -> shared copy; bytes past srcBytes are zero-filled. */
__device__ __forceinline__ void cpAsync16(void* dst, const void* src, int srcBytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smemAddr(dst)), "l"(src), "r"(srcBytes));
}

/* 4-byte global -> shared copy; bytes past srcBytes are zero-filled. */
__device__ __forceinline__ void cpAsync4(void* dst, const void* src, int srcBytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smemAddr(dst)), "l"(src), "r"(srcBytes));
}

__device__ __forceinline__ void cpAsyncCommit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}

template <int N>
__device__ __forceinline__ void cpAsyncWait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* d += a * b, m16n8k16, fp32 accumulate; f16 or bf16 operands. */
template <bool kF16>
__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
    uint32_t b0, uint32_t b1)
{
    if constexpr (kF16)
    {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    else
    {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
}

/*
 * CTA shape. Weights are the mma's A operand (m16: 16 weight rows), activations the B operand
 * (n8: 8 rows of x). kW_TILES m16 weight tiles per warp, kWARPS warps side by side along N, kX_TILES
 * n8 activation tiles (all warps share them), kKBS 128-k blocks per pipeline stage (consecutive in
 * slice order), kSTAGES stages.
 */
template <int kW_TILES_, int kX_TILES_, int kWARPS_, int kKBS_, int kSTAGES_>
struct TileConfig
{
    static constexpr int kW_TILES = kW_TILES_;
    static constexpr int kX_TILES = kX_TILES_;
    static constexpr int kWARPS = kWARPS_;
    static constexpr int kKBS = kKBS_;
    static constexpr int kSTAGES = kSTAGES_;
    static constexpr int kBM = 8 * kX_TILES;
    static constexpr int kBN = 16 * kW_TILES * kWARPS;
    static constexpr int kTHREADS = 32 * kWARPS;
    static_assert(kKBS == 1 || kKBS == 2 || kKBS == 4, "blocks per stage: 1, 2 or 4");
};

/*
 * The slice order of the blocks: the walk that takes slice 0's blocks in ascending order, then
 * slice 1's, ... A cursor steps through it (no division): slice s holds q+1 blocks for s < r, q
 * otherwise (nkb = S*q + r, S <= nkb).
 */
struct SliceCursor
{
    int S;
    int q;
    int r;
    int slice = 0;
    int j = 0;
    int cnt;

    __device__ SliceCursor(int nkb, int slices)
        : S(slices)
        , q(nkb / slices)
        , r(nkb % slices)
        , cnt(nkb / slices + (nkb % slices > 0 ? 1 : 0))
    {
    }
    /* Start at slice z (the walk of its blocks alone: the wgmma tier's split, one CTA per slice). */
    __device__ void seek(int z)
    {
        slice = z;
        j = 0;
        cnt = q + (z < r ? 1 : 0);
    }
    __device__ int block() const
    {
        return slice + S * j;
    }
    __device__ bool lastOfSlice() const
    {
        return j == cnt - 1;
    }
    __device__ void next()
    {
        if (++j == cnt)
        {
            ++slice;
            j = 0;
            cnt = q + (slice < r ? 1 : 0);
        }
    }
};

/* Shared-memory layout of one configuration (bytes). */
template <class P, class C>
struct GemmLayout
{
    static constexpr int kXRow = C::kKBS * 256;      // one row of x: kKBS blocks of 128 16-bit values
    static constexpr int kWRow = C::kKBS * P::kCB;   // one weight row: kKBS blocks of codes
    static constexpr int kXStage = C::kBM * kXRow;
    static constexpr int kWStage = C::kBN * kWRow;
    static constexpr int kMStage = C::kBN * C::kKBS * P::kMW * 4;
    static constexpr int kStage = kXStage + kWStage + kMStage;
    static constexpr int kSmem = C::kSTAGES * kStage + P::kTABLE_BYTES;
    static constexpr int kWCH = P::kCB / 16;         // 16-byte code chunks per row per block

    /* 16-byte chunk c (0..15) of block kbl of x row r. The swizzle keeps the quarter-warp reads of
     * the B fragments (rows g, g+1; chunks 4t+q) on eight distinct bank groups. */
    __device__ static int xOff(int r, int kbl, int c)
    {
        const int p = c ^ ((c >> 2) & 2) ^ (r & 1);
        return r * kXRow + kbl * 256 + p * 16;
    }

    /* 16-byte chunk c of block kbl of weight row r (rows r, r+1 land on different bank groups). */
    __device__ static int wOff(int r, int kbl, int c)
    {
        if constexpr (P::kCB == 64)
        {
            const int b = C::kKBS > 1 ? (kbl ^ (r & 1)) : kbl;
            return r * kWRow + b * 64 + c * 16;
        }
        else
        {
            return r * kWRow + kbl * 128 + ((c ^ (r & 1)) * 16);
        }
    }
};

/*
 * The shared-memory tiers: the pipeline walks the blocks in slice order (SliceCursor), each warp
 * accumulates the running slice in `cur` and folds it into `tot` (tot = tot + cur, from tot = +0)
 * after the slice's last block.
 */
/* One CTA's tile: weight rows [n0, n0 + kBN) against activation rows [m0, m0 + kBM) of X (M rows).
 * The kernel below calls it with the grid's tile; the grouped-expert kernels (moeProj/) call it with
 * an expert's rows and weights, so every expert computes exactly this arithmetic. */
template <class P, class C>
__device__ __forceinline__ void projGemmTile(const typename P::Params& p, const uint16_t* __restrict__ X,
    void* __restrict__ Y, int M, int N, int K, int32_t yDtype, int slices, int n0, int m0)
{
    using L = GemmLayout<P, C>;
    constexpr int kW = C::kW_TILES;
    constexpr int kX = C::kX_TILES;
    constexpr int kWCH = L::kWCH;
    constexpr int kCW = P::kCB / 16;   // code words per thread per row per block
    extern __shared__ __align__(128) uint8_t smem[];

    const int tid = threadIdx.x;
    const int warpId = tid >> 5;
    const int warp = warpId;  // position along N
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int nkb = (K + 127) >> 7;
    const int nst = (nkb + C::kKBS - 1) / C::kKBS;
    SliceCursor ldCur(nkb, slices);  // the next block to load (stages are loaded in order)
    SliceCursor cmCur(nkb, slices);  // the next block to compute
    const int rowBytes = K * P::kCODE_BITS / 8;
    uint8_t* table = smem + C::kSTAGES * L::kStage;
    P::initTable(table, tid, C::kTHREADS);

    // Each thread copies the same (block, chunk) column of rows r0, r0 + step, ... in every stage.
    constexpr int kXCH = C::kBM * C::kKBS * 16;
    constexpr int kXSTEP = C::kTHREADS / (C::kKBS * 16);       // rows between a thread's x chunks
    constexpr int kXU = (kXCH + C::kTHREADS - 1) / C::kTHREADS;
    constexpr int kWN = C::kBN * C::kKBS * kWCH;
    constexpr int kWSTEP = C::kTHREADS / (C::kKBS * kWCH);
    constexpr int kWU = (kWN + C::kTHREADS - 1) / C::kTHREADS;
    static_assert(C::kTHREADS % (C::kKBS * 16) == 0 && C::kTHREADS % (C::kKBS * kWCH) == 0, "chunk columns");
    static_assert(kXSTEP % 2 == 0 || kXU == 1, "x rows keep their swizzle parity");
    static_assert(kWSTEP % 2 == 0 || kWU == 1, "weight rows keep their swizzle parity");
    const int xr0 = tid / (C::kKBS * 16);
    const int xkbl = (tid >> 4) % C::kKBS;
    const int xc = tid & 15;
    const uint16_t* xSrc = X + static_cast<size_t>(m0 + xr0) * K + xc * 8;  // + 128 * block
    const int xSmem = L::xOff(xr0, xkbl, xc);
    const int wr0 = tid / (C::kKBS * kWCH);
    const int wkbl = (tid / kWCH) % C::kKBS;
    const int wc = tid % kWCH;
    const uint8_t* wSrc = p.codes + static_cast<long long>(n0 + wr0) * rowBytes + wc * 16;  // + kCB * block
    const int wSmem = L::wOff(wr0, wkbl, wc);

    auto loadStage = [&](int st, int slot) {
        // The stage's blocks in slice order; a thread's columns pick theirs by select.
        int kbs[C::kKBS];
#pragma unroll
        for (int u = 0; u < C::kKBS; ++u)
        {
            kbs[u] = ldCur.block();
            ldCur.next();
        }
        auto blockOf = [&](int kbl) {
            int kb = kbs[0];
#pragma unroll
            for (int u = 1; u < C::kKBS; ++u)
            {
                kb = kbl == u ? kbs[u] : kb;
            }
            return kb;
        };
        uint8_t* xs = smem + slot * L::kStage;
        uint8_t* ws = xs + L::kXStage;
        uint32_t* ms = reinterpret_cast<uint32_t*>(ws + L::kWStage);
        const int xIdx = st * C::kKBS + xkbl;
        const int xKb = xIdx < nkb ? blockOf(xkbl) : 0;
        const bool kOk = xIdx < nkb && xKb * 128 + xc * 8 < K;
#pragma unroll
        for (int u = 0; u < kXU; ++u)
        {
            if (kXCH % C::kTHREADS == 0 || tid + u * C::kTHREADS < kXCH)
            {
                const bool ok = kOk && m0 + xr0 + u * kXSTEP < M;
                const uint16_t* src = ok ? xSrc + static_cast<size_t>(u) * kXSTEP * K + xKb * 128 : X;
                cpAsync16(xs + xSmem + u * kXSTEP * L::kXRow, src, ok ? 16 : 0);
            }
        }
        const int wIdx = st * C::kKBS + wkbl;
        const int wKb = wIdx < nkb ? blockOf(wkbl) : 0;
        const bool bOk = wIdx < nkb && wKb * P::kCB + wc * 16 < rowBytes;
#pragma unroll
        for (int u = 0; u < kWU; ++u)
        {
            if (kWN % C::kTHREADS == 0 || tid + u * C::kTHREADS < kWN)
            {
                const bool ok = bOk && n0 + wr0 + u * kWSTEP < N;
                const uint8_t* src = ok ? wSrc + static_cast<long long>(u) * kWSTEP * rowBytes + wKb * P::kCB : p.codes;
                cpAsync16(ws + wSmem + u * kWSTEP * L::kWRow, src, ok ? 16 : 0);
            }
        }
        if constexpr (P::kMW > 0)
        {
            constexpr int kMN = C::kBN * C::kKBS * P::kMW;
            for (int i = tid; i < kMN; i += C::kTHREADS)
            {
                const int r = i / (C::kKBS * P::kMW);
                const int rem = i - r * (C::kKBS * P::kMW);
                const int kbl = rem / P::kMW;
                const int w = rem - kbl * P::kMW;
                if (!P::metaUsed(p, w))
                {
                    continue;  // a word this launch never reads
                }
                const int idx = st * C::kKBS + kbl;
                const int n = n0 + r;
                const void* src = p.codes;
                int bytes = 0;
                if (n < N && idx < nkb)
                {
                    P::metaSrc(p, n, blockOf(kbl), w, src, bytes);
                }
                cpAsync4(ms + (r * C::kKBS + kbl) * P::kMW + w, src, bytes);
            }
        }
    };

    float cur[kW][kX][4];  // the running slice
    float tot[kW][kX][4];  // the sum of the finished slices
#pragma unroll
    for (int i = 0; i < kW; ++i)
#pragma unroll
        for (int j = 0; j < kX; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
            {
                cur[i][j][e] = 0.0f;
                tot[i][j][e] = 0.0f;
            }

    // One 128-k block into the running slice.
    auto doBlock = [&](const uint8_t* xs, const uint8_t* ws, const uint32_t* ms, int kbl, int kb) {
        uint32_t codes[kW][2][kCW];
        typename P::BlockState bs[kW][2];
#pragma unroll
        for (int i = 0; i < kW; ++i)
        {
#pragma unroll
            for (int hr = 0; hr < 2; ++hr)
            {
                const int r = warp * (16 * kW) + 16 * i + g + 8 * hr;
#pragma unroll
                for (int v = 0; v < kCW / 4; ++v)
                {
                    const uint4 c4 = *reinterpret_cast<const uint4*>(ws + L::wOff(r, kbl, (kCW / 4) * t + v));
                    codes[i][hr][4 * v + 0] = c4.x;
                    codes[i][hr][4 * v + 1] = c4.y;
                    codes[i][hr][4 * v + 2] = c4.z;
                    codes[i][hr][4 * v + 3] = c4.w;
                }
                bs[i][hr] = P::blockState(p, ms + (r * C::kKBS + kbl) * P::kMW, t, kb, n0 + r);
            }
        }

        float part[P::kPER_BLOCK ? kW : 1][P::kPER_BLOCK ? kX : 1][4];
        if constexpr (P::kPER_BLOCK)
        {
#pragma unroll
            for (int i = 0; i < kW; ++i)
#pragma unroll
                for (int j = 0; j < kX; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        part[i][j][e] = 0.0f;
        }

#pragma unroll
        for (int q = 0; q < 4; ++q)
        {
            if constexpr (kX <= 8)
            {
                // B fragments of steps 2q, 2q+1 for every activation tile: one 16-byte load each.
                uint4 xf[kX];
#pragma unroll
                for (int j = 0; j < kX; ++j)
                {
                    xf[j] = *reinterpret_cast<const uint4*>(xs + L::xOff(8 * j + g, kbl, 4 * t + q));
                }
#pragma unroll
                for (int h = 0; h < 2; ++h)
                {
#pragma unroll
                    for (int i = 0; i < kW; ++i)
                    {
                        uint32_t a0, a1, a2, a3;
                        P::dequant(codes[i][0], bs[i][0], 2 * q + h, table, lane, a0, a2);
                        P::dequant(codes[i][1], bs[i][1], 2 * q + h, table, lane, a1, a3);
#pragma unroll
                        for (int j = 0; j < kX; ++j)
                        {
                            const uint32_t b0 = h ? xf[j].z : xf[j].x;
                            const uint32_t b1 = h ? xf[j].w : xf[j].y;
                            if constexpr (P::kPER_BLOCK)
                            {
                                mma16816<P::kF16>(part[i][j], a0, a1, a2, a3, b0, b1);
                            }
                            else
                            {
                                mma16816<P::kF16>(cur[i][j], a0, a1, a2, a3, b0, b1);
                            }
                        }
                    }
                }
            }
            else
            {
                // Many activation tiles: the A fragments of a step once, then each tile's B fragment
                // (one 8-byte load, the step's half of the same 16 bytes) as it is used.
#pragma unroll
                for (int h = 0; h < 2; ++h)
                {
                    uint32_t a[kW][4];
#pragma unroll
                    for (int i = 0; i < kW; ++i)
                    {
                        P::dequant(codes[i][0], bs[i][0], 2 * q + h, table, lane, a[i][0], a[i][2]);
                        P::dequant(codes[i][1], bs[i][1], 2 * q + h, table, lane, a[i][1], a[i][3]);
                    }
#pragma unroll
                    for (int j = 0; j < kX; ++j)
                    {
                        const uint2 b = *reinterpret_cast<const uint2*>(xs + L::xOff(8 * j + g, kbl, 4 * t + q) + 8 * h);
#pragma unroll
                        for (int i = 0; i < kW; ++i)
                        {
                            if constexpr (P::kPER_BLOCK)
                            {
                                mma16816<P::kF16>(part[i][j], a[i][0], a[i][1], a[i][2], a[i][3], b.x, b.y);
                            }
                            else
                            {
                                mma16816<P::kF16>(cur[i][j], a[i][0], a[i][1], a[i][2], a[i][3], b.x, b.y);
                            }
                        }
                    }
                }
            }
        }

        if constexpr (P::kPER_BLOCK)
        {
#pragma unroll
            for (int i = 0; i < kW; ++i)
            {
#pragma unroll
                for (int hr = 0; hr < 2; ++hr)
                {
                    const int n = n0 + warp * (16 * kW) + 16 * i + g + 8 * hr;
                    const float cs = n < N ? P::blockColScale(p, n, kb) : 0.0f;
#pragma unroll
                    for (int j = 0; j < kX; ++j)
                    {
#pragma unroll
                        for (int e = 0; e < 2; ++e)
                        {
                            const int m = m0 + 8 * j + 2 * t + e;
                            const float rs = m < M ? P::blockRowScale(p, m, kb) : 0.0f;
                            float& a = cur[i][j][2 * hr + e];
                            a = __fadd_rn(a, __fmul_rn(__fmul_rn(part[i][j][2 * hr + e], rs), cs));
                        }
                    }
                }
            }
        }
    };

#pragma unroll
    for (int s = 0; s < C::kSTAGES - 1; ++s)
    {
        if (s < nst)
        {
            loadStage(s, s);
        }
        cpAsyncCommit();
    }

    for (int st = 0; st < nst; ++st)
    {
        cpAsyncWait<C::kSTAGES - 2>();
        __syncthreads();
        {
            const int nx = st + C::kSTAGES - 1;
            if (nx < nst)
            {
                loadStage(nx, nx % C::kSTAGES);
            }
            cpAsyncCommit();
        }
        const int slot = st % C::kSTAGES;
        const uint8_t* xs = smem + slot * L::kStage;
        const uint8_t* ws = xs + L::kXStage;
        const uint32_t* ms = reinterpret_cast<const uint32_t*>(ws + L::kWStage);

#pragma unroll
        for (int kbl = 0; kbl < C::kKBS; ++kbl)
        {
            const int idx = st * C::kKBS + kbl;
            if (idx >= nkb)
            {
                break;
            }
            const int kb = cmCur.block();
            const bool last = cmCur.lastOfSlice();
            cmCur.next();
            doBlock(xs, ws, ms, kbl, kb);
            if (last)
            {
#pragma unroll
                for (int i = 0; i < kW; ++i)
#pragma unroll
                    for (int j = 0; j < kX; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                        {
                            tot[i][j][e] = __fadd_rn(tot[i][j][e], cur[i][j][e]);
                            cur[i][j][e] = 0.0f;
                        }
            }
        }
    }
    cpAsyncWait<0>();

    // Epilogue: per element, y = finish(acc) (+ bias), one rounding to the dtype of x. The thread
    // holds weight rows n, n+8 for activation rows m, m+1 of each tile pair.
#pragma unroll
    for (int i = 0; i < kW; ++i)
    {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
        {
            const int n = n0 + warp * (16 * kW) + 16 * i + g + 8 * hr;
            if (n >= N)
            {
                continue;
            }
            const float bias = p.bias != nullptr ? p.bias[n] : 0.0f;
#pragma unroll
            for (int j = 0; j < kX; ++j)
            {
#pragma unroll
                for (int e = 0; e < 2; ++e)
                {
                    const int m = m0 + 8 * j + 2 * t + e;
                    if (m < M)
                    {
                        float v = P::finish(p, tot[i][j][2 * hr + e], m, n);
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
}

template <class P, class C>
__global__ void __launch_bounds__(C::kTHREADS, 1) projGemmKernel(const typename P::Params p,
    const uint16_t* __restrict__ X, void* __restrict__ Y, int M, int N, int K, int32_t yDtype, int slices)
{
    projGemmTile<P, C>(p, X, Y, M, N, K, yDtype, slices, blockIdx.x * C::kBN, blockIdx.y * C::kBM);
}

/* The tile configurations of the shared-memory tiers (projTiers.h; m <= 16 streams, projStream.cuh,
 * except FP8 codes there). Every warp holds two accumulator sets per output (the running slice and
 * the sum), per-block policies a third (the block's partial). */
template <class P>
struct Tiers
{
    using M64 = TileConfig<1, 4, 4, 2, 3>;
    // 4-bit codes: 128 activation rows per CTA halve the dequantization per mma (measured 1.3x on
    // the H200). FP8 codes dequantize cheaply and keep 64 rows with 16-byte B loads (faster for
    // them); per-block policies hold a third accumulator set (the block's partial), so one weight
    // tile per warp (no spills); so do 16-bit (bf16, FloatProj) weights, whose codes take twice
    // the registers of FP8's.
    static constexpr bool kWideX = P::kCODE_BITS == 4 && !P::kPER_BLOCK;
    static constexpr bool kOneTile = P::kPER_BLOCK || P::kCODE_BITS == 16;
    using M128 = std::conditional_t<kWideX, TileConfig<1, 16, 8, 1, 3>,
        std::conditional_t<kOneTile, TileConfig<1, 8, 8, 1, 3>, TileConfig<2, 8, 8, 1, 3>>>;
};

/* Raises kKern's dynamic shared-memory limit to bytes, once per device and kernel instantiation (a
 * race only repeats the call). */
template <auto kKern>
inline cudaError_t raiseSmemOnce(int bytes)
{
    static unsigned long long done = 0;
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
    {
        return e;
    }
    const unsigned long long bit = 1ull << (dev & 63);
    if (!(done & bit))
    {
        e = cudaFuncSetAttribute(kKern, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
        if (e != cudaSuccess)
        {
            return e;
        }
        done |= bit;
    }
    return cudaSuccess;
}

template <class P, class C>
inline cudaError_t launchProjGemm(const typename P::Params& p, const uint16_t* X, void* y, int m, int n, int k,
    int32_t yDtype, int slices, cudaStream_t stream)
{
    using L = GemmLayout<P, C>;
    auto kern = projGemmKernel<P, C>;
    if (L::kSmem > 48 * 1024)
    {
        const cudaError_t e = raiseSmemOnce<projGemmKernel<P, C>>(L::kSmem);
        if (e != cudaSuccess)
        {
            return e;
        }
    }
    const dim3 grid((n + C::kBN - 1) / C::kBN, (m + C::kBM - 1) / C::kBM);
    kern<<<grid, C::kTHREADS, L::kSmem, stream>>>(p, X, y, m, n, k, yDtype, slices);
    return cudaGetLastError();
}

/* The epilogue hooks of a policy whose accumulator needs no scaling: y = acc, and no per-block
 * scales. A policy with its own finish (or block scales) defines it and hides this one. */
struct IdentityEpilogue
{
    template <class Params>
    __device__ static float finish(const Params&, float acc, int, int)
    {
        return acc;
    }
    template <class Params>
    __device__ static float blockRowScale(const Params&, int, int)
    {
        return 1.0f;
    }
    template <class Params>
    __device__ static float blockColScale(const Params&, int, int)
    {
        return 1.0f;
    }
};

/* A weight policy with no lookup table. */
struct NoTable
{
    static constexpr int kTABLE_BYTES = 0;
    __device__ static void initTable(uint8_t*, int, int) {}
};

/* The e2m1 pair table: entry (byte, lane) = f16x2 of the two e2m1 codes of `byte`, replicated per
 * lane so that 32 lanes with any bytes read 32 distinct banks. */
struct E2m1Table
{
    static constexpr int kTABLE_BYTES = 256 * 32 * 4;
    /* Four lanes' copies of an entry per 16-byte store (a warp's 32 stores fill 512 contiguous bytes:
     * no bank conflict), a quarter of the one-word stores and of the entry computations. */
    __device__ static void initTable(uint8_t* table, int tid, int threads)
    {
        uint4* tab = reinterpret_cast<uint4*>(table);
        for (int i = tid; i < 256 * 8; i += threads)
        {
            const uint32_t byte = static_cast<uint32_t>(i) >> 3;
            const uint32_t v = static_cast<uint32_t>(e2m1HalfBits(byte & 0xFu))
                | (static_cast<uint32_t>(e2m1HalfBits(byte >> 4)) << 16);
            tab[i] = make_uint4(v, v, v, v);
        }
    }
    /* The entry (byte j of w, lane), j = 0..3: one PRMT zero-extends the byte and one IMAD adds it times
     * 128 to the lane's column (table + 4 lane, loop-invariant). An index (byte << 5 | lane) cost a
     * shift, a multiply, a LOP3 and an IMAD a pair (the SASS of 3c6e3ce). */
    __device__ static uint32_t lookup(const uint8_t* table, uint32_t w, int j, int lane)
    {
        uint32_t byte, v;
        asm("prmt.b32 %0, %1, 0, %2;\n" : "=r"(byte) : "r"(w), "r"(0x4440u | static_cast<uint32_t>(j)));
        // The shared-window address of the lane's column: loop-invariant, one register.
        const uint32_t column = smemAddr(table) + 4u * static_cast<uint32_t>(lane);
        asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(column + (byte << 7)));
        return v;
    }
};

inline size_t alignUp(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

} // namespace metrale

#endif // METRALE_PROJ_GEMM_CUH
