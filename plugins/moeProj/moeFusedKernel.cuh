/*
 * The fused decode path of the grouped-expert projection (METRALE_MOE_FUSED=1; W4A16 so far): one
 * launch per grouped op, no routing kernels, no workspace for bf16 activations.
 *
 * Every CTA builds the same plan in shared memory from topk_ids (moeFusedPlan): the ascending list
 * of the distinct experts the batch routes to, and each one's slots (a counting sort: per-expert
 * counts, one exclusive scan over the experts, then each valid slot placed by a shared-memory
 * ticket). The CTAs are persistent (as many as are resident) and walk the work items:
 *   combine=0: items (distinct expert, n tile), expert-major. Each item reads its weight tile once
 *     and runs the dense streaming tile (projStreamTile, plugins/common) on the expert's rows in
 *     chunks of 8 (a later chunk re-reads the tile from L2), through a row map (MoeSlotRows) that
 *     points tile row m at the slot's activation row and writes y's [M, top_k, N] row of the slot;
 *   combine=1: items (n tile): the CTA walks the distinct experts in ascending id, and each
 *     output it computes is rounded to the dtype of x and added, times the slot's weight, into the
 *     row's float32 sum in shared memory (MoeCombineRows), from +0 with __fmul_rn / __fadd_rn; the
 *     sums are rounded once into y. No combine launch and no buffer.
 * Skipped slots (ids outside [0, E) or repeated in a row) are not planned; combine=0 writes their
 * rows as zeros.
 *
 * Invariants (bitwise the slot and sorted paths, so the dense op per expert, and row invariance):
 * the tile is the dense kernels' own, with the same slices projSlices(n, k) and the same
 * arithmetic per row (the row map moves only addresses, never an operation, and a row's bits do
 * not depend on its position in the tile or on the rows beside it). The combine visits a row's
 * slots in ascending expert id (the plan's expert order; a row has at most one slot per expert) and
 * rounds each slot's output to the dtype of x before the product, as moeCombineKernel does after
 * reading the stored output. Which slot of an expert sits in which tile row (the tickets' order)
 * changes nothing. So a row's bits depend on its own x row, ids and weights only.
 */
#ifndef METRALE_MOE_FUSED_KERNEL_CUH
#define METRALE_MOE_FUSED_KERNEL_CUH

#include <cstdint>
#include <cstdlib>
#include <cuda_runtime.h>

#include "moeProjKernel.cuh"
#include "projStream.cuh"

namespace metrale
{

constexpr int kMOE_FUSED_MAX_SLOTS = 1024;    // m * top_k the plan holds
constexpr int kMOE_FUSED_MAX_EXPERTS = 1024;  // E the plan counts
constexpr int kMOE_FUSED_MAX_M = 64;          // rows of the combine's shared-memory sums

/* The plan of one launch, in shared memory (every CTA builds the same one). */
struct MoeFusedPlan
{
    int cursor[kMOE_FUSED_MAX_EXPERTS];       // counts, then each expert's next free position
    int slot[kMOE_FUSED_MAX_SLOTS];           // valid slots grouped by expert: slot | (slot / top_k) << 16
    int dExpert[kMOE_FUSED_MAX_EXPERTS];      // distinct expert d's id (ascending in d)
    int dStart[kMOE_FUSED_MAX_EXPERTS + 1];   // its slots: slot[dStart[d] .. dStart[d + 1])
    int scan[kSTREAM_THREADS];
    int distinct;
};

/* The plan; combine=0's skipped slots get zero rows in y (CTA slot % gridDim.x writes slot's). */
__device__ __forceinline__ void moeFusedPlan(MoeFusedPlan& s, const int32_t* __restrict__ ids, int total, int topK,
    int E, uint8_t* zeroY, int rowBytes)
{
    const int tid = threadIdx.x;
    const int T = blockDim.x;
    for (int e = tid; e < E; e += T)
    {
        s.cursor[e] = 0;
    }
    __syncthreads();
    for (int slot = tid; slot < total; slot += T)
    {
        const int e = moeSlotExpert(ids, slot, topK, E);
        if (e >= 0)
        {
            atomicAdd(s.cursor + e, 1);
        }
        else if (zeroY != nullptr && slot % gridDim.x == blockIdx.x)
        {
            for (int i = 0; i < rowBytes; ++i)
            {
                zeroY[static_cast<size_t>(slot) * rowBytes + i] = 0;
            }
        }
    }
    __syncthreads();
    // Exclusive scan of (rows | distinct << 16) over the experts; thread tid owns a run of them.
    const int per = (E + T - 1) / T;
    const int e0 = tid * per;
    const int e1 = min(E, e0 + per);
    int local = 0;
    for (int e = e0; e < e1; ++e)
    {
        const int c = s.cursor[e];
        local += c + (c > 0 ? 1 << 16 : 0);
    }
    s.scan[tid] = local;
    __syncthreads();
    for (int off = 1; off < T; off <<= 1)  // Hillis-Steele inclusive scan
    {
        const int a = tid >= off ? s.scan[tid - off] : 0;
        __syncthreads();
        s.scan[tid] += a;
        __syncthreads();
    }
    int run = s.scan[tid] - local;
    for (int e = e0; e < e1; ++e)
    {
        const int c = s.cursor[e];
        if (c > 0)
        {
            s.dExpert[run >> 16] = e;
            s.dStart[run >> 16] = run & 0xFFFF;
            s.cursor[e] = run & 0xFFFF;
            run += c + (1 << 16);
        }
    }
    if (tid == T - 1)
    {
        s.distinct = run >> 16;
        s.dStart[run >> 16] = run & 0xFFFF;
    }
    __syncthreads();
    for (int slot = tid; slot < total; slot += T)
    {
        const int e = moeSlotExpert(ids, slot, topK, E);
        if (e >= 0)
        {
            s.slot[atomicAdd(s.cursor + e, 1)] = slot | (slot / topK) << 16;
        }
    }
    __syncthreads();
}

/* combine=0: tile row m is the slot of plan entry slots[m] (slot | token row << 16): activation
 * row = the token row (xShift 16) or the slot (xShift 0, x has one row per slot), y row = the slot. */
struct MoeSlotRows
{
    const int* slots;
    int xShift;
    __device__ const uint16_t* x(const uint16_t* X, int m, int K) const
    {
        return X + static_cast<size_t>((slots[m] >> xShift) & 0xFFFF) * K;
    }
    __device__ int scaleRow(int m) const
    {
        return (slots[m] >> xShift) & 0xFFFF;
    }
    __device__ void store(void* Y, int32_t yDtype, int m, int N, int n, float v) const
    {
        storeY(Y, yDtype, static_cast<size_t>(slots[m] & 0xFFFF) * N + n, v);
    }
};

/* v as the dtype of y stores it, read back (storeY, then moeLoad). */
__device__ __forceinline__ float moeRoundTo(int32_t dtype, float v)
{
    if (dtype == kMETRALE_BFLOAT16)
    {
        return __bfloat162float(__float2bfloat16_rn(v));
    }
    if (dtype == kMETRALE_FLOAT16)
    {
        return __half2float(__float2half_rn(v));
    }
    return v;
}

/* combine=1: tile row m is the slot of plan entry slots[m] (activation row = the slot); its output,
 * rounded to the dtype of x, times the slot's weight, is added to its token row's sum acc[row][n - n0]. */
struct MoeCombineRows
{
    const int* slots;
    float* acc;
    const void* w;
    int n0;
    int width;
    __device__ const uint16_t* x(const uint16_t* X, int m, int K) const
    {
        return X + static_cast<size_t>(slots[m] & 0xFFFF) * K;
    }
    __device__ int scaleRow(int m) const
    {
        return slots[m] & 0xFFFF;
    }
    __device__ void store(void*, int32_t yDtype, int m, int, int n, float v) const
    {
        const int s = slots[m] & 0xFFFF;
        float& a = acc[(slots[m] >> 16) * width + (n - n0)];
        a = __fadd_rn(a, __fmul_rn(moeRoundTo(yDtype, v), moeLoad(w, yDtype, static_cast<size_t>(s))));
    }
};

template <class P>
constexpr int moeFusedTilesPerCta()
{
    return P::kTABLE_BYTES > 0 ? kSTREAM_THREADS / 32 : 1;  // at most (slices = 1)
}

/* combine=0: the (distinct expert, n tile) items of this CTA. */
template <class P, class View>
__device__ __forceinline__ void moeFusedExperts(const typename P::Params& p, const View& view,
    const MoeFusedPlan& s, int rowDiv, const uint16_t* __restrict__ X, void* __restrict__ Y, int N, int K,
    int32_t yDtype, int slices, int ctaTiles)
{
    // The expert's parameters in shared memory, not registers (as moeGemmKernel's: 12 fewer live
    // registers in the tile).
    __shared__ typename P::Params pe;
    const int items = s.distinct * ctaTiles;
    for (int item = blockIdx.x; item < items; item += gridDim.x)
    {
        const int d = item / ctaTiles;
        if (threadIdx.x == 0)
        {
            pe = view(p, s.dExpert[d], 0);
        }
        __syncthreads();
        const int end = s.dStart[d + 1];
        for (int r0 = s.dStart[d]; r0 < end; r0 += 8)
        {
            projStreamTile<P, 1, 2, MoeSlotRows>(pe, X, Y, min(8, end - r0), N, K, yDtype, slices,
                item - d * ctaTiles, MoeSlotRows{s.slot + r0, rowDiv == 1 ? 0 : 16});
            __syncthreads();  // the tile's reduction buffer is reused by the next call
        }
    }
}

/* combine=1: the n-tile items of this CTA, every distinct expert in ascending id, the sums in acc. */
template <class P, class View>
__device__ __forceinline__ void moeFusedCombine(const typename P::Params& p, const View& view,
    const MoeFusedPlan& s, float* acc, const void* w, int m, const uint16_t* __restrict__ X,
    void* __restrict__ Y, int N, int K, int32_t yDtype, int slices, int ctaTiles)
{
    __shared__ typename P::Params pe;  // as moeFusedExperts'
    const int width = 16 * ((blockDim.x >> 5) / slices);
    for (int item = blockIdx.x; item < ctaTiles; item += gridDim.x)
    {
        const int n0 = item * width;
        for (int i = threadIdx.x; i < m * width; i += blockDim.x)
        {
            acc[i] = 0.0f;
        }
        __syncthreads();
        for (int d = 0; d < s.distinct; ++d)
        {
            if (threadIdx.x == 0)
            {
                pe = view(p, s.dExpert[d], 0);
            }
            __syncthreads();
            const int end = s.dStart[d + 1];
            for (int r0 = s.dStart[d]; r0 < end; r0 += 8)
            {
                projStreamTile<P, 1, 2, MoeCombineRows>(pe, X, Y, min(8, end - r0), N, K, yDtype, slices, item,
                    MoeCombineRows{s.slot + r0, acc, w, n0, width});
                __syncthreads();  // a row's next expert may sit at another tile row (thread)
            }
        }
        for (int i = threadIdx.x; i < m * width; i += blockDim.x)
        {
            const int n = n0 + i % width;
            if (n < N)
            {
                storeY(Y, yDtype, static_cast<size_t>(i / width) * N + n, acc[i]);
            }
        }
        __syncthreads();
    }
}

/* kCOMBINE: the op's combine (one instantiation each: their registers differ). */
template <class P, class View, int kCOMBINE>
__global__ void __launch_bounds__(kSTREAM_THREADS, 3) moeFusedKernel(const typename P::Params p, const View view,
    const int32_t* __restrict__ ids, const void* __restrict__ w, int m, int topK, int E, int rowDiv, int zeroSkipped,
    const uint16_t* __restrict__ X, void* __restrict__ Y, int N, int K, int32_t yDtype, int slices, int ctaTiles)
{
    __shared__ MoeFusedPlan plan;
    __shared__ float acc[kMOE_FUSED_MAX_M * 16 * moeFusedTilesPerCta<P>()];
    const int yElem = yDtype == kMETRALE_FLOAT32 ? 4 : 2;
    moeFusedPlan(plan, ids, m * topK, topK, E, zeroSkipped ? static_cast<uint8_t*>(Y) : nullptr,
        N * yElem);
    if constexpr (kCOMBINE)
    {
        moeFusedCombine<P>(p, view, plan, acc, w, m, X, Y, N, K, yDtype, slices, ctaTiles);
    }
    else
    {
        moeFusedExperts<P>(p, view, plan, rowDiv, X, Y, N, K, yDtype, slices, ctaTiles);
    }
}

/* Which fused variant serves m rows of top_k slots over E experts (0: none, the slot and sorted
 * paths): METRALE_MOE_FUSED (read at each call, i.e. at CUDA-graph capture) within the plan's bounds.
 *   1: combine=0 in one launch; combine=1 as combine=0 into the workspace (one output row per slot),
 *      then moeCombineKernel (two launches);
 *   2: as 1, with the combine folded into the launch (CTAs own n tiles and walk every expert).
 * A speed choice only: every variant computes the same bits. */
inline int moeFusedMode(int64_t m, int64_t topK, int64_t E)
{
    const char* env = std::getenv("METRALE_MOE_FUSED");
    const int mode = env != nullptr ? std::atoi(env) : 0;
    const bool fits = m <= kMOE_FUSED_MAX_M && m * topK <= kMOE_FUSED_MAX_SLOTS && E <= kMOE_FUSED_MAX_EXPERTS;
    return fits && (mode == 1 || mode == 2) ? mode : 0;
}

/* The fused launch: as many persistent CTAs as are resident, at most one per possible item (an
 * upper bound of the distinct experts, min(m * top_k, E), times the n tiles for combine=0). */
template <class P, class View>
inline cudaError_t launchMoeFused(const typename P::Params& p, const View& view, const int32_t* ids, const void* w,
    int64_t m, int64_t topK, int64_t E, int combine, int rowDiv, int zeroSkipped, const uint16_t* X, void* y, int n,
    int k, int32_t yDtype, cudaStream_t stream)
{
    const int slices = projSlices(n, k);
    if (slices < 1 || slices > kSTREAM_THREADS / 32)
    {
        return cudaErrorInvalidValue;
    }
    const int nt = P::kTABLE_BYTES > 0 ? (kSTREAM_THREADS / 32) / slices : 1;
    const int threads = 32 * nt * slices;
    const int ctaTiles = (n + 16 * nt - 1) / (16 * nt);
    auto kern = combine ? moeFusedKernel<P, View, 1> : moeFusedKernel<P, View, 0>;
    long long resident = 0;
    const cudaError_t e = moeResidentCtas(kern, threads, P::kTABLE_BYTES, resident);
    if (e != cudaSuccess)
    {
        return e;
    }
    const int64_t distinct = m * topK < E ? m * topK : E;
    const int64_t items = combine ? ctaTiles : distinct * ctaTiles;
    const int grid = static_cast<int>(items < resident ? items : resident);
    kern<<<grid, threads, P::kTABLE_BYTES, stream>>>(p, view, ids, w, static_cast<int>(m), static_cast<int>(topK),
        static_cast<int>(E), rowDiv, zeroSkipped, X, y, n, k, yDtype, slices, ctaTiles);
    return cudaGetLastError();
}

/* The fused path (variant `mode`, moeFusedMode) for a run that moeBegin set up as the slot path's
 * (no routing; u.src the activation rows, X their operand). */
template <class P, class View>
inline cudaError_t moeProjectFused(const typename P::Params& p, const View& view, const MoeRun& u, const uint16_t* X,
    int mode)
{
    const int rowDiv = u.combine || u.perSlotOperand ? 1 : static_cast<int>(u.topK);
    const int n = static_cast<int>(u.n);
    const int k = static_cast<int>(u.k);
    if (!u.combine || mode == 2)
    {
        return launchMoeFused<P>(p, view, u.ids, u.topkWeights, u.m, u.topK, u.E, u.combine, rowDiv, !u.combine, X,
            u.y, n, k, u.xDtype, u.stream);
    }
    // Variant 1's combine=1: the slots' outputs in slot order, then the slot path's combine (it skips
    // the skipped slots itself).
    cudaError_t e = launchMoeFused<P>(p, view, u.ids, u.topkWeights, u.m, u.topK, u.E, 0, rowDiv, 0, X,
        u.ws + u.w.ys, n, k, u.xDtype, u.stream);
    if (e != cudaSuccess)
    {
        return e;
    }
    MoePdl plain;  // the fused path runs no PDL kernels (moeBegin)
    return launchMoeCombine(u.ids, u.topkWeights, nullptr, u.ws + u.w.ys, u.xDtype, u.y, u.m, u.topK, u.E, u.n,
        u.stream, u.variant, plain);
}

} // namespace metrale

#endif // METRALE_MOE_FUSED_KERNEL_CUH
