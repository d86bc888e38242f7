/*
 * The weight-streaming tier of the projection GEMM (m <= 16 rows), and the tier dispatch.
 *
 * At a few rows a projection reads every weight byte once and does little else: the kernel here
 * streams the packed codes and their scales straight from global memory into registers (a ring of
 * kD 128-k blocks per warp, no shared-memory staging, no __syncthreads in the loop) and reads the
 * activation fragments through L1. One warp per slice and 16 weight rows gives even
 * small N enough warps.
 *
 * Invariants (row invariance, projGemm.cuh): the arithmetic is that of projGemmKernel, operand for
 * operand. Each slice (projSlices) is accumulated by its own warp with mma.sync m16n8k16 from zero
 * over its 128-k blocks in ascending order (per-block policies: acc += (partial * rs) * cs per
 * block), and slice 0's warp sums them from the left, ((0 + acc_0) + acc_1) + ..., with the same
 * k -> instruction-position mapping, the same dequantized A fragments (the policies'
 * loadStreamMeta / streamState read the same scale values that blockState reads from shared
 * memory, zero where the staged copy is zero-filled) and zero activations past M and K. So a row's
 * bits are those of every other tier (tests/gpu checks every M bitwise).
 */
#ifndef METRALE_PROJ_STREAM_CUH
#define METRALE_PROJ_STREAM_CUH

#include <cstdint>
#include <cstdlib>
#include <type_traits>
#include <cuda_runtime.h>

#include "projGemm.cuh"
#include "projStreamRing.cuh"
#include "projWgmma.cuh"

namespace metrale
{

/*
 * kXT n8 activation tiles (m <= 8 * kXT), kD blocks in flight per warp. A CTA holds blockDim.x / 32
 * warps: `slices` warps for each of its weight tiles (warp w serves tile w % nt and slice w / nt).
 */
constexpr int kSTREAM_THREADS = 256;  // at most: 8 slices, or 8 tiles x 1 slice

/* Where tile row m (< M) of projStreamTile lives: the dense layout, row m of X and of Y (and of the
 * policy's row scales). The grouped-expert kernels (moeProj/) pass a map from a tile row to an
 * activation row and an output row instead; the arithmetic of a row never sees the map. */
struct StreamRows
{
    __device__ __forceinline__ const uint16_t* x(const uint16_t* X, int m, int K) const
    {
        return X + static_cast<size_t>(m) * K;
    }
    __device__ __forceinline__ int scaleRow(int m) const
    {
        return m;
    }
    __device__ __forceinline__ void store(void* Y, int32_t yDtype, int m, int N, int n, float v) const
    {
        storeY(Y, yDtype, static_cast<size_t>(m) * N + n, v);
    }
};

/* One CTA's weight tiles (CTA index `cta` along N) against all M (<= 8 kXT) rows of X; the kernel
 * below calls it with blockIdx.x, the grouped-expert kernels (moeProj/) with an expert's rows (and
 * their row map R). kTableInit false: the caller built the policy's table in the CTA's shared memory
 * already (a kernel that runs several tiles a CTA builds it once). */
template <class P, int kXT, int kD, class R = StreamRows, bool kTableInit = true>
__device__ __forceinline__ void projStreamTile(const typename P::Params& p, const uint16_t* __restrict__ X,
    void* __restrict__ Y, int M, int N, int K, int32_t yDtype, int slices, int cta, const R& rows = R{})
{
    constexpr int kCW = P::kCB / 16;  // code words per thread per weight row per block
    constexpr int kCV = kCW / 4;      // 16-byte loads of them
    static_assert(kCW % 4 == 0, "whole 16-byte code chunks");
    __shared__ float red[kSTREAM_THREADS / 32][kXT * 4][32];  // the slices > 0, for slice 0's warp
    extern __shared__ __align__(16) uint8_t table[];  // P::kTABLE_BYTES

    const int tid = threadIdx.x;
    const int warpId = tid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int nt = (blockDim.x >> 5) / slices;  // weight tiles per CTA
    const int ntile = warpId % nt;
    const int slice = warpId / nt;
    if constexpr (P::kTABLE_BYTES > 0 && kTableInit)
    {
        P::initTable(table, tid, blockDim.x);
        __syncthreads();
    }

    const int nBase = (cta * nt + ntile) * 16;
    const int nkb = (K + 127) >> 7;
    const int rowBytes = K * P::kCODE_BITS / 8;
    const int nMine = (nkb - slice + slices - 1) / slices;  // blocks slice, slice + slices, ...
    const int cEnd = rowBytes - t * (P::kCB / 4);             // code chunk offsets below this exist
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
    const uint16_t* xRow[kXT];  // activation row 8j + g from quad lane t's k offset
    bool xOk[kXT];
#pragma unroll
    for (int j = 0; j < kXT; ++j)
    {
        xOk[j] = 8 * j + g < M;
        if constexpr (std::is_same_v<R, StreamRows>)
        {
            xRow[j] = X + static_cast<size_t>(xOk[j] ? 8 * j + g : 0) * K + 32 * t;  // the dense kernels' SASS
        }
        else
        {
            xRow[j] = rows.x(X, xOk[j] ? 8 * j + g : 0, K) + 32 * t;
        }
    }
    const int xEnd = K - 32 * t;  // activation chunk offsets below this exist

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
    // The activation fragments of a block (B operand, steps 2q and 2q+1 in xf[j][q]); zero past M, K.
    auto loadX = [&](uint4 (&xf)[kXT][4], int kb) {
#pragma unroll
        for (int j = 0; j < kXT; ++j)
        {
#pragma unroll
            for (int q = 0; q < 4; ++q)
            {
                const int k = 128 * kb + 8 * q;
                xf[j][q] = (xOk[j] && k < xEnd) ? __ldg(reinterpret_cast<const uint4*>(xRow[j] + k))
                                                : make_uint4(0u, 0u, 0u, 0u);
            }
        }
    };

    float acc[kXT][4];
#pragma unroll
    for (int j = 0; j < kXT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            acc[j][e] = 0.0f;

    // One block: the same steps, operands and mma order as projGemmKernel's doBlock.
    auto doBlock = [&](const Slot& s, int kb) {
        uint4 xf[kXT][4];
        loadX(xf, kb);
        uint32_t codes[2][kCW];
        typename P::BlockState bs[2];
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
        {
#pragma unroll
            for (int v = 0; v < kCV; ++v)
            {
                codes[hr][4 * v + 0] = s.c[hr][v].x;
                codes[hr][4 * v + 1] = s.c[hr][v].y;
                codes[hr][4 * v + 2] = s.c[hr][v].z;
                codes[hr][4 * v + 3] = s.c[hr][v].w;
            }
            bs[hr] = P::streamState(p, s.m[hr]);
        }
        float part[P::kPER_BLOCK ? kXT : 1][4];
        if constexpr (P::kPER_BLOCK)
        {
#pragma unroll
            for (int j = 0; j < kXT; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    part[j][e] = 0.0f;
        }
#pragma unroll
        for (int q = 0; q < 4; ++q)
        {
#pragma unroll
            for (int h = 0; h < 2; ++h)
            {
                uint32_t a0, a1, a2, a3;
                P::dequant(codes[0], bs[0], 2 * q + h, table, lane, a0, a2);
                P::dequant(codes[1], bs[1], 2 * q + h, table, lane, a1, a3);
#pragma unroll
                for (int j = 0; j < kXT; ++j)
                {
                    const uint32_t b0 = h ? xf[j][q].z : xf[j][q].x;
                    const uint32_t b1 = h ? xf[j][q].w : xf[j][q].y;
                    if constexpr (P::kPER_BLOCK)
                    {
                        mma16816<P::kF16>(part[j], a0, a1, a2, a3, b0, b1);
                    }
                    else
                    {
                        mma16816<P::kF16>(acc[j], a0, a1, a2, a3, b0, b1);
                    }
                }
            }
        }
        if constexpr (P::kPER_BLOCK)
        {
#pragma unroll
            for (int hr = 0; hr < 2; ++hr)
            {
                const float cs = nOk[hr] ? P::blockColScale(p, nRow[hr], kb) : 0.0f;
#pragma unroll
                for (int j = 0; j < kXT; ++j)
                {
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                    {
                        const int m = 8 * j + 2 * t + e;
                        const float rs = m < M ? P::blockRowScale(p, rows.scaleRow(m), kb) : 0.0f;
                        float& a = acc[j][2 * hr + e];
                        a = __fadd_rn(a, __fmul_rn(__fmul_rn(part[j][2 * hr + e], rs), cs));
                    }
                }
            }
        }
    };

    // Weights kD - 1 blocks ahead: a slot is refilled right after its block is consumed (in place,
    // no register copies). The activations come from L1 / L2 at the start of each block (a ring of
    // them measured slower: registers).
    Slot ring[kD];
#pragma unroll
    for (int d = 0; d < kD; ++d)
    {
        if (d < nMine)
        {
            load(ring[d], slice + slices * d);
        }
    }
    for (int base = 0; base < nMine; base += kD)
    {
#pragma unroll
        for (int d = 0; d < kD; ++d)
        {
            const int i = base + d;
            if (i < nMine)
            {
                doBlock(ring[d], slice + slices * i);
                if (i + kD < nMine)
                {
                    load(ring[d], slice + slices * (i + kD));
                }
            }
        }
    }

    // The slices, summed from the left: ((0 + acc_0) + acc_1) + ...
    if (slice > 0)
    {
#pragma unroll
        for (int j = 0; j < kXT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                red[warpId - nt][j * 4 + e][lane] = acc[j][e];
    }
    __syncthreads();
    if (slice > 0)
    {
        return;
    }
#pragma unroll
    for (int j = 0; j < kXT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            acc[j][e] = __fadd_rn(0.0f, acc[j][e]);  // as projGemmKernel's fold, from tot = +0
    for (int sl = 1; sl < slices; ++sl)
    {
#pragma unroll
        for (int j = 0; j < kXT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[j][e] = __fadd_rn(acc[j][e], red[(sl - 1) * nt + ntile][j * 4 + e][lane]);
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
        for (int j = 0; j < kXT; ++j)
        {
#pragma unroll
            for (int e = 0; e < 2; ++e)
            {
                const int m = 8 * j + 2 * t + e;
                if (m < M)
                {
                    float v = P::finish(p, acc[j][2 * hr + e], rows.scaleRow(m), n);
                    if (p.bias != nullptr)
                    {
                        v = __fadd_rn(v, bias);
                    }
                    rows.store(Y, yDtype, m, N, n, v);
                }
            }
        }
    }
}

template <class P, int kXT, int kD>
__global__ void __launch_bounds__(kSTREAM_THREADS) projStreamKernel(const typename P::Params p,
    const uint16_t* __restrict__ X, void* __restrict__ Y, int M, int N, int K, int32_t yDtype, int slices)
{
    projStreamTile<P, kXT, kD>(p, X, Y, M, N, K, yDtype, slices, blockIdx.x);
}

/*
 * The streaming tier at kXT activation tiles: one CTA per weight tile (slices warps), or, for
 * policies with a shared-memory table (built once per CTA), 8 warps over 8 / slices tiles. The ring
 * depth only changes how many loads are in flight, never the arithmetic.
 */
template <class P, int kXT>
inline cudaError_t launchProjStream(const typename P::Params& p, const uint16_t* X, void* y, int m, int n, int k,
    int32_t yDtype, int slices, cudaStream_t stream)
{
    if (slices < 1 || slices > kSTREAM_THREADS / 32)
    {
        return cudaErrorInvalidValue;
    }
    const int nt = P::kTABLE_BYTES > 0 ? (kSTREAM_THREADS / 32) / slices : 1;
    // Two blocks per warp's ring: measured on the H200 (benchmarks/results/kernels-20261129-*), a
    // deeper ring costs more in occupancy (registers) than it gains in loads in flight.
    // Measured again on the H200: 3 and 4 blocks deep gave geomean 1.19 / 1.13 of the best anchor at
    // M = 1 against 1.01 (decode-variants-20261203-1754-f27d1ef.md: faster at 8B-down and 32B-up, where
    // the grid leaves registers free, 1.3-1.4x slower at 8B-up, 8B-qkv and 32B-down); each warp's next
    // block's activations prefetched into L1 (prefetch.global.L1), 1.06 / 0.74 / 0.70 / 1.12 against
    // 1.02 / 0.69 / 0.60 / 0.98 at M = 1 / 4 / 8 / 16, its long-scoreboard stalls unchanged (ncu,
    // decode-variants-20261203-1801-04af27e.md, ncu-stall-20261203-1801-04af27e.txt). Both removed.
    auto kern = projStreamKernel<P, kXT, 2>;
    const dim3 grid((n + 16 * nt - 1) / (16 * nt));
    kern<<<grid, 32 * nt * slices, P::kTABLE_BYTES, stream>>>(p, X, y, m, n, k, yDtype, slices);
    return cudaGetLastError();
}

/* Launch the tier that serves m rows (projTiers.h), with the weight shape's slices. wg: X is the
 * wgmma operand (projWgmma.cuh's layout; the launcher asked useWgmma), else row-major [m, k]; wgPart:
 * the workspace for the wgmma tier's slice split (wgPartBytes). */
template <class P>
inline cudaError_t dispatchProjGemm(const typename P::Params& p, const uint16_t* X, bool wg, void* wgPart, void* y,
    int m, int n, int k, int32_t yDtype, cudaStream_t stream)
{
    const int slices = projSlices(n, k);
    if constexpr (!P::kPER_BLOCK)
    {
        if (wg)
        {
            return launchProjWgmma<P>(p, X, y, wgPart, m, n, k, yDtype, slices, stream);
        }
    }
    if constexpr (P::kCODE_BITS == 8)
    {
        // FP8 codes dequantize cheaply, so they are bound by loads in flight: the shared-memory
        // pipeline (deep cp.async prefetch, no registers) streams them faster than the register
        // ring, except for narrow weights (8 slices) at m <= 8, where one warp per slice wins
        // (both measured on the H200: benchmarks/results/kernels-20261129-2018-66f3759.json against
        // kernels-20261129-2035-66f3759.md). Same bits.
        const bool ring = m <= 8 && slices == 8;
        if (m <= 8 && !ring)
        {
            return launchProjGemm<P, TileConfig<1, 1, 2, 2, 4>>(p, X, y, m, n, k, yDtype, slices, stream);
        }
        if (m > 8 && m <= 16)
        {
            return launchProjGemm<P, TileConfig<1, 2, 2, 2, 4>>(p, X, y, m, n, k, yDtype, slices, stream);
        }
    }
    if constexpr (P::kCODE_BITS == 4 && P::kTABLE_BYTES == 0)
    {
        // The producer-fed shared-memory ring (projStreamRing.cuh) where streamRingFor says, same bits.
        const StreamVariant sv = m <= 16 ? streamVariant() : StreamVariant::kDefault;
        if (m <= 16 && streamRingFor(sv, m, (k + 127) / 128, slices))
        {
            bool served = false;
            const cudaError_t e = m > 8 ? launchProjStreamRing<P, 2>(p, X, y, m, n, k, yDtype, slices, stream, &served)
                                        : launchProjStreamRing<P, 1>(p, X, y, m, n, k, yDtype, slices, stream, &served);
            if (served || e != cudaSuccess)
            {
                return e;
            }
        }
    }
    switch (selectProjTier(m))
    {
    case ProjTier::kM8: return launchProjStream<P, 1>(p, X, y, m, n, k, yDtype, slices, stream);
    case ProjTier::kM16: return launchProjStream<P, 2>(p, X, y, m, n, k, yDtype, slices, stream);
    case ProjTier::kM64: return launchProjGemm<P, typename Tiers<P>::M64>(p, X, y, m, n, k, yDtype, slices, stream);
    default: return launchProjGemm<P, typename Tiers<P>::M128>(p, X, y, m, n, k, yDtype, slices, stream);
    }
}

} // namespace metrale

#endif // METRALE_PROJ_STREAM_CUH
