/*
 * The ring variant of the weight-streaming tier (m <= 16 rows; sm_90 and later; METRALE_STREAM=ring):
 * the codes come through a shared-memory ring fed by a producer warp with the TMA engine, so the
 * pipeline's depth costs shared memory, not registers, and the consumers' loop holds no address or
 * bounds arithmetic for the codes.
 *
 * Layout. A CTA serves nt = 8 / S weight tiles of 16 rows (S = projSlices, the slices): nt * S
 * consumer warps (warp w: tile w % nt, slice w / nt, as projStreamTile's) and one producer warp.
 * Stage j of the ring holds the 128-k blocks j * S .. j * S + S - 1 (block j * S + s is slice s's
 * i = j-th block) of the CTA's 16 * nt rows: S boxes of [16 * nt rows x 64 bytes], one 2-D tensor
 * copy each (the codes [N, K / 2] as a uint8 tensor map, zero fill past N and past the row's end, so
 * the consumers read zero codes there as projStreamTile's masked loads do). kST stages, released by
 * every consumer lane's arrival on the stage's empty barrier after the block's mma (once its codes are
 * consumed: an arrival right after the LDS can overtake it). Served: K a multiple of 128 (the launcher
 * falls back to projStreamTile otherwise), so no bound checks in the loop: a weight row past N reads
 * row N - 1's meta and an activation row past M reads row M - 1, both feeding only outputs that are
 * never stored. The activations are read from global memory at each block's start, the policy's meta
 * (ringMeta / ringLoad / ringState: loadStreamMeta's and streamState's values) kMD blocks ahead in
 * registers.
 *
 * Invariants (row invariance): the arithmetic is projStreamTile's, operand for operand: each slice's
 * warp accumulates its blocks in ascending order from zero with the same dequantized A fragments,
 * the same B fragments (zero past K; rows past M only reach unstored outputs) and the same mma order; the slices are summed from the
 * left by slice 0's warp, ((0 + acc_0) + acc_1) + ..., and the epilogue is the same. Only where the
 * codes come from differs, so a row's bits are those of every other tier (tests/gpu compares the two
 * variants bitwise at every M <= 16, and the tiers across M).
 */
#ifndef METRALE_PROJ_STREAM_RING_CUH
#define METRALE_PROJ_STREAM_RING_CUH

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <type_traits>

#include "projGemm.cuh"
#include "projWgmma.cuh"

namespace metrale
{

constexpr int kRING_CONSUMERS = 8;  // consumer warps: nt * S <= 8
constexpr int kRING_STAGES = 8;     // 8 x 8 KB of codes in flight per CTA
#ifndef METRALE_RING_MINB1
#define METRALE_RING_MINB1 3
#endif

/* The streaming variant METRALE_STREAM names (read once a launch, so at each graph capture; every
 * variant gives the same bits): unset the default (streamRingFor), "ring" this ring at every m <= 16,
 * anything else projStreamTile's register ring. "ringx", the ring with the activations staged too at
 * m <= 8 (the producer warp's cp.async into 4 stages of 24 KB), gave the same bits but was measured
 * slower on the H200 and removed (benchmarks/results/decode-variants-20261203-1957-fbd70be-ringx.md:
 * geomean ours / best anchor at M = 1 / 4 / 8 ringx 1.39 / 1.22 / 1.45, ring 0.96 / 0.68 / 0.62;
 * Nsight Compute, 8B-down M = 1: 22.1 us against the ring's 15.3, long scoreboard 5.42 against 2.27:
 * its 4 stages left the code copies too few stages ahead, and the activation copies' waits added to
 * the full barrier); its code is in git at fbd70be. */
enum class StreamVariant : int
{
    kDefault,
    kReg,
    kRing,
};
inline StreamVariant streamVariant()
{
    const char* v = std::getenv("METRALE_STREAM");
    if (v == nullptr)
    {
        return StreamVariant::kDefault;
    }
    return std::strcmp(v, "ring") == 0 ? StreamVariant::kRing : StreamVariant::kReg;
}
/* Whether the ring serves m rows of a weight with nkb 128-k blocks in `slices` slices under variant v
 * (the register ring otherwise): ring at every m <= 16, the register ring never; by default
 * at m <= 8 where each slice's warp walks at least kRING_MIN_STAGES stages. Measured
 * on the H200 (decode-variants-20261203-1541-fd9ee50.md and -1754-f27d1ef.md, W4A16, both runs alike):
 * at M = 1 the ring took 0.87 / 0.85 / 0.92 of the register ring's time at 8B-down, 32B-up, 32B-down
 * (12, 20, 25 stages) and 1.08 / 1.06 at 8B-up, 8B-qkv (8, 4 stages: its barriers and producer are a
 * fixed cost a CTA); at M = 8 0.92 / 0.90 / 1.10; at M = 16 within +-3%. */
constexpr int kRING_MIN_STAGES = 12;
inline bool streamRingFor(StreamVariant v, int64_t m, int64_t nkb, int slices)
{
    if (v != StreamVariant::kDefault)
    {
        return v == StreamVariant::kRing;
    }
    return m <= 8 && (nkb + slices - 1) / slices >= kRING_MIN_STAGES;
}

/* The shared memory of the ring kernel: kST stages of 8 KB (S * nt boxes of 16 nt rows x 64 bytes;
 * at S * nt < 8 the tail is unused), the slices' partial sums, the full / empty mbarriers. */
template <int kXT, int kST>
struct RingLayout
{
    static constexpr int kStage = kRING_CONSUMERS * 1024;
    static constexpr int kRed = kST * kStage;
    static constexpr int kBars = kRed + kRING_CONSUMERS * kXT * 4 * 32 * 4;
    static constexpr int kSmem = kBars + 2 * kST * 8;
};

/* The zero point of a W4A16 weight without zero points (the ring's meta reads it unconditionally). */
static __device__ const uint8_t kRingZeroPoint8[1] = {8};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define METRALE_RING_DEVICE 1
/* The 2-D box at (c0 = byte in the row, c1 = row) of the codes' tensor map, completing on bar. */
__device__ __forceinline__ void ringTmaLoad(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar)
{
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            smemAddr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smemAddr(bar))
        : "memory");
}
#endif

__device__ __forceinline__ void ringWait(uint32_t bar, uint32_t parity)
{
    asm volatile(
        "{\n.reg .pred p;\nWAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra WAIT;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
__device__ __forceinline__ void ringArrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ uint4 ringLds(uint32_t addr)
{
    uint4 c;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(c.x), "=r"(c.y), "=r"(c.z), "=r"(c.w) : "r"(addr) : "memory");
    return c;
}

/* One 128-k block of a consumer warp: projStreamTile's doBlock for per-element policies, the same
 * dequantized fragments and the same mma order (steps 2q + h, the weight rows' halves as a0 a2 /
 * a1 a3, then the activation tiles j). */
template <class P, int kXT, int kCW>
__device__ __forceinline__ void ringBlock(float (&acc)[kXT][4], const uint32_t (&codes)[2][kCW],
    const typename P::BlockState (&bs)[2], const uint4 (&xf)[kXT][4], const uint8_t* table, int lane)
{
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
                mma16816<P::kF16>(acc[j], a0, a1, a2, a3, b0, b1);
            }
        }
    }
}

template <class P, int kXT, int kST>
__global__ void __launch_bounds__(32 * (kRING_CONSUMERS + 1), kXT == 1 ? METRALE_RING_MINB1 : 2) projStreamRingKernel(
    const __grid_constant__ CUtensorMap cmap, const typename P::Params p, const uint16_t* __restrict__ X,
    void* __restrict__ Y, int M, int N, int K, int32_t yDtype, int slices)
{
#ifdef METRALE_RING_DEVICE
    static_assert(!P::kPER_BLOCK, "per-element scale policies only");
    constexpr int kCW = P::kCB / 16;
    static_assert(kCW == 4, "one 16-byte code chunk per thread, row and block");
    using L = RingLayout<kXT, kST>;
    extern __shared__ __align__(128) uint8_t ringSmem[];
    uint8_t* smem = ringSmem;
    constexpr int kMD = kXT == 1 ? 3 : 2;  // meta loads this many blocks ahead
    float(*red)[kXT * 4][32] = reinterpret_cast<float(*)[kXT * 4][32]>(smem + L::kRed);
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::kBars);
    uint64_t* empty = full + kST;
    const uint8_t* table = nullptr;  // per-element policies here have no table (launcher check)

    const int tid = threadIdx.x;
    const int warpId = tid >> 5;
    const int lane = tid & 31;
    const int nt = kRING_CONSUMERS / slices;
    const int nCons = nt * slices;
    const int nkb = (K + 127) >> 7;
    const int nG = (nkb + slices - 1) / slices;
    const int rows = 16 * nt;
    if (tid == 0)
    {
        for (int s = 0; s < kST; ++s)
        {
            mbarInit(&full[s], 1);
            mbarInit(&empty[s], 32 * nCons);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warpId >= nCons)
    {
        // The producer: one thread walks the stages, S boxes a stage (fewer in the last group).
        if (warpId == nCons && lane == 0)
        {
            const int row0 = blockIdx.x * rows;
            for (int j = 0; j < nG; ++j)
            {
                const int slot = j % kST;
                if (j >= kST)
                {
                    mbarWait(&empty[slot], ((j / kST) - 1) & 1);
                }
                const int nb = min(slices, nkb - j * slices);
                mbarExpectTx(&full[slot], static_cast<uint32_t>(nb * rows * 64));
                for (int s = 0; s < nb; ++s)
                {
                    ringTmaLoad(smem + slot * L::kStage + s * rows * 64, &cmap, (j * slices + s) * 64, row0,
                        &full[slot]);
                }
            }
        }
        return;
    }

    const int g = lane >> 2;
    const int t = lane & 3;
    const int ntile = warpId % nt;
    const int slice = warpId / nt;
    const int nBase = (blockIdx.x * nt + ntile) * 16;
    const int nMine = (nkb - slice + slices - 1) / slices;  // blocks slice, slice + slices, ...
    int nRow[2];
    typename P::RingMeta rm[2];  // the meta of block i + kMD at step i
    const typename P::RingStep rstep = P::ringStep(p, slices);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
    {
        nRow[hr] = nBase + g + 8 * hr;
        // A row past N computes an output that is never stored: its meta is read from row N - 1.
        rm[hr] = P::ringMeta(p, t, min(nRow[hr], N - 1), slice, kRingZeroPoint8);
    }
    // Activation row 8j + g from quad lane t's k offset. A row past M feeds only output columns that
    // are never stored (the mma's columns are independent), so it reads row M - 1: no predicates.
    const uint16_t* xp[kXT];
#pragma unroll
    for (int j = 0; j < kXT; ++j)
    {
        xp[j] = X + static_cast<size_t>(min(8 * j + g, M - 1)) * K + 128 * slice + 32 * t;
    }
    const int xStep = 128 * slices;
    // This warp's 16-byte chunk of row g (and g + 8) in its slice's box of stage 0.
    const uint32_t cBase = smemAddr(smem + slice * rows * 64 + (ntile * 16 + g) * 64 + t * 16);
    const uint32_t fullBase = smemAddr(full);
    const uint32_t emptyBase = smemAddr(empty);
    const uint32_t zeroMask = blockDim.z - 1u;  // 0: the arrival's dependence on the LDS (step)

    float acc[kXT][4];
#pragma unroll
    for (int j = 0; j < kXT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            acc[j][e] = 0.0f;

    typename P::StreamMeta meta[kMD][2];
#pragma unroll
    for (int d = 0; d < kMD; ++d)
    {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
        {
            meta[d][hr] = P::ringLoad(rm[hr]);
            if (d + 1 < nMine)
            {
                P::ringNext(rm[hr], rstep);
            }
        }
    }

    // Block i of this warp (stage i, meta ring slot d = i % kMD). Every consumer warp takes part in
    // every stage (waits for it, releases it); one whose slice has no block in the last group only
    // releases.
    auto step = [&](int i, int d) {
        const uint32_t slot = static_cast<unsigned>(i) % kST;
        ringWait(fullBase + 8 * slot, (static_cast<unsigned>(i) / kST) & 1u);
        if (i >= nMine)
        {
            ringArrive(emptyBase + 8 * slot);
            return;
        }
        uint32_t codes[2][kCW];
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
        {
            const uint4 c = ringLds(cBase + slot * L::kStage + hr * 8 * 64);
            codes[hr][0] = c.x;
            codes[hr][1] = c.y;
            codes[hr][2] = c.z;
            codes[hr][3] = c.w;
        }
        uint4 xf[kXT][4];
#pragma unroll
        for (int j = 0; j < kXT; ++j)
        {
#pragma unroll
            for (int q = 0; q < 4; ++q)
            {
                xf[j][q] = __ldg(reinterpret_cast<const uint4*>(xp[j] + 8 * q));
            }
            xp[j] += xStep;
        }
        typename P::BlockState bs[2];
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
        {
            bs[hr] = P::ringState(meta[d][hr]);
        }
        if (i + kMD < nMine)
        {
#pragma unroll
            for (int hr = 0; hr < 2; ++hr)
            {
                meta[d][hr] = P::ringLoad(rm[hr]);
                P::ringNext(rm[hr], rstep);
            }
        }
        ringBlock<P, kXT, kCW>(acc, codes, bs, xf, table, lane);
        // Every lane releases the stage once its codes are in registers. SYNCS.ARRIVE waits for no
        // scoreboard, and ptxas hoists an arrival with no operand from the LDS above the code's
        // consumers, right after the LDS (the SASS of e28ca9b): the producer's next copy into the slot
        // then raced the read (on the H200: 12-32 elements of 8B-down M = 13, 16 at 32ab8e0, and 32B-up
        // M = 8 at fd9ee50 and e28ca9b differed). So the arrival's address takes an operand from both
        // LDS results, masked by a zero ptxas cannot fold (blockDim.z - 1: launched with z = 1): it
        // issues only once both loads have returned.
        ringArrive(emptyBase + 8 * slot + ((codes[0][0] | codes[1][0]) & zeroMask));
    };
    int j0 = 0;
    for (; j0 + kMD <= nG; j0 += kMD)
    {
#pragma unroll
        for (int d = 0; d < kMD; ++d)
        {
            step(j0 + d, d);
        }
    }
#pragma unroll
    for (int d = 0; d < kMD - 1; ++d)
    {
        if (j0 + d < nG)
        {
            step(j0 + d, d);
        }
    }

    // The slices, summed from the left: ((0 + acc_0) + acc_1) + ... (projStreamTile's fold).
    if (slice > 0)
    {
#pragma unroll
        for (int j = 0; j < kXT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                red[warpId - nt][j * 4 + e][lane] = acc[j][e];
    }
    asm volatile("bar.sync 1, %0;\n" ::"r"(32 * nCons) : "memory");
    if (slice > 0)
    {
        return;
    }
#pragma unroll
    for (int j = 0; j < kXT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            acc[j][e] = __fadd_rn(0.0f, acc[j][e]);
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
        if (nRow[hr] >= N)
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
                    float v = P::finish(p, acc[j][2 * hr + e], m, n);
                    if (p.bias != nullptr)
                    {
                        v = __fadd_rn(v, bias);
                    }
                    storeY(Y, yDtype, static_cast<size_t>(m) * N + n, v);
                }
            }
        }
    }
#else
    __trap();  // launched only where ringAvailable() found sm_90 machine code
#endif
}

/* The codes [n, k * bits / 8] as a uint8 TMA tensor map: boxes of 64 bytes x rows rows, no swizzle,
 * zero fill outside. The driver's encoder through the runtime's entry point (no link against libcuda). */
inline cudaError_t ringCodesMap(const uint8_t* codes, int64_t n, int64_t rowBytes, int rows, CUtensorMap* map)
{
    static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;  // a race only repeats the lookup
    if (encode == nullptr)
    {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult q{};
        const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
        if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || fn == nullptr)
        {
            return cudaErrorNotSupported;
        }
        encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    }
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(rowBytes), static_cast<cuuint64_t>(n)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(rowBytes)};
    const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(rows)};
    const cuuint32_t elem[2] = {1, 1};
    const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(codes), dims, strides, box,
        elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

/* Whether this device runs the ring kernel (sm_90 machine code loaded). */
template <class P, int kXT>
inline bool ringAvailable()
{
    return sm90aKernelLoaded<projStreamRingKernel<P, kXT, kRING_STAGES>>();
}

/* The ring variant at kXT activation tiles (m <= 8 kXT); false in *served where it does not serve
 * (no sm_90 code, or a policy outside its reach): the caller then runs launchProjStream. */
template <class P, int kXT>
inline cudaError_t launchProjStreamRing(const typename P::Params& p, const uint16_t* X, void* y, int m, int n, int k,
    int32_t yDtype, int slices, cudaStream_t stream, bool* served)
{
    *served = false;
    if constexpr (P::kPER_BLOCK || P::kTABLE_BYTES > 0 || P::kCB != 64 || P::kCODE_BITS != 4)
    {
        return cudaSuccess;
    }
    else
    {
        if (k % 128 != 0 || slices < 1 || slices > kRING_CONSUMERS || !ringAvailable<P, kXT>())
        {
            return cudaSuccess;
        }
        const int nt = kRING_CONSUMERS / slices;
        CUtensorMap map;
        cudaError_t e = ringCodesMap(p.codes, n, static_cast<int64_t>(k) * P::kCODE_BITS / 8, 16 * nt, &map);
        if (e != cudaSuccess)
        {
            return e;
        }
        using L = RingLayout<kXT, kRING_STAGES>;
        e = raiseSmemOnce<projStreamRingKernel<P, kXT, kRING_STAGES>>(L::kSmem);
        if (e != cudaSuccess)
        {
            return e;
        }
        *served = true;
        const dim3 grid((n + 16 * nt - 1) / (16 * nt));
        projStreamRingKernel<P, kXT, kRING_STAGES><<<grid, 32 * (nt * slices + 1), L::kSmem, stream>>>(map, p, X, y,
            m, n, k, yDtype, slices);
        return cudaGetLastError();
    }
}

} // namespace metrale

#endif // METRALE_PROJ_STREAM_RING_CUH
