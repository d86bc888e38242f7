/*
 * The one GEMM skeleton behind every metrale projection: y[m, n] = finish(sum_k x[m, k] * w[n, k]).
 *
 * x is a 16-bit operand (bf16, or f16 for the fp8 / nvfp4 activation formats, where every value is
 * exact in f16) of shape [M, K], row-major; w comes as packed codes that a weight policy `P`
 * dequantizes in registers into the mma's B fragment. A tile configuration `C` fixes the CTA shape.
 *
 * Invariants (row invariance, docs/ops.md):
 * - Every output element is accumulated by mma.sync m16n8k16 (fp32 accumulate) starting from zero,
 *   over the 128-k blocks in ascending order, each block in steps s = 0..7; in step s quad lane t
 *   supplies k = 128*b + 32*t + 4*s + j (j = 0..3) at instruction positions 2t, 2t+1, 2t+8, 2t+9, for
 *   both operands. Without per-block scales the even and the odd blocks go to two accumulators
 *   (slices) added once at the end (acc_even + acc_odd), which halves the dependent mma chain and
 *   lets two warps share the K loop of small-M tiles. Nothing of this depends on M, on the tile
 *   configuration or on where the row sits.
 * - Blocks past K are never issued (no padding mma); zero-filled tails inside the last block multiply
 *   zero activations by finite weights.
 * - Per-block scaling (fp8 block scales) is `acc = acc + (partial * row_scale) * col_scale` per block,
 *   per element; the final scale and bias are per element.
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
 * CTA shape. kA_TILES m16 tiles of rows (all warps share them; kA_ROWS = 8 uses only the top half of
 * a single tile), kB_TILES n8 tiles of weight rows per warp, kWARPS warps side by side along N,
 * kKBS 128-k blocks per pipeline stage, kSTAGES stages, kSPLITW warps along K (1 or 2: with 2, the
 * even and odd blocks of the same outputs go to two warps; see "slices" below).
 */
template <int kA_TILES_, int kA_ROWS_, int kB_TILES_, int kWARPS_, int kKBS_, int kSTAGES_, int kSPLITW_>
struct TileConfig
{
    static constexpr int kA_TILES = kA_TILES_;
    static constexpr int kA_ROWS = kA_ROWS_;
    static constexpr int kB_TILES = kB_TILES_;
    static constexpr int kWARPS = kWARPS_;
    static constexpr int kKBS = kKBS_;
    static constexpr int kSTAGES = kSTAGES_;
    static constexpr int kSPLITW = kSPLITW_;
    static constexpr int kBM = kA_ROWS == 8 ? 8 : 16 * kA_TILES;
    static constexpr int kBN = 8 * kB_TILES * kWARPS;
    static constexpr int kTHREADS = 32 * kWARPS * kSPLITW;
    static_assert(kA_ROWS == 16 || kA_TILES == 1, "8-row tiles come one at a time");
    static_assert(kKBS == 1 || kKBS == 2 || kKBS == 4, "blocks per stage: 1, 2 or 4");
    static_assert(kSPLITW == 1 || (kSPLITW == 2 && kKBS % 2 == 0), "two K warps need an even kKBS");
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

    /* 16-byte chunk c (0..15) of block kbl of x row r. The swizzle keeps the quarter-warp reads of
     * the A fragments (rows g, g+1; chunks 4t+q) on eight distinct bank groups. */
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

template <int kV>
using IntC = std::integral_constant<int, kV>;

/*
 * Slices. Policies without per-block scales accumulate each output in two slices, the even and the
 * odd 128-k blocks, each from zero in ascending order, and add them once at the end:
 * y = acc_even + acc_odd. A tier holds the two slices either in one warp (two accumulators) or in
 * two warps (kSPLITW = 2, reduced through shared memory): the same operations in the same order,
 * so the same bits. Per-block policies accumulate acc += (partial_b * rs) * cs over all blocks in one
 * slice (their chain is broken per block already).
 */
template <class P, class C>
__global__ void __launch_bounds__(C::kTHREADS, 1) projGemmKernel(const typename P::Params p,
    const uint16_t* __restrict__ X, void* __restrict__ Y, int M, int N, int K, int32_t yDtype)
{
    using L = GemmLayout<P, C>;
    constexpr int kA = C::kA_TILES;
    constexpr int kB = C::kB_TILES;
    constexpr int kWCH = P::kCB / 16;  // 16-byte code chunks per row per block
    constexpr int kCW = P::kCB / 16;   // code words per thread per row per block
    constexpr int kSLICES = P::kPER_BLOCK ? 1 : 2;
    constexpr int kSLOTS = (kSLICES == 2 && C::kSPLITW == 1) ? 2 : 1;  // accumulators per warp
    static_assert(!(P::kPER_BLOCK && C::kSPLITW == 2), "per-block policies keep one slice per output");
    extern __shared__ __align__(128) uint8_t smem[];

    const int tid = threadIdx.x;
    const int warpId = tid >> 5;
    const int warp = warpId % C::kWARPS;       // position along N
    const int kslice = warpId / C::kWARPS;     // 0, or 1 for the odd-block warps when kSPLITW == 2
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int n0 = blockIdx.x * C::kBN;
    const int m0 = blockIdx.y * C::kBM;
    const int nkb = (K + 127) >> 7;
    const int nst = (nkb + C::kKBS - 1) / C::kKBS;
    const long long rowBytes = static_cast<long long>(K) * P::kCODE_BITS / 8;
    uint8_t* table = smem + C::kSTAGES * L::kStage;
    P::initTable(table, tid, C::kTHREADS);

    auto loadStage = [&](int st, int slot) {
        uint8_t* xs = smem + slot * L::kStage;
        uint8_t* ws = xs + L::kXStage;
        uint32_t* ms = reinterpret_cast<uint32_t*>(ws + L::kWStage);
        constexpr int kXCH = C::kBM * C::kKBS * 16;
        for (int i = tid; i < kXCH; i += C::kTHREADS)
        {
            const int r = i / (C::kKBS * 16);
            const int rem = i - r * (C::kKBS * 16);
            const int kbl = rem >> 4;
            const int c = rem & 15;
            const int k = (st * C::kKBS + kbl) * 128 + c * 8;
            const int m = m0 + r;
            const bool ok = m < M && k < K;
            const uint16_t* src = ok ? X + static_cast<size_t>(m) * K + k : X;
            cpAsync16(xs + L::xOff(r, kbl, c), src, ok ? 16 : 0);
        }
        constexpr int kWN = C::kBN * C::kKBS * kWCH;
        for (int i = tid; i < kWN; i += C::kTHREADS)
        {
            const int r = i / (C::kKBS * kWCH);
            const int rem = i - r * (C::kKBS * kWCH);
            const int kbl = rem / kWCH;
            const int c = rem - kbl * kWCH;
            const long long off = static_cast<long long>(st * C::kKBS + kbl) * P::kCB + c * 16;
            const int n = n0 + r;
            const bool ok = n < N && off < rowBytes;
            const uint8_t* src = ok ? p.codes + static_cast<long long>(n) * rowBytes + off : p.codes;
            cpAsync16(ws + L::wOff(r, kbl, c), src, ok ? 16 : 0);
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
                const int kb = st * C::kKBS + kbl;
                const int n = n0 + r;
                const void* src = p.codes;
                int bytes = 0;
                if (n < N && kb < nkb)
                {
                    P::metaSrc(p, n, kb, w, src, bytes);
                }
                cpAsync4(ms + (r * C::kKBS + kbl) * P::kMW + w, src, bytes);
            }
        }
    };

    float acc[kSLOTS][kA][kB][4];
#pragma unroll
    for (int u = 0; u < kSLOTS; ++u)
#pragma unroll
        for (int i = 0; i < kA; ++i)
#pragma unroll
            for (int j = 0; j < kB; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    acc[u][i][j][e] = 0.0f;

    // One 128-k block into accumulator slot kSlot.
    auto doBlock = [&](auto slotTag, const uint8_t* xs, const uint8_t* ws, const uint32_t* ms, int kbl, int kb) {
        constexpr int kSlot = decltype(slotTag)::value;
        uint32_t codes[kB][kCW];
        typename P::BlockState bs[kB];
#pragma unroll
        for (int j = 0; j < kB; ++j)
        {
            const int r = warp * (8 * kB) + 8 * j + g;
            if constexpr (P::kCB == 64)
            {
                const uint4 v = *reinterpret_cast<const uint4*>(ws + L::wOff(r, kbl, t));
                codes[j][0] = v.x;
                codes[j][1] = v.y;
                codes[j][2] = v.z;
                codes[j][3] = v.w;
            }
            else
            {
                const uint4 v0 = *reinterpret_cast<const uint4*>(ws + L::wOff(r, kbl, 2 * t));
                const uint4 v1 = *reinterpret_cast<const uint4*>(ws + L::wOff(r, kbl, 2 * t + 1));
                codes[j][0] = v0.x;
                codes[j][1] = v0.y;
                codes[j][2] = v0.z;
                codes[j][3] = v0.w;
                codes[j][4] = v1.x;
                codes[j][5] = v1.y;
                codes[j][6] = v1.z;
                codes[j][7] = v1.w;
            }
            bs[j] = P::blockState(p, ms + (r * C::kKBS + kbl) * P::kMW, t, kb, n0 + r);
        }

        float part[P::kPER_BLOCK ? kA : 1][P::kPER_BLOCK ? kB : 1][4];
        if constexpr (P::kPER_BLOCK)
        {
#pragma unroll
            for (int i = 0; i < kA; ++i)
#pragma unroll
                for (int j = 0; j < kB; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        part[i][j][e] = 0.0f;
        }

#pragma unroll
        for (int q = 0; q < 4; ++q)
        {
            uint32_t bf[kB][2][2];
#pragma unroll
            for (int j = 0; j < kB; ++j)
            {
#pragma unroll
                for (int h = 0; h < 2; ++h)
                {
                    P::dequant(codes[j], bs[j], 2 * q + h, table, lane, bf[j][h][0], bf[j][h][1]);
                }
            }
#pragma unroll
            for (int i = 0; i < kA; ++i)
            {
                const int ra = 16 * i + g;
                const uint4 xa = *reinterpret_cast<const uint4*>(xs + L::xOff(ra, kbl, 4 * t + q));
                uint4 xb = make_uint4(0u, 0u, 0u, 0u);
                if constexpr (C::kA_ROWS == 16)
                {
                    xb = *reinterpret_cast<const uint4*>(xs + L::xOff(ra + 8, kbl, 4 * t + q));
                }
#pragma unroll
                for (int h = 0; h < 2; ++h)
                {
                    const uint32_t a0 = h ? xa.z : xa.x;
                    const uint32_t a2 = h ? xa.w : xa.y;
                    const uint32_t a1 = h ? xb.z : xb.x;
                    const uint32_t a3 = h ? xb.w : xb.y;
#pragma unroll
                    for (int j = 0; j < kB; ++j)
                    {
                        if constexpr (P::kPER_BLOCK)
                        {
                            mma16816<P::kF16>(part[i][j], a0, a1, a2, a3, bf[j][h][0], bf[j][h][1]);
                        }
                        else
                        {
                            mma16816<P::kF16>(acc[kSlot][i][j], a0, a1, a2, a3, bf[j][h][0], bf[j][h][1]);
                        }
                    }
                }
            }
        }

        if constexpr (P::kPER_BLOCK)
        {
#pragma unroll
            for (int j = 0; j < kB; ++j)
            {
                const int n = n0 + warp * (8 * kB) + 8 * j + 2 * t;
                const float c0 = n < N ? P::blockColScale(p, n, kb) : 0.0f;
                const float c1 = n + 1 < N ? P::blockColScale(p, n + 1, kb) : 0.0f;
#pragma unroll
                for (int i = 0; i < kA; ++i)
                {
#pragma unroll
                    for (int hr = 0; hr < 2; ++hr)
                    {
                        const int m = m0 + 16 * i + g + 8 * hr;
                        const float rs = m < M ? P::blockRowScale(p, m, kb) : 0.0f;
                        float* a = acc[kSlot][i][j];
                        a[2 * hr] = __fadd_rn(a[2 * hr], __fmul_rn(__fmul_rn(part[i][j][2 * hr], rs), c0));
                        a[2 * hr + 1] = __fadd_rn(a[2 * hr + 1], __fmul_rn(__fmul_rn(part[i][j][2 * hr + 1], rs), c1));
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
            const int kb = st * C::kKBS + kbl;
            if (kb >= nkb)
            {
                break;
            }
            if constexpr (C::kSPLITW == 2)
            {
                if ((kbl & 1) == kslice)  // kKBS is even: the block's parity is kbl's
                {
                    doBlock(IntC<0>{}, xs, ws, ms, kbl, kb);
                }
            }
            else if constexpr (kSLOTS == 2)
            {
                if constexpr (C::kKBS % 2 == 0)
                {
                    if (kbl & 1)
                        doBlock(IntC<1>{}, xs, ws, ms, kbl, kb);
                    else
                        doBlock(IntC<0>{}, xs, ws, ms, kbl, kb);
                }
                else
                {
                    if (kb & 1)
                        doBlock(IntC<1>{}, xs, ws, ms, kbl, kb);
                    else
                        doBlock(IntC<0>{}, xs, ws, ms, kbl, kb);
                }
            }
            else
            {
                doBlock(IntC<0>{}, xs, ws, ms, kbl, kb);
            }
        }
    }
    cpAsyncWait<0>();

    // The two slices: acc_even + acc_odd, one float32 addition per element.
    float out[kA][kB][4];
    if constexpr (C::kSPLITW == 2)
    {
        __syncthreads();  // every warp is done with the pipeline buffers
        float* red = reinterpret_cast<float*>(smem);
        constexpr int kPER = kA * kB * 4;
        if (kslice == 1)
        {
#pragma unroll
            for (int i = 0; i < kA; ++i)
#pragma unroll
                for (int j = 0; j < kB; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        red[((warp * kPER) + (i * kB + j) * 4 + e) * 32 + lane] = acc[0][i][j][e];
        }
        __syncthreads();
        if (kslice == 1)
        {
            return;
        }
#pragma unroll
        for (int i = 0; i < kA; ++i)
#pragma unroll
            for (int j = 0; j < kB; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    out[i][j][e] = __fadd_rn(acc[0][i][j][e], red[((warp * kPER) + (i * kB + j) * 4 + e) * 32 + lane]);
    }
    else
    {
#pragma unroll
        for (int i = 0; i < kA; ++i)
#pragma unroll
            for (int j = 0; j < kB; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    out[i][j][e] = kSLOTS == 2 ? __fadd_rn(acc[0][i][j][e], acc[kSLOTS - 1][i][j][e]) : acc[0][i][j][e];
    }

    // Epilogue: per element, y = finish(acc) (+ bias), one rounding to the dtype of x.
#pragma unroll
    for (int j = 0; j < kB; ++j)
    {
        const int n = n0 + warp * (8 * kB) + 8 * j + 2 * t;
        const float bias0 = (p.bias != nullptr && n < N) ? p.bias[n] : 0.0f;
        const float bias1 = (p.bias != nullptr && n + 1 < N) ? p.bias[n + 1] : 0.0f;
#pragma unroll
        for (int i = 0; i < kA; ++i)
        {
#pragma unroll
            for (int hr = 0; hr < 2; ++hr)
            {
                if (C::kA_ROWS == 8 && hr == 1)
                {
                    continue;
                }
                const int m = m0 + 16 * i + g + 8 * hr;
                if (m >= M || n >= N)
                {
                    continue;
                }
                float v0 = P::finish(p, out[i][j][2 * hr], m, n);
                float v1 = n + 1 < N ? P::finish(p, out[i][j][2 * hr + 1], m, n + 1) : 0.0f;
                if (p.bias != nullptr)
                {
                    v0 = __fadd_rn(v0, bias0);
                    v1 = __fadd_rn(v1, bias1);
                }
                const size_t idx = static_cast<size_t>(m) * N + n;
                if (n + 1 < N && (N & 1) == 0)
                {
                    storeY2(Y, yDtype, idx, v0, v1);
                }
                else
                {
                    storeY(Y, yDtype, idx, v0);
                    if (n + 1 < N)
                    {
                        storeY(Y, yDtype, idx + 1, v1);
                    }
                }
            }
        }
    }
}

/* The tile configurations of the tiers (projTiers.h). The large tier holds two accumulators per
 * output (two slices, or one slice plus the per-block partial), so it uses 64-row tiles to stay
 * within the register file. */
template <bool kPerBlock>
struct Tiers
{
    static constexpr int kSplit = kPerBlock ? 1 : 2;  // K warps of the small tiers (see "slices")
    using M8 = TileConfig<1, 8, 1, 4, 4, 4, kSplit>;
    using M16 = TileConfig<1, 16, 1, 4, 4, 3, kSplit>;
    using M64 = TileConfig<4, 16, 1, 4, 2, 3, kSplit>;
    using M128 = TileConfig<4, 16, 4, 8, 1, 3, 1>;
};

template <class P, class C>
inline cudaError_t launchProjGemm(const typename P::Params& p, const uint16_t* X, void* y, int m, int n, int k,
    int32_t yDtype, cudaStream_t stream)
{
    using L = GemmLayout<P, C>;
    auto kern = projGemmKernel<P, C>;
    if (L::kSmem > 48 * 1024)
    {
        // Raise the dynamic shared-memory limit once per device for this instantiation (a race
        // only repeats the call).
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
            e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmem);
            if (e != cudaSuccess)
            {
                return e;
            }
            done |= bit;
        }
    }
    const dim3 grid((n + C::kBN - 1) / C::kBN, (m + C::kBM - 1) / C::kBM);
    kern<<<grid, C::kTHREADS, L::kSmem, stream>>>(p, X, y, m, n, k, yDtype);
    return cudaGetLastError();
}

/* Launch the tier that serves m rows. */
template <class P>
inline cudaError_t dispatchProjGemm(const typename P::Params& p, const uint16_t* X, void* y, int m, int n, int k,
    int32_t yDtype, cudaStream_t stream)
{
    using T = Tiers<P::kPER_BLOCK>;
    switch (selectProjTier(m))
    {
    case ProjTier::kM8: return launchProjGemm<P, typename T::M8>(p, X, y, m, n, k, yDtype, stream);
    case ProjTier::kM16: return launchProjGemm<P, typename T::M16>(p, X, y, m, n, k, yDtype, stream);
    case ProjTier::kM64: return launchProjGemm<P, typename T::M64>(p, X, y, m, n, k, yDtype, stream);
    default: return launchProjGemm<P, typename T::M128>(p, X, y, m, n, k, yDtype, stream);
    }
}

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
    __device__ static void initTable(uint8_t* table, int tid, int threads)
    {
        uint32_t* tab = reinterpret_cast<uint32_t*>(table);
        for (int i = tid; i < 256 * 32; i += threads)
        {
            const uint32_t byte = static_cast<uint32_t>(i) >> 5;
            tab[i] = static_cast<uint32_t>(e2m1HalfBits(byte & 0xFu)) | (static_cast<uint32_t>(e2m1HalfBits(byte >> 4)) << 16);
        }
    }
    __device__ static uint32_t lookup(const uint8_t* table, uint32_t byte, int lane)
    {
        return reinterpret_cast<const uint32_t*>(table)[(byte << 5) | static_cast<uint32_t>(lane)];
    }
};

inline size_t alignUp(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

} // namespace metrale

#endif // METRALE_PROJ_GEMM_CUH
