/*
 * The grouped-expert projection (docs/ops.md, "Grouped-expert ops"): y = the dense op of one weight
 * format per (row, routed expert), with the combine over a row's experts for down_proj.
 *
 * Two paths, chosen from m and top_k alone (moeUseSlots; both compute the same bits):
 *
 * The slot path (decode: m * top_k <= kMOE_SLOT_MAX): no routing, no gather, no scatter. At most
 * one pre-pass over x's own rows (bf16 rounding or the activation quantization; none for aligned
 * bf16 x with bf16 activations), then one launch in which CTA (n tile, slot) reads topk_ids itself
 * and runs the dense streaming tile (projStreamTile) on its slot's expert and row, writing y's
 * [M, top_k, N] row directly (combine=0; zeros for a skipped slot) or the slot's output in slot
 * order (combine=1), then the combine. Each expert's weights are read once per slot that chose it,
 * which at these m is about once per distinct expert.
 *
 * The sorted path (larger m), all on the device in the caller's stream (no host synchronization,
 * nothing allocated):
 *   1. one CTA counts the rows of every expert (shared-memory atomics) and scans them into offsets
 *      and a tile schedule (expert, first row) of kBM-row tiles;
 *   2. place every valid (row, slot) at offsets[e] + an atomic ticket and gather its x row there;
 *   3. the format's activation pre-pass over the gathered rows (row-wise: a row's scales come from
 *      the row alone);
 *   4. one launch of the grouped GEMM: CTA (n tile, schedule entry) runs the dense kernels' own tile
 *      (projGemmTile / projStreamTile, plugins/common) on that expert's weights and rows;
 *   5. scatter back to [M, top_k, N] (combine=0), or the combine (combine=1): per row, the slots in
 *      ascending expert id, acc = +0, acc = acc + y * w in float32 (__fmul_rn / __fadd_rn), one
 *      rounding to the dtype of x (moeCombineKernel, or moeCombineWideKernel under
 *      METRALE_MOE_DECODE=wide: the same arithmetic, more CTAs, the loads ahead of the sums).
 *
 * Invariants (row invariance): per expert the arithmetic is the dense op's, operand for operand
 * (the same tile functions, the same slices projSlices(n, k), the weights of that expert); the
 * dense tiles' bits do not depend on a row's position or on how many rows share the tile, so the
 * order the atomics give the rows of an expert changes nothing; the combine's order is fixed by the
 * row's ids. So a row's bits do not depend on the other rows or on the experts they chose.
 * Slots with an id outside [0, E) or repeating an earlier slot's id are skipped (zero output rows
 * for combine=0, no contribution for combine=1).
 */
#ifndef METRALE_MOE_PROJ_KERNEL_CUH
#define METRALE_MOE_PROJ_KERNEL_CUH

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>
#include <cuda_runtime.h>

#include "actQuant.cuh"
#include "projLaunch.cuh"
#include "projStream.cuh"
#include "projWgmma.cuh"

namespace metrale
{

constexpr int kMOE_MAX_TOP_K = 32;
constexpr int kMOE_SCAN_THREADS = 1024;
constexpr int kMOE_MAX_EXPERTS = 8192;  // the routing CTA counts in shared memory
constexpr int kMOE_SLOT_MAX = 64;        // (row, slot) pairs up to which the slot path serves
constexpr int kMOE_STREAM8_MAX = 64;     // rows up to which the sorted path uses 8-row streaming tiles

/* Per-expert element strides of the stacked weight tensors. */
struct ExpertStrides
{
    long long codes;  // bytes
    long long scale;  // elements of weight_scale (floats, or e4m3 bytes)
    long long zp;     // zero-point bytes
    long long bias;   // floats
};

/* The routing state in the workspace (ints). */
struct MoeRouting
{
    int* counts;     // [E]
    int* fill;       // [E]
    int* offsets;    // [E + 1]
    int* numTiles;   // [1]
    int* tileExpert; // [maxTiles]
    int* tileRow0;   // [maxTiles]
    int* posOf;      // [M * top_k]: sorted position of a slot, -1 if skipped
    int* rowExpert;  // [M * top_k]: the expert of sorted row pos (rows < offsets[E])
};

__device__ __forceinline__ int moeSlotExpert(const int32_t* ids, int slot, int topK, int E)
{
    const int id = ids[slot];
    if (id < 0 || id >= E)
    {
        return -1;
    }
    const int first = slot - slot % topK;
    for (int s = first; s < slot; ++s)
    {
        if (ids[s] == id)
        {
            return -1;  // a repeated id: the first slot holding it serves
        }
    }
    return id;
}

/* Programmatic dependent launch (METRALE_MOE_DECODE=pdl / all, moeDecodeVariant; sm_90 code only).
 * The kernels of one grouped op's launch sequence after the first are launched as programmatic
 * dependents of the previous one (moeLaunch): a dependent's CTAs may start once every CTA of the
 * previous kernel has passed griddepcontrol.launch_dependents (or exited), and each of them waits at
 * griddepcontrol.wait until the previous kernel has completed and its memory is visible. Every
 * kernel<kPDL = true> runs moePdlEnter first: the wait, then the trigger, before any global
 * access that can depend on (or be read by) the previous kernel; so kernel i completes only after
 * kernel i - 1 has, and a kernel that reads the outputs of kernel i - 2 (the combine reads the
 * place kernel's posOf) sees them. The trigger's place is a speed choice only (the dependent waits
 * anyway). The first kernel of the sequence is launched plainly (it waits for whatever the stream
 * ran before, as today); in it, without a programmatic launch, the wait returns at once. Only the
 * sm_90a code has the instructions: the kPDL kernels' sm_80 code has no body (moePdlCode), and
 * moePdlSupported launches them only where the module's code is PTX 9.0 or later. SASS (sm_90a):
 * griddepcontrol.wait is ACQBULK, griddepcontrol.launch_dependents PREEXIT, prefetch.global.L2
 * CCTL.E.PF2. */
__device__ __forceinline__ void moePdlWait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void moePdlTrigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Whether a kernel<kPDL> has a body in this code: not the kPDL = true kernels' sm_80 code (no
 * griddepcontrol; moePdlSupported never launches them there; a launch would trap). */
template <bool kPDL>
__device__ __forceinline__ bool moePdlCode()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    if constexpr (kPDL)
    {
        __trap();
        return false;
    }
#endif
    return true;
}

/* A kernel<kPDL>'s first step: `if (!moePdlEnter<kPDL>()) return;` (false: no body, moePdlCode). */
template <bool kPDL>
__device__ __forceinline__ bool moePdlEnter()
{
    if (!moePdlCode<kPDL>())
    {
        return false;
    }
    if constexpr (kPDL)
    {
        moePdlWait();
        moePdlTrigger();
    }
    return true;
}

/* The scan kernels' first step: counts[e] (shared memory) the valid slots of expert e (atomics over every
 * slot), fill = 0 and carry = {0, 0}, ending with a CTA barrier. */
__device__ __forceinline__ void moeCountRows(const int32_t* __restrict__ ids, int total, int topK, int E, int* counts,
    int* fill, int* carry)
{
    const int tid = threadIdx.x;
    for (int e = tid; e < E; e += kMOE_SCAN_THREADS)
    {
        counts[e] = 0;
        fill[e] = 0;
    }
    if (tid == 0)
    {
        carry[0] = 0;
        carry[1] = 0;
    }
    __syncthreads();
    for (int slot = tid; slot < total; slot += kMOE_SCAN_THREADS)
    {
        const int e = moeSlotExpert(ids, slot, topK, E);
        if (e >= 0)
        {
            atomicAdd(counts + e, 1);
        }
    }
    __syncthreads();
}

/* The scan kernels' per-expert output: expert e (< E) has c rows from rowStart and tiles schedule entries
 * from tileStart, of bm rows each from row0. */
__device__ __forceinline__ void moeScheduleExpert(const MoeRouting& r, int e, int E, int c, int rowStart,
    int tileStart, int tiles, int row0, int bm)
{
    if (e < E)
    {
        r.counts[e] = c;
        r.offsets[e] = rowStart;
        for (int t = 0; t < tiles; ++t)
        {
            r.tileExpert[tileStart + t] = e;
            r.tileRow0[tileStart + t] = row0 + t * bm;
        }
    }
}

/* One CTA: each expert's rows (shared-memory atomics over every slot), then exclusive scans of the
 * counts (row offsets) and of the kBM-row tiles per expert, the tile schedule, and fill = 0. One
 * launch instead of a memset, a counting grid and a scan (decode is launch-bound). */
template <bool kPDL = false>
static __global__ void __launch_bounds__(kMOE_SCAN_THREADS) moeScanKernel(const int32_t* __restrict__ ids,
    int total, int topK, MoeRouting r, int E, int bm)
{
    if (!moePdlEnter<kPDL>())  // the sequence's first kernel: the trigger only lets the place kernel start
    {
        return;
    }
    extern __shared__ int counts[];  // [E]
    __shared__ int rowSum[kMOE_SCAN_THREADS];
    __shared__ int tileSum[kMOE_SCAN_THREADS];
    __shared__ int carry[2];
    const int tid = threadIdx.x;
    moeCountRows(ids, total, topK, E, counts, r.fill, carry);
    for (int base = 0; base < E; base += kMOE_SCAN_THREADS)
    {
        const int e = base + tid;
        const int c = e < E ? counts[e] : 0;
        const int tiles = (c + bm - 1) / bm;
        rowSum[tid] = c;
        tileSum[tid] = tiles;
        __syncthreads();
        for (int off = 1; off < kMOE_SCAN_THREADS; off <<= 1)  // Hillis-Steele inclusive scan
        {
            const int a = tid >= off ? rowSum[tid - off] : 0;
            const int b = tid >= off ? tileSum[tid - off] : 0;
            __syncthreads();
            rowSum[tid] += a;
            tileSum[tid] += b;
            __syncthreads();
        }
        const int rowStart = carry[0] + rowSum[tid] - c;
        const int tileStart = carry[1] + tileSum[tid] - tiles;
        moeScheduleExpert(r, e, E, c, rowStart, tileStart, tiles, rowStart, bm);
        __syncthreads();
        if (tid == kMOE_SCAN_THREADS - 1)
        {
            carry[0] += rowSum[tid];
            carry[1] += tileSum[tid];
        }
        __syncthreads();
    }
    if (tid == 0)
    {
        r.offsets[E] = carry[0];
        *r.numTiles = carry[1];
    }
}

/* An inclusive scan of v over the CTA's kMOE_SCAN_THREADS threads (buf: one int a thread); every
 * thread may reuse buf once it returns. */
__device__ __forceinline__ int moeBlockScan(int* buf, int v)
{
    const int tid = threadIdx.x;
    buf[tid] = v;
    __syncthreads();
    for (int off = 1; off < kMOE_SCAN_THREADS; off <<= 1)  // Hillis-Steele
    {
        const int a = tid >= off ? buf[tid - off] : 0;
        __syncthreads();
        buf[tid] += a;
        __syncthreads();
    }
    const int r = buf[tid];
    __syncthreads();
    return r;
}

/* moeScanKernel for the wgmma tier (moeWgmmaKernel): the same counts and row offsets, and a schedule
 * of bm-row tiles per expert that start on the operand's 8-row groups: expert e's tiles begin at
 * offsets[e] rounded down to a multiple of 8 (its first tile may hold up to 7 rows of the previous
 * expert, which it computes and never stores) and step by bm until they pass offsets[e + 1]. */
static __global__ void __launch_bounds__(kMOE_SCAN_THREADS) moeScanWgKernel(const int32_t* __restrict__ ids,
    int total, int topK, MoeRouting r, int E, int bm)
{
    extern __shared__ int counts[];  // [E]
    __shared__ int buf[kMOE_SCAN_THREADS];
    __shared__ int carry[2];
    const int tid = threadIdx.x;
    moeCountRows(ids, total, topK, E, counts, r.fill, carry);
    for (int base = 0; base < E; base += kMOE_SCAN_THREADS)
    {
        const int e = base + tid;
        const int c = e < E ? counts[e] : 0;
        const int rowStart = carry[0] + moeBlockScan(buf, c) - c;
        const int a = rowStart & ~7;
        const int tiles = c > 0 ? (rowStart + c - a + bm - 1) / bm : 0;
        const int tileStart = carry[1] + moeBlockScan(buf, tiles) - tiles;
        moeScheduleExpert(r, e, E, c, rowStart, tileStart, tiles, a, bm);
        __syncthreads();
        if (tid == kMOE_SCAN_THREADS - 1)
        {
            carry[0] = rowStart + c;
            carry[1] = tileStart + tiles;
        }
        __syncthreads();
    }
    if (tid == 0)
    {
        r.offsets[E] = carry[0];
        *r.numTiles = carry[1];
    }
}

/* One CTA per slot: its sorted position, and its x row (combine=0: row slot / topK) gathered there. */
template <bool kPDL = false>
static __global__ void moePlaceKernel(const int32_t* __restrict__ ids, int topK, int E, int combine, MoeRouting r,
    const uint16_t* __restrict__ x, int rowWords, uint16_t* __restrict__ xs)
{
    if (!moePdlEnter<kPDL>())
    {
        return;
    }
    __shared__ int pos;
    const int slot = blockIdx.x;
    if (threadIdx.x == 0)
    {
        const int e = moeSlotExpert(ids, slot, topK, E);
        pos = e >= 0 ? r.offsets[e] + atomicAdd(r.fill + e, 1) : -1;
        r.posOf[slot] = pos;
        if (pos >= 0)
        {
            r.rowExpert[pos] = e;
        }
    }
    __syncthreads();
    if (pos < 0)
    {
        return;
    }
    const size_t src = static_cast<size_t>(combine ? slot : slot / topK) * rowWords;
    const size_t dst = static_cast<size_t>(pos) * rowWords;
    if (rowWords % 8 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0)
    {
        const uint4* s4 = reinterpret_cast<const uint4*>(x + src);
        uint4* d4 = reinterpret_cast<uint4*>(xs + dst);
        for (int i = threadIdx.x; i < rowWords / 8; i += blockDim.x)
        {
            d4[i] = s4[i];
        }
        return;
    }
    for (int i = threadIdx.x; i < rowWords; i += blockDim.x)
    {
        xs[dst + i] = x[src + i];
    }
}

__device__ __forceinline__ float moeLoad(const void* p, int32_t dtype, size_t i)
{
    if (dtype == kMETRALE_FLOAT32)
    {
        return static_cast<const float*>(p)[i];
    }
    if (dtype == kMETRALE_FLOAT16)
    {
        return __half2float(static_cast<const __half*>(p)[i]);
    }
    return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

/* combine=0: y[slot] = ys[posOf[slot]] (zeros for a skipped slot). */
template <bool kPDL = false>
static __global__ void moeScatterKernel(const int* __restrict__ posOf, const uint16_t* __restrict__ ys, int rowWords,
    uint16_t* __restrict__ y)
{
    if (!moePdlEnter<kPDL>())
    {
        return;
    }
    const int slot = blockIdx.x;
    const int pos = posOf[slot];
    const size_t dst = static_cast<size_t>(slot) * rowWords;
    if (rowWords % 8 == 0 && (reinterpret_cast<uintptr_t>(y) & 15) == 0)
    {
        const uint4* s4 = reinterpret_cast<const uint4*>(ys + static_cast<size_t>(pos < 0 ? 0 : pos) * rowWords);
        uint4* d4 = reinterpret_cast<uint4*>(y + dst);
        for (int i = threadIdx.x; i < rowWords / 8; i += blockDim.x)
        {
            d4[i] = pos >= 0 ? s4[i] : make_uint4(0u, 0u, 0u, 0u);
        }
        return;
    }
    for (int i = threadIdx.x; i < rowWords; i += blockDim.x)
    {
        y[dst + i] = pos >= 0 ? ys[static_cast<size_t>(pos) * rowWords + i] : uint16_t(0);
    }
}

/* The CTAs of kern (threads a CTA, smem dynamic bytes) that the device holds at once: SMs x the
 * occupancy's CTAs an SM (at least one): a persistent grid's size. */
template <class K>
inline cudaError_t moeResidentCtas(K kern, int threads, int smem, long long& resident)
{
    int dev = 0;
    int sms = 0;
    int perSm = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
    {
        e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    }
    if (e == cudaSuccess)
    {
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kern, threads, smem);
    }
    resident = static_cast<long long>(perSm > 0 ? perSm : 1) * sms;
    return e;
}

/* Row m's valid slots in ascending expert id: their output rows of ys (spos) and weights (sw), and
 * their count (the return value). One thread. */
__device__ __forceinline__ int moeCombineOrder(const int32_t* __restrict__ ids, const void* __restrict__ w,
    const int* __restrict__ posOf, int32_t dtype, int m, int topK, int E, int* spos, float* sw)
{
    int sid[kMOE_MAX_TOP_K];
    int c = 0;
    for (int j = 0; j < topK; ++j)
    {
        const int slot = m * topK + j;
        // The sorted path's position of the slot, or (slot path: posOf == nullptr) the slot itself.
        const int pos = posOf != nullptr ? posOf[slot] : (moeSlotExpert(ids, slot, topK, E) >= 0 ? slot : -1);
        if (pos < 0)
        {
            continue;
        }
        const int id = ids[slot];
        const float wj = moeLoad(w, dtype, static_cast<size_t>(slot));
        int i = c++;
        while (i > 0 && sid[i - 1] > id)  // insertion sort by expert id
        {
            sid[i] = sid[i - 1];
            spos[i] = spos[i - 1];
            sw[i] = sw[i - 1];
            --i;
        }
        sid[i] = id;
        spos[i] = pos;
        sw[i] = wj;
    }
    return c;
}

/* combine=1: y[m] = sum over the row's valid slots in ascending expert id of ys * w, float32 from +0. */
static __global__ void moeCombineKernel(const int32_t* __restrict__ ids, const void* __restrict__ w,
    const int* __restrict__ posOf, const void* __restrict__ ys, int32_t dtype, void* __restrict__ y, int topK, int E,
    int N)
{
    __shared__ int spos[kMOE_MAX_TOP_K];
    __shared__ float sw[kMOE_MAX_TOP_K];
    __shared__ int cnt;
    const int m = blockIdx.x;
    if (threadIdx.x == 0)
    {
        cnt = moeCombineOrder(ids, w, posOf, dtype, m, topK, E, spos, sw);
    }
    __syncthreads();
    for (int n = threadIdx.x; n < N; n += blockDim.x)
    {
        float acc = 0.0f;
        for (int j = 0; j < cnt; ++j)
        {
            acc = __fadd_rn(acc, __fmul_rn(moeLoad(ys, dtype, static_cast<size_t>(spos[j]) * N + n), sw[j]));
        }
        storeY(y, dtype, static_cast<size_t>(m) * N + n, acc);
    }
}

constexpr int kMOE_COMBINE_WIDE_THREADS = 256;

template <class T>
__device__ __forceinline__ float moeToFloat(T v)
{
    if constexpr (std::is_same_v<T, float>)
    {
        return v;
    }
    else if constexpr (std::is_same_v<T, __half>)
    {
        return __half2float(v);
    }
    else
    {
        return __bfloat162float(v);
    }
}

constexpr int kMOE_COMBINE_WIDE_CHUNK = 16;  // slot outputs loaded together (Qwen3 MoE: top_k 8 and 10)

/* moeCombineKernel's sum for output n of row m, with the row's slot outputs loaded kMOE_COMBINE_WIDE_CHUNK
 * at a time, unconditionally (spos is padded past the row's c slots with the last one's row: a
 * repeated load, not used), before their products: one memory latency per chunk, not one per few
 * slots and per output. The same products and sums, in the same order, as moeCombineKernel's (the
 * registers only hold the values it reads one by one). */
template <class T>
__device__ __forceinline__ float moeCombineWideSum(const T* __restrict__ ys, const int* spos, const float* sw, int c,
    int N, int n)
{
    float acc = 0.0f;
    for (int base = 0; base < c; base += kMOE_COMBINE_WIDE_CHUNK)
    {
        int row[kMOE_COMBINE_WIDE_CHUNK];
#pragma unroll
        for (int i = 0; i < kMOE_COMBINE_WIDE_CHUNK; i += 4)
        {
            const int4 r4 = *reinterpret_cast<const int4*>(spos + base + i);
            row[i] = r4.x;
            row[i + 1] = r4.y;
            row[i + 2] = r4.z;
            row[i + 3] = r4.w;
        }
        float v[kMOE_COMBINE_WIDE_CHUNK];
#pragma unroll
        for (int i = 0; i < kMOE_COMBINE_WIDE_CHUNK; ++i)
        {
            v[i] = moeToFloat(ys[static_cast<size_t>(row[i]) * N + n]);
        }
#pragma unroll
        for (int i = 0; i < kMOE_COMBINE_WIDE_CHUNK; ++i)
        {
            if (base + i < c)
            {
                acc = __fadd_rn(acc, __fmul_rn(v[i], sw[base + i]));
            }
        }
    }
    return acc;
}

/* combine=1, the wide form (METRALE_MOE_DECODE=wide, moeDecodeVariant): CTA (row m, block of
 * kMOE_COMBINE_WIDE_THREADS outputs), one output per thread, the row's order from moeCombineOrder
 * as in moeCombineKernel. moeCombineKernel's one CTA per row walks the N outputs in N / 128 steps,
 * each waiting for its slots' loads: at M = 1 one CTA and ~2 N / 128 dependent L2 round trips on
 * the layer's critical path. The same bits (the arithmetic above), N / 256 CTAs per row instead. */
template <bool kPDL = false>
static __global__ void __launch_bounds__(kMOE_COMBINE_WIDE_THREADS) moeCombineWideKernel(
    const int32_t* __restrict__ ids, const void* __restrict__ w, const int* __restrict__ posOf,
    const void* __restrict__ ys, int32_t dtype, void* __restrict__ y, int topK, int E, int N)
{
    // kPDL on the slot path (posOf == nullptr): the row's order reads only topk_ids and the weights,
    // the router's (complete before the op's plainly launched first kernel), so it is built before
    // the wait, under the slot GEMM's tail; the sorted path's posOf is the place kernel's.
    if (!moePdlCode<kPDL>())
    {
        return;
    }
    const bool orderFirst = kPDL && posOf == nullptr;
    if (kPDL && !orderFirst)
    {
        moePdlWait();
        moePdlTrigger();
    }
    __shared__ __align__(16) int spos[kMOE_MAX_TOP_K];
    __shared__ float sw[kMOE_MAX_TOP_K];
    __shared__ int cnt;
    static_assert(kMOE_MAX_TOP_K % kMOE_COMBINE_WIDE_CHUNK == 0 && kMOE_COMBINE_WIDE_CHUNK % 4 == 0, "whole chunks");
    const int m = blockIdx.x;
    if (threadIdx.x == 0)
    {
        const int c = moeCombineOrder(ids, w, posOf, dtype, m, topK, E, spos, sw);
        for (int j = c; j < kMOE_MAX_TOP_K; ++j)
        {
            spos[j] = c > 0 ? spos[c - 1] : 0;  // moeCombineWideSum's padding
        }
        cnt = c;
    }
    __syncthreads();
    if (orderFirst)
    {
        moePdlWait();  // ys: the slot GEMM's
        moePdlTrigger();
    }
    const int n = blockIdx.y * kMOE_COMBINE_WIDE_THREADS + threadIdx.x;
    if (n >= N)
    {
        return;
    }
    const int c = cnt;
    float acc;
    if (dtype == kMETRALE_FLOAT32)
    {
        acc = moeCombineWideSum(static_cast<const float*>(ys), spos, sw, c, N, n);
    }
    else if (dtype == kMETRALE_FLOAT16)
    {
        acc = moeCombineWideSum(static_cast<const __half*>(ys), spos, sw, c, N, n);
    }
    else
    {
        acc = moeCombineWideSum(static_cast<const __nv_bfloat16*>(ys), spos, sw, c, N, n);
    }
    storeY(y, dtype, static_cast<size_t>(m) * N + n, acc);
}

/* The decode variants of the grouped launchers (METRALE_MOE_DECODE, read at each launcher call, i.e.
 * at CUDA-graph capture): speed choices only, every variant computes the same bits. A set of flags:
 *   unset (or any other value): the default, auto: wide; PDL on the slot path (M * top_k small);
 *         the grid on the sorted path. The choice measured fastest per path on the H200
 *         (benchmarks/results/moe-layer-20261203-1430-4401552.md: pdl slows the sorted path at M = 64
 *         by up to 12%; moe-layer-20261203-1959-fbd70be.md: W4A4's grid, its e2m1 table built once a
 *         CTA before the PDL wait, 10-16% faster than wide at M = 16 and 64 on both Qwen3 MoE shapes,
 *         where it had been up to 12% slower while every tile rebuilt the table);
 *   base: the kernels before the variants (0: the one-CTA-a-row combine, plain launches);
 *   wide: combine=1's sum on moeCombineWideKernel (every path: slot, sorted, fused variant 1);
 *   pdl:  wide, and the kernels of each grouped op's launch sequence as programmatic dependents of
 *         each other (moePdlWait; sm_90 code only, elsewhere wide; not the fused path);
 *   grid: wide, and the sorted path's streaming GEMM on a grid of the resident CTAs walking the
 *         schedule's tiles (moeStreamGridKernel), none launched past numTiles;
 *   all:  wide, pdl and grid. */
constexpr unsigned kMOE_DECODE_WIDE = 1u;
constexpr unsigned kMOE_DECODE_PDL = 2u;
constexpr unsigned kMOE_DECODE_GRID = 4u;
constexpr unsigned kMOE_DECODE_AUTO = 8u;  // PDL and the grid chosen per path and policy (above)
constexpr unsigned kMOE_DECODE_DEFAULT = kMOE_DECODE_WIDE | kMOE_DECODE_AUTO;

/* Whether the variant flags `variant` (moeDecodeVariant) turn on `flag` (kMOE_DECODE_PDL or
 * kMOE_DECODE_GRID) for a launch on the slot path (slots) or the sorted path: the auto default's
 * choice per path lives here alone. */
inline bool moeDecodeOn(unsigned variant, unsigned flag, bool slots)
{
    if ((variant & flag) != 0)
    {
        return true;
    }
    if ((variant & kMOE_DECODE_AUTO) == 0)
    {
        return false;
    }
    return flag == kMOE_DECODE_PDL ? slots : !slots;
}

inline unsigned moeDecodeVariant()
{
    const char* env = std::getenv("METRALE_MOE_DECODE");
    if (env == nullptr)
    {
        return kMOE_DECODE_DEFAULT;
    }
    if (std::strcmp(env, "base") == 0)
    {
        return 0u;
    }
    if (std::strcmp(env, "wide") == 0)
    {
        return kMOE_DECODE_WIDE;
    }
    if (std::strcmp(env, "pdl") == 0)
    {
        return kMOE_DECODE_WIDE | kMOE_DECODE_PDL;
    }
    if (std::strcmp(env, "grid") == 0)
    {
        return kMOE_DECODE_WIDE | kMOE_DECODE_GRID;
    }
    if (std::strcmp(env, "all") == 0)
    {
        return kMOE_DECODE_WIDE | kMOE_DECODE_PDL | kMOE_DECODE_GRID;
    }
    return kMOE_DECODE_DEFAULT;
}

/* Whether this device runs the PDL kernels' griddepcontrol instructions: the module's code for it
 * is the sm_90a machine code (PTX 9.0), not the sm_80 code or its PTX (no griddepcontrol: a
 * programmatic launch of it would not wait). Host only. */
inline bool moePdlSupported()
{
    cudaFuncAttributes a{};
    return cudaFuncGetAttributes(&a, moeScatterKernel<true>) == cudaSuccess && a.ptxVersion >= 90;
}

/* kern<<<grid, block, smem, stream>>>(args...), or (pdl) the same launch as a programmatic dependent
 * of the stream's previous kernel (cudaLaunchAttributeProgrammaticStreamSerialization; captured into
 * a CUDA graph as a programmatic dependency edge). */
template <class... Exp, class... Act>
inline cudaError_t moeLaunch(bool pdl, void (*kern)(Exp...), dim3 grid, dim3 block, size_t smem,
    cudaStream_t stream, Act&&... args)
{
    if (!pdl)
    {
        kern<<<grid, block, smem, stream>>>(std::forward<Act>(args)...);
        return cudaGetLastError();
    }
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kern, std::forward<Act>(args)...);
    const cudaError_t last = cudaGetLastError();  // and an earlier launch's error, as the plain path's check
    return e != cudaSuccess ? e : last;
}

/* The PDL state of one grouped op's launch sequence: whether it runs the PDL kernels, and how many
 * of its kernels were launched (the first is launched plainly). */
struct MoePdl
{
    bool on = false;
    int launches = 0;
    // Whether the next launch is a programmatic dependent (counts it).
    bool next()
    {
        return on && launches++ > 0;
    }
};

/* One kernel of a grouped op's launch sequence: `plain` launched plainly where the sequence runs no
 * PDL kernels, else `dependent` (its kPDL = true form, moePdlEnter) through moeLaunch as the
 * sequence's next launch. The two take the same arguments. */
template <class KP, class KD, class... Act>
inline cudaError_t moeLaunchIn(MoePdl& pdl, KP plain, KD dependent, dim3 grid, dim3 block, size_t smem,
    cudaStream_t stream, Act&&... args)
{
    if (pdl.on)
    {
        return moeLaunch(pdl.next(), dependent, grid, block, smem, stream, std::forward<Act>(args)...);
    }
    return moeLaunch(false, plain, grid, block, smem, stream, std::forward<Act>(args)...);
}

/* combine=1's sum over ys (posOf: the sorted path's positions, nullptr on the slot path); variant:
 * the run's moeDecodeVariant flags; pdl: the op's PDL state. */
inline cudaError_t launchMoeCombine(const int32_t* ids, const void* topkWeights, const int* posOf, const void* ys,
    int32_t xDtype, void* y, int64_t m, int64_t topK, int64_t E, int64_t n, cudaStream_t stream, unsigned variant,
    MoePdl& pdl)
{
    if (variant & kMOE_DECODE_WIDE)
    {
        const dim3 grid(static_cast<unsigned>(m),
            static_cast<unsigned>((n + kMOE_COMBINE_WIDE_THREADS - 1) / kMOE_COMBINE_WIDE_THREADS));
        return moeLaunchIn(pdl, moeCombineWideKernel<false>, moeCombineWideKernel<true>, grid,
            dim3(kMOE_COMBINE_WIDE_THREADS), 0, stream, ids, topkWeights, posOf, ys, xDtype, y,
            static_cast<int>(topK), static_cast<int>(E), static_cast<int>(n));
    }
    moeCombineKernel<<<static_cast<int>(m), 128, 0, stream>>>(ids, topkWeights, posOf, ys, xDtype, y,
        static_cast<int>(topK), static_cast<int>(E), static_cast<int>(n));
    return cudaGetLastError();
}

/* The grouped GEMM on the shared-memory tier C: CTA (n tile, schedule entry). View(p, e, r0) is the
 * policy's parameters for expert e's weights with the row scales shifted to row r0 (r0 = 0 here:
 * the tile addresses the sorted rows by their index). */
template <class P, class C, class View>
__global__ void __launch_bounds__(C::kTHREADS, 1) moeGemmKernel(const typename P::Params p, const View view,
    const MoeRouting r, const uint16_t* __restrict__ X, uint8_t* __restrict__ Y, int yElem, int N, int K,
    int32_t yDtype, int slices)
{
    const int tile = blockIdx.y;
    if (tile >= *r.numTiles)
    {
        return;
    }
    const int e = r.tileExpert[tile];
    const int r0 = r.tileRow0[tile];
    const int rows = min(C::kBM, r.offsets[e + 1] - r0);
    // The expert's parameters in shared memory, not registers: the dense tile runs at the register
    // limit with its parameters in the constant bank, and 12 more live registers spill it.
    __shared__ typename P::Params pe;
    if (threadIdx.x == 0)
    {
        pe = view(p, e, 0);
    }
    __syncthreads();
    // Rows [r0, r0 + rows) of the sorted operand and output: the tile's own row bound and origin, so
    // the pointers (and the row scales the policies index by row) stay the kernel's parameters.
    projGemmTile<P, C>(pe, X, Y, r0 + rows, N, K, yDtype, slices, blockIdx.x * C::kBN, r0);
}

/* The grouped GEMM on the streaming tier (tiles of 8 kXT rows): CTA (n tile, schedule entry). */
template <class P, int kXT, class View, bool kPDL = false>
__global__ void __launch_bounds__(kSTREAM_THREADS) moeStreamKernel(const typename P::Params p, const View view,
    const MoeRouting r, const uint16_t* __restrict__ X, uint8_t* __restrict__ Y, int yElem, int N, int K,
    int32_t yDtype, int slices)
{
    if (!moePdlEnter<kPDL>())  // the schedule, the operand rows: the previous kernels'
    {
        return;
    }
    const int tile = blockIdx.y;
    if (tile >= *r.numTiles)
    {
        return;
    }
    const int e = r.tileExpert[tile];
    const int r0 = r.tileRow0[tile];
    const int rows = min(8 * kXT, r.offsets[e + 1] - r0);
    const typename P::Params pe = view(p, e, r0);
    projStreamTile<P, kXT, 2>(pe, X + static_cast<size_t>(r0) * K, Y + static_cast<size_t>(r0) * N * yElem, rows,
        N, K, yDtype, slices, blockIdx.x);
}

/*
 * The grouped GEMM on the dense kernels' wgmma tier (policies with the deep shared-memory mainloop,
 * WgDeep: W4A16; sm_90a): persistent CTAs, one an SM, walk the items (schedule tile, n tile), tile-major,
 * blockIdx.x, + gridDim.x, ..., the ring's slot and phase carried from item to item as the dense
 * kernel's kPersist walk does. An item is projWgmmaKernel's tile (produceWgmma / consumeWgmmaDeep, the
 * same calls) on its expert's weights (view) and the token tile's kN rows of the sorted operand Xw
 * (wgOperandOffset layout over all mg groups), from the 8-aligned tileRow0 (moeScanWgKernel); its
 * epilogue stores the rows of [offsets[e], offsets[e + 1]) only. Row invariance is the dense tier's:
 * a row's output depends on its own activations and its expert's weights alone (wgmma's token columns
 * are independent; the k order and slice sums are projWgmmaKernel's), so it is bitwise the dense
 * kernel of its expert whichever rows share its tile.
 */
template <class P, int kN, int kST, class View>
__global__ void __launch_bounds__(kWG_THREADS, 1) moeWgmmaKernel(const typename P::Params p, const View view,
    const MoeRouting r, const uint8_t* __restrict__ Xw, void* __restrict__ Y, int N, int K, int32_t yDtype,
    int slices, int mg)
{
#ifdef METRALE_SM90A
    static_assert(WgDeep<P>::value, "the deep shared-memory mainloop");
    using L = WgLayout<P, kN, kST, true>;
    extern __shared__ __align__(128) uint8_t smem[];
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::kBar);
    uint64_t* empty = full + kST;
    uint8_t* table = smem + L::kTable;
    const int tid = threadIdx.x;
    const int nkb = (K + 127) >> 7;
    const int gx = (N + kWG_ROWS - 1) / kWG_ROWS;
    const int items = *r.numTiles * gx;
    wgRingInit<P, kST>(full, empty, 1 + 128, table);  // as projWgmmaKernel's shared-memory path
    int slot = 0;
    uint32_t phase = 0;
    if ((tid >> 5) >= 4 * kWG_CONSUMERS)
    {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWG_PRODUCER_REGS));
        int filled = 0;
        for (int item = static_cast<int>(blockIdx.x); item < items; item += static_cast<int>(gridDim.x))
        {
            const int tile = item / gx;
            const int n0 = (item - tile * gx) * kWG_ROWS;
            produceWgmma<P, kN, kST, true>(view(p, r.tileExpert[tile], 0), Xw, smem, full, empty, false, mg, N, K,
                slices, nkb, r.tileRow0[tile], n0, slot, phase, filled);
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");
    }
    else
    {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kWG_CONSUMER_REGS));
        for (int item = static_cast<int>(blockIdx.x); item < items; item += static_cast<int>(gridDim.x))
        {
            const int tile = item / gx;
            const int n0 = (item - tile * gx) * kWG_ROWS;
            const int e = r.tileExpert[tile];
            const int m0 = r.tileRow0[tile];
            const int lo = max(m0, r.offsets[e]);
            const int hi = min(m0 + kN, r.offsets[e + 1]);
            consumeWgmmaDeep<P, kN, kST, true>(view(p, e, 0), smem, full, empty, table, Y, nullptr, hi, N, K, yDtype,
                slices, nkb, m0, n0, slot, phase, lo);
        }
    }
#else
    __trap();  // launched only where moeWgmmaAvailable() found sm_90a machine code
#endif
}

/*
 * The same on the register path of the wgmma tier (policies whose consumers stream their codes from
 * global memory, WgSmemCodes false: W4A4): CTA (n tile, schedule tile), the CTAs past numTiles exit,
 * each CTA projWgmmaKernel's register-path tile (its producer's activation copies, consumeWgmmaRegs)
 * on its expert's weights, storing the rows of [offsets[e], offsets[e + 1]) only. The same invariance
 * argument as moeWgmmaKernel's.
 */
template <class P, int kN, int kST, class View>
__global__ void __launch_bounds__(kWG_THREADS, 1) moeWgmmaRegsKernel(const typename P::Params p, const View view,
    const MoeRouting r, const uint8_t* __restrict__ Xw, void* __restrict__ Y, int N, int K, int32_t yDtype,
    int slices, int mg)
{
#ifdef METRALE_SM90A
    static_assert(!WgSmemCodes<P>::value, "the register path");
    const int tile = blockIdx.y;
    if (tile >= *r.numTiles)
    {
        return;
    }
    using L = WgLayout<P, kN, kST>;
    extern __shared__ __align__(128) uint8_t smem[];
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::kBar);
    uint64_t* empty = full + kST;
    uint8_t* table = smem + L::kTable;
    const int tid = threadIdx.x;
    const int nkb = (K + 127) >> 7;
    const int e = r.tileExpert[tile];
    const int m0 = r.tileRow0[tile];
    const int n0 = blockIdx.x * kWG_ROWS;
    wgRingInit<P, kST>(full, empty, 1, table);  // as projWgmmaKernel's register path
    if ((tid >> 5) >= 4 * kWG_CONSUMERS)
    {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWG_PRODUCER_REGS_R));
        if (tid == 128 * kWG_CONSUMERS)
        {
            const int rows = min(kN, 8 * mg - m0);
            const uint32_t bytes = static_cast<uint32_t>(rows) * 256u;
            SliceCursor cur(nkb, slices);
            produceStages<kST>(cur, nkb, full, empty, [&](int slot, int kb) {
                mbarExpectTx(&full[slot], bytes);
                bulkCopy(smem + slot * L::kStage, Xw + (static_cast<size_t>(kb) * mg + (m0 >> 3)) * 2048, bytes,
                    &full[slot]);
            });
        }
    }
    else
    {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kWG_CONSUMER_REGS_R));
        const int lo = max(m0, r.offsets[e]);
        const int hi = min(m0 + kN, r.offsets[e + 1]);
        consumeWgmmaRegs<P, kN, kST, true>(view(p, e, 0), smem, full, empty, table, Y, nullptr, hi, N, K, yDtype,
            slices, nkb, m0, n0, lo);
    }
#else
    __trap();  // launched only where moeWgmmaAvailable() found sm_90a machine code
#endif
}

/* moeStreamKernel on a grid of about the resident CTAs (METRALE_MOE_DECODE=grid / all; one row of
 * CTAs): they walk the schedule's numTiles x (n tiles) items in moeStreamKernel's grid order (n tile
 * fastest), CTA b taking items b, b + gridDim.x, ...: no CTA is launched for the rows past numTiles
 * (moeStreamKernel's grid has maxTiles rows, the ones past numTiles read it and exit). Each item is
 * moeStreamKernel's CTA for it, operand for operand (the same projStreamTile call with the same n
 * tile index), so the same bits; a barrier between items orders the reuse of the tile's shared
 * memory. The minimum-blocks bound keeps moeStreamKernel's residency at kXT = 1 (80 registers at
 * sm_90a against its 79, no spill; unbounded, the loop's live values take 119: 2 CTAs per SM, not 3),
 * and 2 CTAs of 256 threads at kXT = 2 (~120 registers against 101: 192-thread CTAs 2 per SM, not 3). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define METRALE_MOE_GRID_MIN_BLOCKS(P, kXT) 1  // sm_80: bounded, it spills; unbounded, ~110 registers at kXT = 1
#else
// Per-block scales (W8A8 block128: moeStreamKernel 114 / 126 registers) keep 2 / 1 CTAs of 256 threads.
#define METRALE_MOE_GRID_MIN_BLOCKS(P, kXT) (P::kPER_BLOCK ? ((kXT) == 1 ? 2 : 1) : ((kXT) == 1 ? 3 : 2))
#endif
template <class P, int kXT, class View, bool kPDL = false>
__global__ void __launch_bounds__(kSTREAM_THREADS, METRALE_MOE_GRID_MIN_BLOCKS(P, kXT)) moeStreamGridKernel(
    const typename P::Params p, const View view, const MoeRouting r, const uint16_t* __restrict__ X,
    uint8_t* __restrict__ Y, int yElem, int N, int K, int32_t yDtype, int slices)
{
    if constexpr (P::kTABLE_BYTES > 0)
    {
        // The policy's table once a CTA, not once an item (projStreamTile's kTableInit false below),
        // and before the PDL wait: it reads nothing the previous kernel writes.
        extern __shared__ __align__(16) uint8_t table[];
        P::initTable(table, threadIdx.x, blockDim.x);
        __syncthreads();
    }
    if (!moePdlEnter<kPDL>())
    {
        return;
    }
    const int nt = (blockDim.x >> 5) / slices;     // weight tiles per CTA, as projStreamTile's
    const int nx = (N + 16 * nt - 1) / (16 * nt);  // moeStreamKernel's gridDim.x
    const int items = *r.numTiles * nx;
#pragma unroll 1
    for (int i = blockIdx.x; i < items; i += gridDim.x)
    {
        const int tile = i / nx;
        const int e = r.tileExpert[tile];
        const int r0 = r.tileRow0[tile];
        const int rows = min(8 * kXT, r.offsets[e + 1] - r0);
        const typename P::Params pe = view(p, e, r0);
        projStreamTile<P, kXT, 2, StreamRows, false>(pe, X + static_cast<size_t>(r0) * K,
            Y + static_cast<size_t>(r0) * N * yElem, rows, N, K, yDtype, slices, i - tile * nx);
        __syncthreads();  // the next item's slice sums overwrite this one's shared memory
    }
}

/* The slot kernel<kPDL>'s head start: the CTA's weight code rows (projStreamTile's rows n0 .. n0 + 16 nt - 1
 * of the expert, contiguous) prefetched into the L2 before the wait. */
template <class P>
__device__ __forceinline__ void moePrefetchCodes(const uint8_t* codes, int N, int K, int slices, int cta)
{
    const int nt = (blockDim.x >> 5) / slices;
    const int rowBytes = K * P::kCODE_BITS / 8;
    const int n0 = cta * nt * 16;
    const int n1 = min(N, n0 + nt * 16);
    const uint8_t* base = codes + static_cast<long long>(n0) * rowBytes;
    const int bytes = (n1 - n0) * rowBytes;
    for (int off = threadIdx.x * 128; off < bytes; off += blockDim.x * 128)
    {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(base + off));
    }
}

/* The slot path's GEMM: CTA (n tile, slot) runs the dense streaming tile on the slot's expert and
 * activation row (row slot / rowDiv of X: rowDiv = top_k when the slots of a row share x's row) into
 * output row `slot` of Y. A skipped slot (bad or repeated id) writes zeros when zeroSkipped.
 * kPDL: topk_ids and the weights are read before the wait: the ids are the router's, complete before
 * the op's first kernel was (plainly) launched; only X (the pre-pass's) and Y wait. */
template <class P, class View, bool kPDL = false>
__global__ void __launch_bounds__(kSTREAM_THREADS) moeSlotKernel(const typename P::Params p, const View view,
    const int32_t* __restrict__ ids, int topK, int E, int rowDiv, int zeroSkipped, const uint16_t* __restrict__ X,
    uint8_t* __restrict__ Y, int yElem, int N, int K, int32_t yDtype, int slices)
{
    const int slot = blockIdx.y;
    const int e = moeSlotExpert(ids, slot, topK, E);
    if constexpr (kPDL)
    {
        if (!moePdlCode<kPDL>())
        {
            return;
        }
        if (e >= 0)
        {
            moePrefetchCodes<P>(view(p, e, slot / rowDiv).codes, N, K, slices, blockIdx.x);
        }
        moePdlWait();
        moePdlTrigger();
    }
    uint8_t* y = Y + static_cast<size_t>(slot) * N * yElem;
    if (e < 0)
    {
        if (zeroSkipped)
        {
            const int nt = P::kTABLE_BYTES > 0 ? (kSTREAM_THREADS / 32) / slices : 1;
            const int n0 = blockIdx.x * nt * 16;
            for (int i = threadIdx.x; i < nt * 16 * yElem && n0 * yElem + i < N * yElem; i += blockDim.x)
            {
                y[static_cast<size_t>(n0) * yElem + i] = 0;
            }
        }
        return;
    }
    const int row = slot / rowDiv;
    const typename P::Params pe = view(p, e, row);
    projStreamTile<P, 1, 2>(pe, X + static_cast<size_t>(row) * K, y, 1, N, K, yDtype, slices, blockIdx.x);
}

/* Whether the slot path serves m rows of top_k slots: a function of m and top_k only. Both paths
 * compute the same bits, so the bound is a speed choice; METRALE_MOE_SLOT_MAX (read at each call,
 * i.e. at CUDA-graph capture) overrides kMOE_SLOT_MAX for benchmarks/bench_moe.py's comparison. */
inline bool moeUseSlots(int64_t m, int64_t topK)
{
    const char* env = std::getenv("METRALE_MOE_SLOT_MAX");
    const long long limit = env != nullptr ? std::atoll(env) : kMOE_SLOT_MAX;
    return m * topK <= limit;
}

/* Which grouped tier serves m tokens: rows per tile (the schedule's kBM). Every tier computes the
 * same bits; this only changes the layout. */
enum class MoeTier : int
{
    kStream8 = 0,   // m <= 64: 8-row streaming tiles (decode: few rows per expert; an expert with more
                    // rows takes several tiles)
    kStream16 = 1,  // m <= 128: 16-row streaming tiles
    kGemm = 2,      // larger: the weight-reuse shared-memory tier
    kWgmma64 = 3,   // larger, WgDeep policies on sm_90a (moeTierFor): the wgmma tier, 64-token tiles
    kWgmma128 = 4,  // the same with 128-token tiles
    kWgmmaFp8 = 5,  // W8A8 on the FP8 wgmma kernel (moeFp8Kernel.cuh), the sorted path at every m, its
                    // token tile the launcher's (moeFp8TokenTile)
};

/* The tiers whose schedule is moeScanWgKernel's (token tiles on the operand's 8-row groups). */
inline bool moeWgmmaTier(MoeTier t)
{
    return t == MoeTier::kWgmma64 || t == MoeTier::kWgmma128 || t == MoeTier::kWgmmaFp8;
}

inline MoeTier selectMoeTier(int64_t m)
{
    // 8-row tiles up to m = 64: measured 20-30% faster than 16-row tiles at m = 16 and 64 on the H200
    // (benchmarks/results/moe-20261201-1206-433b40a.md, "sorted8"), the extra weight reads of experts with
    // more than 8 rows cost less than the second activation tile of every tile. METRALE_MOE_STREAM8_MAX
    // (read at each call) moves the bound for benchmarks/bench_moe.py's comparison; the workspace
    // is sized for 8-row tiles at every m.
    const char* env = std::getenv("METRALE_MOE_STREAM8_MAX");
    const long long stream8 = env != nullptr ? std::atoll(env) : kMOE_STREAM8_MAX;
    return m <= 8 || (m <= 128 && m <= stream8) ? MoeTier::kStream8 : m <= 128 ? MoeTier::kStream16 : MoeTier::kGemm;
}

template <class P>
inline int moeTileRows(MoeTier t)
{
    return t == MoeTier::kStream8 ? 8 : t == MoeTier::kStream16 ? 16 : t == MoeTier::kWgmma64 ? 64
        : t == MoeTier::kWgmma128 ? 128 : Tiers<P>::M128::kBM;
}

/* The policies the grouped wgmma tier serves: the 4-bit weights (W4A16, W4A4) with per-channel row
 * math (not the per-block policies). W8A8's grouped op keeps its exact f16 products (version 2), which the
 * wgmma tier does not compute, so it keeps the shared-memory tier. */
template <class P>
constexpr bool kMoeWgmmaPolicy = !P::kPER_BLOCK && P::kCODE_BITS == 4;

/* The ring's stages, as the dense launch's: the deep one (launchProjWgmmaDeep) for WgDeep policies, else
 * the register path's (launchProjWgmma). */
template <class P, int kN>
constexpr int moeWgStages()
{
    if constexpr (WgDeep<P>::value)
    {
        return wgStages<P, kN, kN == 128 ? 6 : 8, true>();
    }
    else
    {
        return wgStages<P, kN, kN == 128 ? 4 : 6>();
    }
}

/* Whether this device runs the grouped wgmma kernel of <P, View> (its sm_90a code was loaded). */
template <class P, class View>
inline bool moeWgmmaAvailable()
{
    if constexpr (WgDeep<P>::value)
    {
        return sm90aKernelLoaded<moeWgmmaKernel<P, 64, moeWgStages<P, 64>(), View>>();
    }
    else
    {
        return sm90aKernelLoaded<moeWgmmaRegsKernel<P, 64, moeWgStages<P, 64>(), View>>();
    }
}

/* The tier of policy P's grouped launch at m tokens of top_k slots over E experts: selectMoeTier's, but
 * past m = 128 the wgmma tier (the W4A16 and W4A4 launchers ask) on a device that runs it, its token tile
 * 128 where the experts average 96 rows or more, else 64. METRALE_MOE_WGMMA (read at each call) "0"
 * keeps selectMoeTier's shared-memory tier, "64" / "128" forces the token tile, for the benchmark's
 * comparison. Every tier gives the same bits; a speed choice of (m, top_k, E) and the device only. */
template <class P, class View>
inline MoeTier moeTierFor(int64_t m, int64_t topK, int64_t E)
{
    const MoeTier t = selectMoeTier(m);
    if constexpr (kMoeWgmmaPolicy<P>)
    {
        const char* env = std::getenv("METRALE_MOE_WGMMA");
        if (t != MoeTier::kGemm || (env != nullptr && std::strcmp(env, "0") == 0) || !moeWgmmaAvailable<P, View>())
        {
            return t;
        }
        if (env != nullptr && (std::strcmp(env, "64") == 0 || std::strcmp(env, "128") == 0))
        {
            return env[0] == '6' ? MoeTier::kWgmma64 : MoeTier::kWgmma128;
        }
        return m * topK >= 96 * E ? MoeTier::kWgmma128 : MoeTier::kWgmma64;
    }
    return t;
}

/* Workspace layout of one launch. */
struct MoeWorkspace
{
    size_t routing = 0;  // ints
    size_t xs = 0;       // gathered raw x rows [total, K] (dtype of x)
    size_t operand = 0;  // the 16-bit operand [total, K]
    size_t scales = 0;   // the pre-pass's row scales
    size_t ys = 0;       // sorted outputs [total, N] (dtype of x)
    size_t bytes = 0;
    int maxTiles = 0;  // the schedule's tiles of the streaming / shared-memory tiers (their grids' rows)
    int tileCap = 0;   // the schedule's capacity: maxTiles, or the wgmma tier's bound where larger
};

inline MoeWorkspace moeWorkspace(int64_t m, int64_t topK, int64_t E, int64_t n, int64_t k, int32_t xDtype,
    int64_t scaleCols, int tileRows, int wgRows = 64)
{
    MoeWorkspace w;
    const int64_t total = m * topK;
    const int64_t elem = xDtype == kMETRALE_FLOAT32 ? 4 : 2;
    // Tiles of tileRows rows, or of 8 (the smallest tier) where the streaming tiers serve m: every
    // streaming tier fits the same workspace.
    const int rows = m <= 128 && tileRows > 8 ? 8 : tileRows;
    const int64_t used = E < total ? E : total;  // experts with rows, at most
    w.maxTiles = static_cast<int>(total / rows + used + 1);
    // moeScanWgKernel's tiles of wgRows rows or more (the smallest it is asked for): sum over the used
    // experts of ceil((rows_e + 7) / wgRows) <= total / wgRows + 2 used.
    const int64_t wgTiles = total / wgRows + 2 * used + 1;
    w.tileCap = static_cast<int>(wgTiles > w.maxTiles ? wgTiles : w.maxTiles);
    const size_t ints = static_cast<size_t>(3 * E + 2 + 2 * static_cast<int64_t>(w.tileCap) + 2 * total);
    w.routing = 0;
    w.xs = alignUp(ints * 4, kWS_ALIGN);
    const size_t gathered = alignUp(static_cast<size_t>(total * k * elem), kWS_ALIGN);
    const size_t wgBytes = alignUp(wgOperandBytes(total, k), kWS_ALIGN);  // moeWgOperandRaw's layout there
    w.operand = w.xs + (gathered > wgBytes ? gathered : wgBytes);
    const size_t rowMajor = operandBytes(total, k);
    w.scales = w.operand + (rowMajor > wgBytes ? rowMajor : wgBytes);  // moeWgOperand's layout there
    // Row scales for whole 8-row groups (the FP8 tier's block-major [blocks, 8 mg] token scales fit too).
    w.ys = w.scales + alignUp(static_cast<size_t>((total + 7) / 8 * 8 * scaleCols * 4), kWS_ALIGN);
    w.bytes = w.ys + alignUp(static_cast<size_t>(total * n * elem), kWS_ALIGN);
    return w;
}

inline MoeRouting moeRouting(void* ws, int64_t E, int maxTiles)
{
    int* i = static_cast<int*>(ws);
    MoeRouting r;
    r.counts = i;
    r.fill = i + E;
    r.offsets = i + 2 * E;
    r.numTiles = i + 3 * E + 1;
    r.tileExpert = i + 3 * E + 2;
    r.tileRow0 = r.tileExpert + maxTiles;
    r.posOf = r.tileRow0 + maxTiles;
    r.rowExpert = nullptr;  // set by moeRoute (it knows the slot count)
    return r;
}

/* Steps 1-2: routing and the gather of x into the workspace (xs). */
inline cudaError_t moeRoute(const int32_t* ids, const void* x, int32_t xDtype, int64_t m, int64_t topK, int64_t E,
    int64_t k, int combine, const MoeWorkspace& w, void* ws, int tileRows, cudaStream_t stream, MoeRouting* out,
    MoePdl& pdl, bool wgTiles = false)
{
    uint8_t* base = static_cast<uint8_t*>(ws);
    MoeRouting r = moeRouting(ws, E, w.tileCap);
    const int total = static_cast<int>(m * topK);
    r.rowExpert = r.posOf + total;
    const int rowWords = static_cast<int>(k * (xDtype == kMETRALE_FLOAT32 ? 2 : 1));
    *out = r;
    cudaError_t e = cudaSuccess;
    if (wgTiles)
    {
        moeScanWgKernel<<<1, kMOE_SCAN_THREADS, static_cast<size_t>(E) * 4, stream>>>(ids, total,
            static_cast<int>(topK), r, static_cast<int>(E), tileRows);
        e = cudaGetLastError();
    }
    else
    {
        e = moeLaunchIn(pdl, moeScanKernel<false>, moeScanKernel<true>, dim3(1), dim3(kMOE_SCAN_THREADS),
            static_cast<size_t>(E) * 4, stream, ids, total, static_cast<int>(topK), r, static_cast<int>(E), tileRows);
    }
    if (e != cudaSuccess)
    {
        return e;
    }
    return moeLaunchIn(pdl, moePlaceKernel<false>, moePlaceKernel<true>, dim3(total), dim3(128), 0, stream, ids,
        static_cast<int>(topK), static_cast<int>(E), combine, r, static_cast<const uint16_t*>(x), rowWords,
        reinterpret_cast<uint16_t*>(base + w.xs));
}

/* The streaming tier's launch: the default grid (n tiles, maxTiles), or (kGrid) min(n tiles x maxTiles,
 * the CTAs resident at once) CTAs in one row; kPDL: as a programmatic dependent (pdl.next()). */
template <class P, int kXT, class View, bool kPDL, bool kGrid>
inline cudaError_t moeLaunchStream(const typename P::Params& p, const View& view, const MoeRouting& r, int maxTiles,
    const uint16_t* X, uint8_t* Y, int yElem, int32_t yDtype, int n, int k, int slices, int nt, MoePdl& pdl,
    cudaStream_t stream)
{
    auto kern = []() {
        if constexpr (kGrid)
        {
            return moeStreamGridKernel<P, kXT, View, kPDL>;
        }
        else
        {
            return moeStreamKernel<P, kXT, View, kPDL>;
        }
    }();
    const int threads = 32 * nt * slices;
    dim3 grid((n + 16 * nt - 1) / (16 * nt), maxTiles);
    if constexpr (kGrid)
    {
        long long resident = 0;
        const cudaError_t e = moeResidentCtas(kern, threads, P::kTABLE_BYTES, resident);
        if (e != cudaSuccess)
        {
            return e;
        }
        const long long items = static_cast<long long>(grid.x) * maxTiles;
        grid = dim3(static_cast<unsigned>(items < resident ? items : resident), 1);
    }
    if constexpr (kPDL)
    {
        return moeLaunch(pdl.next(), kern, grid, dim3(threads), P::kTABLE_BYTES, stream, p, view, r, X, Y, yElem, n,
            k, yDtype, slices);
    }
    else
    {
        kern<<<grid, threads, P::kTABLE_BYTES, stream>>>(p, view, r, X, Y, yElem, n, k, yDtype, slices);
        return cudaGetLastError();
    }
}

/* moeLaunchStream with its PDL and grid choices taken at run time. */
template <class P, int kXT, class View>
inline cudaError_t moeLaunchStreamAs(bool pdl, bool grid, const typename P::Params& p, const View& view,
    const MoeRouting& r, int maxTiles, const uint16_t* X, uint8_t* Y, int yElem, int32_t yDtype, int n, int k,
    int slices, int nt, MoePdl& state, cudaStream_t stream)
{
    if (pdl)
    {
        return grid ? moeLaunchStream<P, kXT, View, true, true>(p, view, r, maxTiles, X, Y, yElem, yDtype, n, k,
                          slices, nt, state, stream)
                    : moeLaunchStream<P, kXT, View, true, false>(p, view, r, maxTiles, X, Y, yElem, yDtype, n, k,
                          slices, nt, state, stream);
    }
    return grid ? moeLaunchStream<P, kXT, View, false, true>(p, view, r, maxTiles, X, Y, yElem, yDtype, n, k, slices,
                      nt, state, stream)
                : moeLaunchStream<P, kXT, View, false, false>(p, view, r, maxTiles, X, Y, yElem, yDtype, n, k, slices,
                      nt, state, stream);
}

/* Step 4 on the tier that serves m tokens (variant: moeDecodeVariant's flags, with PDL only where
 * pdl.on). */
template <class P, class View>
inline cudaError_t moeGemm(const typename P::Params& p, const View& view, const MoeRouting& r, MoeTier tier,
    int maxTiles, const uint16_t* X, void* ys, int32_t yDtype, int n, int k, cudaStream_t stream, unsigned variant,
    MoePdl& pdl)
{
    const int slices = projSlices(n, k);
    const int yElem = yDtype == kMETRALE_FLOAT32 ? 4 : 2;
    uint8_t* Y = static_cast<uint8_t*>(ys);
    if (tier == MoeTier::kGemm)
    {
        using C = typename Tiers<P>::M128;
        using L = GemmLayout<P, C>;
        auto kern = moeGemmKernel<P, C, View>;
        if (L::kSmem > 48 * 1024)
        {
            const cudaError_t e = raiseSmemOnce<moeGemmKernel<P, C, View>>(L::kSmem);
            if (e != cudaSuccess)
            {
                return e;
            }
        }
        const dim3 grid((n + C::kBN - 1) / C::kBN, maxTiles);
        // Plainly launched under pdl too (not a decode tier): it waits for the previous kernel, the next
        // kernel's programmatic launch waits for it.
        pdl.next();
        kern<<<grid, C::kTHREADS, L::kSmem, stream>>>(p, view, r, X, Y, yElem, n, k, yDtype, slices);
        return cudaGetLastError();
    }
    if (slices < 1 || slices > kSTREAM_THREADS / 32)
    {
        return cudaErrorInvalidValue;
    }
    const int nt = P::kTABLE_BYTES > 0 ? (kSTREAM_THREADS / 32) / slices : 1;
    const bool grid = moeDecodeOn(variant, kMOE_DECODE_GRID, false);  // the sorted path
    return tier == MoeTier::kStream8
        ? moeLaunchStreamAs<P, 1, View>(pdl.on, grid, p, view, r, maxTiles, X, Y, yElem, yDtype, n, k, slices, nt,
              pdl, stream)
        : moeLaunchStreamAs<P, 2, View>(pdl.on, grid, p, view, r, maxTiles, X, Y, yElem, yDtype, n, k, slices, nt,
              pdl, stream);
}

/* Step 5. */
inline cudaError_t moeFinish(const int32_t* ids, const void* topkWeights, const MoeRouting& r, const void* ys,
    int32_t xDtype, void* y, int64_t m, int64_t topK, int64_t E, int64_t n, int combine, cudaStream_t stream,
    unsigned variant, MoePdl& pdl)
{
    if (combine)
    {
        return launchMoeCombine(ids, topkWeights, r.posOf, ys, xDtype, y, m, topK, E, n, stream, variant, pdl);
    }
    const int rowWords = static_cast<int>(n * (xDtype == kMETRALE_FLOAT32 ? 2 : 1));
    return moeLaunchIn(pdl, moeScatterKernel<false>, moeScatterKernel<true>, dim3(static_cast<unsigned>(m * topK)),
        dim3(128), 0, stream, r.posOf, static_cast<const uint16_t*>(ys), rowWords, static_cast<uint16_t*>(y));
}

/* One launch's routing state, on either path (moeBegin). */
struct MoeRun
{
    const int32_t* ids;
    const void* topkWeights;
    void* y;
    uint8_t* ws;
    MoeWorkspace w;
    MoeRouting r;
    MoeTier tier;
    bool slots;
    int64_t m, topK, E, n, k;
    int combine;
    int32_t xDtype;
    cudaStream_t stream;
    // The activation rows the pre-pass reads (x itself on the slot path, the gathered rows on the
    // sorted path), their count, and whether they are 16-byte aligned bf16 rows usable as the operand.
    const void* src;
    int64_t rows;
    bool srcIsOperand;
    // Slot path, combine=0: the pre-pass wrote one operand row per slot (a per-expert activation
    // scale makes a row's operand depend on the slot's expert), not one per x row.
    bool perSlotOperand;
    // METRALE_MOE_DECODE's flags at this call (moeDecodeVariant), and the PDL state of the op's
    // launch sequence (on: the pdl flag on a device that runs it, not the fused path).
    unsigned variant;
    MoePdl pdl;
};

/* Steps 1-2 on the sorted path; nothing on the slot path. */
inline cudaError_t moeBegin(const void* x, int32_t xDtype, const int32_t* ids, const void* topkWeights, void* y,
    int64_t m, int64_t topK, int64_t E, int64_t n, int64_t k, int combine, const MoeWorkspace& w, void* ws,
    int tileRows, cudaStream_t stream, MoeRun* run, bool forceSlots = false, int tier = -1)
{
    MoeRun& u = *run;
    u.ids = ids;
    u.topkWeights = topkWeights;
    u.y = y;
    u.ws = static_cast<uint8_t*>(ws);
    u.w = w;
    u.tier = tier >= 0 ? static_cast<MoeTier>(tier) : selectMoeTier(m);  // tier: the launcher's moeTierFor
    // forceSlots: the fused path (moeFusedKernel.cuh); the FP8 tier is the sorted path at every m
    u.slots = forceSlots || (u.tier != MoeTier::kWgmmaFp8 && moeUseSlots(m, topK));
    u.m = m;
    u.topK = topK;
    u.E = E;
    u.n = n;
    u.k = k;
    u.combine = combine;
    u.xDtype = xDtype;
    u.stream = stream;
    u.r = MoeRouting{};
    u.perSlotOperand = false;
    u.variant = moeDecodeVariant();
    u.pdl = MoePdl{};
    u.pdl.on = moeDecodeOn(u.variant, kMOE_DECODE_PDL, u.slots) && !forceSlots && moePdlSupported()
        && (u.slots || !moeWgmmaTier(u.tier));  // the wgmma tier's sequence is launched plainly
    if (u.slots)
    {
        u.src = x;
        u.rows = combine ? m * topK : m;  // combine=1: x is [M, top_k, K], one row per slot
        u.srcIsOperand = xDtype == kMETRALE_BFLOAT16 && k % 8 == 0 && aligned(x, 16);
        return cudaSuccess;
    }
    u.src = u.ws + w.xs;
    u.rows = m * topK;
    u.srcIsOperand = xDtype == kMETRALE_BFLOAT16;
    return moeRoute(ids, x, xDtype, m, topK, E, k, combine, w, ws, tileRows, stream, &u.r, u.pdl,
        moeWgmmaTier(u.tier));
}

/* bf16(x) for any x dtype, as toBf16Kernel (actQuant.cuh), a kernel of a PDL launch sequence. */
static __global__ void moeToBf16PdlKernel(const void* __restrict__ x, int32_t dtype, __nv_bfloat16* __restrict__ out,
    size_t total)
{
    if (!moePdlEnter<true>())
    {
        return;
    }
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
    {
        out[i] = __float2bfloat16_rn(loadXBf16(x, dtype, i));
    }
}

/* The bf16 operand of the bf16 activation format: the source rows themselves, or bf16(rows). */
inline const uint16_t* moeBf16Operand(MoeRun& u)
{
    if (u.srcIsOperand)
    {
        return static_cast<const uint16_t*>(u.src);
    }
    const size_t count = static_cast<size_t>(u.rows * u.k);
    __nv_bfloat16* out = reinterpret_cast<__nv_bfloat16*>(u.ws + u.w.operand);
    // An error surfaces again at the next launch's cudaGetLastError.
    (void) moeLaunchIn(u.pdl, toBf16Kernel, moeToBf16PdlKernel, dim3(elementwiseBlocks(count)), dim3(kACT_THREADS),
        0, u.stream, u.src, u.xDtype, out, count);
    return reinterpret_cast<const uint16_t*>(out);
}

/* The sorted rows in the wgmma tier's operand layout (u.src: the gathered rows, any dtype, rounded to
 * bf16 as toBf16Kernel does), in the workspace's operand area. */
inline const uint16_t* moeWgOperand(MoeRun& u)
{
    uint16_t* out = reinterpret_cast<uint16_t*>(u.ws + u.w.operand);
    // An error surfaces again at the next launch's cudaGetLastError.
    (void) wgOperand<false>(u.src, u.xDtype, u.rows, u.k, out, u.stream);
    return out;
}

/* A pre-pass's 16-bit operand rows (f16, [u.rows, k] at rows) in the wgmma layout, in the gathered rows'
 * area (xs: read by the pre-pass, free after it; sized for the layout too). */
inline const uint16_t* moeWgOperandRaw(MoeRun& u, const uint16_t* rows)
{
    uint16_t* out = reinterpret_cast<uint16_t*>(u.ws + u.w.xs);
    (void) wgOperand<true>(rows, kMETRALE_FLOAT16, u.rows, u.k, out, u.stream);
    return out;
}

/* One launch of the grouped wgmma kernel kKern (its shared memory smemBytes) over the run's schedule. */
template <auto kKern, class P, class View>
inline cudaError_t moeLaunchWgmma(const typename P::Params& p, const View& view, MoeRun& u, const uint16_t* Xw,
    dim3 grid, int smemBytes, int slices)
{
    const cudaError_t e = raiseSmemOnce<kKern>(smemBytes);
    if (e != cudaSuccess)
    {
        return e;
    }
    kKern<<<grid, kWG_THREADS, smemBytes, u.stream>>>(p, view, u.r, reinterpret_cast<const uint8_t*>(Xw),
        u.ws + u.w.ys, static_cast<int>(u.n), static_cast<int>(u.k), u.xDtype, slices,
        static_cast<int>((u.rows + 7) / 8));
    return cudaGetLastError();
}

/* Step 4 on the wgmma tier, Xw: the sorted rows in the wgmma operand layout (moeWgOperand's,
 * moeWgOperandRaw's). WgDeep policies (W4A16): moeWgmmaKernel, persistent CTAs (one an SM, at most the
 * items the schedule can hold); the others (W4A4): moeWgmmaRegsKernel, CTA (n tile, schedule tile). */
template <class P, class View>
inline cudaError_t moeGemmWgmma(const typename P::Params& p, const View& view, MoeRun& u, const uint16_t* Xw)
{
    if constexpr (kMoeWgmmaPolicy<P>)
    {
        constexpr bool kDeep = WgDeep<P>::value;
        const int n = static_cast<int>(u.n);
        const int slices = projSlices(n, static_cast<int>(u.k));
        const int gx = (n + kWG_ROWS - 1) / kWG_ROWS;
        const dim3 grid = kDeep ? dim3(static_cast<unsigned>(wgPersistentCtas(gx * u.w.tileCap)))
                                : dim3(static_cast<unsigned>(gx), static_cast<unsigned>(u.w.tileCap));
        (void) u.pdl.next();
        constexpr int kS128 = moeWgStages<P, 128>();
        constexpr int kS64 = moeWgStages<P, 64>();
        if constexpr (kDeep)
        {
            return u.tier == MoeTier::kWgmma128
                ? moeLaunchWgmma<moeWgmmaKernel<P, 128, kS128, View>, P>(p, view, u, Xw, grid,
                      WgLayout<P, 128, kS128, true>::kSmem, slices)
                : moeLaunchWgmma<moeWgmmaKernel<P, 64, kS64, View>, P>(p, view, u, Xw, grid,
                      WgLayout<P, 64, kS64, true>::kSmem, slices);
        }
        else
        {
            return u.tier == MoeTier::kWgmma128
                ? moeLaunchWgmma<moeWgmmaRegsKernel<P, 128, kS128, View>, P>(p, view, u, Xw, grid,
                      WgLayout<P, 128, kS128>::kSmem, slices)
                : moeLaunchWgmma<moeWgmmaRegsKernel<P, 64, kS64, View>, P>(p, view, u, Xw, grid,
                      WgLayout<P, 64, kS64>::kSmem, slices);
        }
    }
    else
    {
        return cudaErrorNotSupported;  // moeTierFor gives the wgmma tier to kMoeWgmmaPolicy policies only
    }
}

/* Steps 4-5 on the run's path, with the operand X (rows of u.src's layout; the wgmma tier: moeWgOperand's). */
template <class P, class View>
inline cudaError_t moeProject(const typename P::Params& p, const View& view, MoeRun& u, const uint16_t* X)
{
    if (!u.slots)
    {
        cudaError_t e = moeWgmmaTier(u.tier) ? moeGemmWgmma<P>(p, view, u, X)
            : moeGemm<P>(p, view, u.r, u.tier, u.w.maxTiles, X, u.ws + u.w.ys, u.xDtype,
            static_cast<int>(u.n), static_cast<int>(u.k), u.stream, u.variant, u.pdl);
        if (e != cudaSuccess)
        {
            return e;
        }
        return moeFinish(u.ids, u.topkWeights, u.r, u.ws + u.w.ys, u.xDtype, u.y, u.m, u.topK, u.E, u.n, u.combine,
            u.stream, u.variant, u.pdl);
    }
    const int n = static_cast<int>(u.n);
    const int k = static_cast<int>(u.k);
    const int slices = projSlices(n, k);
    if (slices < 1 || slices > kSTREAM_THREADS / 32)
    {
        return cudaErrorInvalidValue;
    }
    const int nt = P::kTABLE_BYTES > 0 ? (kSTREAM_THREADS / 32) / slices : 1;
    const int yElem = u.xDtype == kMETRALE_FLOAT32 ? 4 : 2;
    const int total = static_cast<int>(u.m * u.topK);
    const dim3 grid((n + 16 * nt - 1) / (16 * nt), total);
    // combine=0 writes y's [M, top_k, N] rows in place; combine=1 the slots' outputs, then the sum.
    uint8_t* out = u.combine ? u.ws + u.w.ys : static_cast<uint8_t*>(u.y);
    const int rowDiv = u.combine || u.perSlotOperand ? 1 : static_cast<int>(u.topK);
    const cudaError_t e = moeLaunchIn(u.pdl, moeSlotKernel<P, View, false>, moeSlotKernel<P, View, true>, grid,
        dim3(32 * nt * slices), P::kTABLE_BYTES, u.stream, p, view, u.ids, static_cast<int>(u.topK),
        static_cast<int>(u.E), rowDiv, u.combine ? 0 : 1, X, out, yElem, n, k, u.xDtype, slices);
    if (e != cudaSuccess || !u.combine)
    {
        return e;
    }
    return launchMoeCombine(u.ids, u.topkWeights, nullptr, u.ws + u.w.ys, u.xDtype, u.y, u.m, u.topK, u.E, u.n,
        u.stream, u.variant, u.pdl);
}

/* Argument checks shared by the three launchers. */
inline cudaError_t moeCheck(const void* x, int32_t xDtype, const int32_t* ids, const void* topkWeights, void* y,
    int64_t m, int64_t topK, int64_t E, int64_t n, int64_t k, int combine)
{
    if (!validShape(m, n, k) || !validDtype(xDtype) || topK < 1 || topK > kMOE_MAX_TOP_K || E < 1
        || E > kMOE_MAX_EXPERTS || m * topK > kMAX_DIM || (combine != 0 && combine != 1))
    {
        return topK > kMOE_MAX_TOP_K || E > kMOE_MAX_EXPERTS ? cudaErrorNotSupported : cudaErrorInvalidValue;
    }
    if (m > 0 && (x == nullptr || ids == nullptr || y == nullptr || (combine && topkWeights == nullptr)))
    {
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

} // namespace metrale

#endif // METRALE_MOE_PROJ_KERNEL_CUH
