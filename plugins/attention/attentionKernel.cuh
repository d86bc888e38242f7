/*
 * The metrale Attention kernel: causal grouped-query attention over a KV cache (docs/ops.md,
 * "Attention"), one kernel for prefill (with or without a past), chunked prefill and decode.
 *
 * Invariants (the op's batch and chunking invariance):
 * - A "row" is one (query position, query head) of one (sequence, kv head): row r of the group is
 *   position r / G and head kvHead * G + r % G (G = q_heads / kv_heads). Every row is reduced over
 *   the key blocks 0, 64, 128, ... of its own sequence up to its own position, by the same
 *   instructions in the same order, whatever else shares the launch: the other rows of an mma
 *   tile never enter a row's arithmetic (mma.sync rows are independent; the row max and sum are
 *   within the row's quad), so neither the batch, nor the split of the sequence into prefill
 *   chunks, nor decode (one position, the G heads as rows) changes a row's bits.
 * - Per 64-key block: s = q.k by mma.sync m16n8k16 (fp32 accumulate) from zero over d in steps of
 *   16 ascending; x = s * scaleLog2 (one fp32 multiply); masked keys (key > the row's position)
 *   x = -inf; the online softmax update of attendBlock; P rounded to the input dtype (RNE) and
 *   o = mma(P, V, o * alpha) over the block's keys in steps of 16 ascending.
 * - Every 4 blocks (a 256-key chunk at a fixed absolute position) the chunk's (m, l, o) is folded
 *   into the row's total by foldChunk, in ascending chunk order; a chunk starts from (-inf, 0, 0).
 *   Decode may give each chunk its own CTA (split mode, the partials go through the workspace and
 *   the merge kernel folds them with the same foldChunk) or fold in registers and shared memory
 *   (unsplit): the same float32 operations on the same values, hence the same bits.
 * - Output = total_o / total_l (correctly rounded) + 0 (so -0 becomes +0), rounded to the dtype
 *   (float32 graphs: operands rounded to bf16 first by toBf16Kernel, the output left in float32).
 * - Blocks or chunks past a row's position (other rows of its tile need them) are exact no-ops for
 *   the row: p = 0, alpha = 1 by the equality select, the fold's weight ex2(-inf) = 0.
 * Compiled with -fmad=false: no multiply-add is contracted.
 */
#ifndef METRALE_ATTENTION_KERNEL_CUH
#define METRALE_ATTENTION_KERNEL_CUH

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "projGemm.cuh"

namespace metrale
{
namespace attn
{

constexpr int kBLOCK_KEYS = 64;   // keys per block (the online softmax's step)
constexpr int kCHUNK_BLOCKS = 4;  // blocks per chunk (the fold's step)
constexpr int kCHUNK_KEYS = kBLOCK_KEYS * kCHUNK_BLOCKS;
constexpr int kWARPS = 4;
constexpr int kTHREADS = kWARPS * 32;
constexpr float kNEG_INF = -__builtin_huge_valf();

/* The tile shape for a head dimension: 32 rows a warp (two m16 tiles) up to d = 128, 16 for 256
 * (registers). Only speed depends on it, never bits. */
template <int D>
struct AttnCfg
{
    static constexpr int kM_TILES = D <= 128 ? 2 : 1;
    static constexpr int kWARP_ROWS = 16 * kM_TILES;
    static constexpr int kROWS = kWARPS * kWARP_ROWS;  // rows of one CTA
    static constexpr int kCHUNKS = D / 8;              // 16-byte pieces of a row
    static constexpr int kD_TILES = D / 8;             // n8 tiles of o
    static constexpr int kQ_ELEMS = kROWS * D;
    static constexpr int kKV_ELEMS = kBLOCK_KEYS * D;  // one K (or V) block
    static constexpr size_t kSMEM_CORE = (size_t(kQ_ELEMS) + 4 * size_t(kKV_ELEMS)) * 2;  // Q + 2 stages of K, V
    // The unsplit fold's running (M, L, o), thread-private slots.
    static constexpr size_t kSMEM_TOTAL = (size_t(kROWS) * D + size_t(kM_TILES) * 4 * kTHREADS) * 4;
};

struct AttnParams
{
    const uint16_t* q;  // [B, Hq, S, D]
    const uint16_t* k;  // [B, Hkv, T, D]
    const uint16_t* v;
    void* out;          // [B, S, Hq, D]: 16-bit of the operands' dtype, or float32 (outF32)
    float* wsO;         // split: [B*Hq*S, nChunks, D]
    float* wsML;        // split: [B*Hq*S, nChunks, 2]
    int batch, qHeads, kvHeads, seq, total, group, nChunks;
    int outF32;         // float32 graphs: operands rounded to bf16 by a pre-pass, the output not rounded
    float scaleLog2;
};

__device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Element offset of 16-byte piece c of row r in a [rows][D] tile (XOR swizzle: no bank conflicts). */
template <int D>
__device__ __forceinline__ int swz(int r, int c)
{
    return r * D + ((c ^ (r & 7)) << 3);
}

__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const void* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smemAddr(p)));
}

__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], const void* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smemAddr(p)));
}

template <bool kF16>
__device__ __forceinline__ uint32_t packP(float lo, float hi)
{
    return kF16 ? packHalf2(lo, hi) : packBf16x2(lo, hi);
}

/*
 * The fold of one chunk (m, l, o) into a row's running total (M, L, O), in ascending chunk order.
 * The one definition both the unsplit kernel and the merge kernel call.
 */
struct FoldWeights
{
    float a, b;
};

__device__ __forceinline__ FoldWeights foldWeights(float& M, float& L, float m, float l)
{
    const float mn = fmaxf(M, m);
    FoldWeights w;
    w.a = (M == mn) ? 1.0f : ex2(__fsub_rn(M, mn));
    w.b = (m == mn) ? 1.0f : ex2(__fsub_rn(m, mn));
    L = __fadd_rn(__fmul_rn(L, w.a), __fmul_rn(l, w.b));
    M = mn;
    return w;
}

__device__ __forceinline__ float foldValue(float O, float o, FoldWeights w)
{
    return __fadd_rn(__fmul_rn(O, w.a), __fmul_rn(o, w.b));
}

/* The output value: O / L correctly rounded, then + 0 (-0 -> +0). */
__device__ __forceinline__ float finishValue(float O, float L)
{
    return __fadd_rn(__fdiv_rn(O, L), 0.0f);
}

__device__ __forceinline__ void storeOut2(const AttnParams& p, size_t i, float a, float b, bool f16)
{
    if (p.outF32)
    {
        *reinterpret_cast<float2*>(static_cast<float*>(p.out) + i) = make_float2(a, b);
    }
    else
    {
        *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(p.out) + i) = f16 ? packHalf2(a, b) : packBf16x2(a, b);
    }
}

/* float32 operands -> bf16 (RNE), the float32 graphs' step 0. */
__global__ void toBf16Kernel(const float* __restrict__ src, uint16_t* __restrict__ dst, size_t n2)
{
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n2; i += size_t(gridDim.x) * blockDim.x)
    {
        const float2 v = reinterpret_cast<const float2*>(src)[i];
        reinterpret_cast<uint32_t*>(dst)[i] = packBf16x2(v.x, v.y);
    }
}

/* Row `row` of kv head h's group: query position row / G, query head h G + row % G. */
__device__ __forceinline__ void rowPosHead(const AttnParams& p, int h, int row, int& pos, int& head)
{
    pos = row / p.group;
    head = h * p.group + row % p.group;
}

/* Copy `rows` rows of D 16-bit values into a swizzled tile; rows with src == nullptr are zero. */
template <int D>
__device__ __forceinline__ void loadKV(uint16_t* tile, const uint16_t* base, int key0, int total)
{
    constexpr int kC = D / 8;
    for (int i = threadIdx.x; i < kBLOCK_KEYS * kC; i += kTHREADS)
    {
        const int r = i / kC, c = i % kC;
        const int key = key0 + r;
        const bool ok = key < total;
        const uint16_t* src = base + (ok ? size_t(key) * D + c * 8 : 0);
        cpAsync16(tile + swz<D>(r, c), src, ok ? 16 : 0);
    }
}

/*
 * Phase 1 of a 64-key block (the one definition every kernel runs): s = q . k per (row, key) by
 * mma.sync over d in steps of 16 ascending, from zero; x = s * scaleLog2; masked keys (key > the
 * row's limit) -inf; the online softmax update of (m, l) and o *= alpha. P = ex2(x - m) is left in
 * s. The warp's rows are sQ rows qRow0 .. qRow0 + 16 MT - 1 (qRow0 a multiple of 8).
 */
template <int D, bool kF16, int MT>
__device__ __forceinline__ void scoreBlock(const uint16_t* sQ, int qRow0, const uint16_t* sK, const bool (&mtLive)[MT],
    const int (&limit)[MT][2], int key0, float scaleLog2, float (&s)[MT][8][4], float (&m)[MT][2], float (&l)[MT][2],
    float (&o)[MT][D / 8][4])
{
    constexpr int DT = D / 8;
    const int lane = threadIdx.x & 31, qd = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                s[mt][nt][e] = 0.0f;
#pragma unroll 1
    for (int kk = 0; kk < D / 16; ++kk)
    {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
        {
            const int i = lane >> 3;
            const int r = qRow0 + mt * 16 + (i & 1) * 8 + (lane & 7);
            ldsm4(a[mt], sQ + swz<D>(r, 2 * kk + (i >> 1)));
        }
#pragma unroll
        for (int np = 0; np < 4; ++np)
        {
            const int i = lane >> 3;
            uint32_t bk[4];
            ldsm4(bk, sK + swz<D>(np * 16 + (i >> 1) * 8 + (lane & 7), 2 * kk + (i & 1)));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
            {
                if (!mtLive[mt])
                {
                    continue;
                }
                mma16816<kF16>(s[mt][2 * np], a[mt][0], a[mt][1], a[mt][2], a[mt][3], bk[0], bk[1]);
                mma16816<kF16>(s[mt][2 * np + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3], bk[2], bk[3]);
            }
        }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
    {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
        {
            float bm = kNEG_INF;
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
            {
#pragma unroll
                for (int e = 0; e < 2; ++e)
                {
                    const int key = key0 + nt * 8 + 2 * qd + e;
                    float x = __fmul_rn(s[mt][nt][2 * hh + e], scaleLog2);
                    x = key <= limit[mt][hh] ? x : kNEG_INF;
                    s[mt][nt][2 * hh + e] = x;
                    bm = fmaxf(bm, x);
                }
            }
            bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, 1));
            bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, 2));
            const float mn = fmaxf(m[mt][hh], bm);
            const float sub = mn == kNEG_INF ? 0.0f : mn;
            const float alpha = m[mt][hh] == mn ? 1.0f : ex2(__fsub_rn(m[mt][hh], sub));
            float sum = 0.0f;
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
            {
#pragma unroll
                for (int e = 0; e < 2; ++e)
                {
                    const float pv = ex2(__fsub_rn(s[mt][nt][2 * hh + e], sub));
                    s[mt][nt][2 * hh + e] = pv;
                    sum = (nt == 0 && e == 0) ? pv : __fadd_rn(sum, pv);
                }
            }
            sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
            sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 2));
            l[mt][hh] = __fadd_rn(__fmul_rn(l[mt][hh], alpha), sum);
            m[mt][hh] = mn;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
            {
                o[mt][dt][2 * hh] = __fmul_rn(o[mt][dt][2 * hh], alpha);
                o[mt][dt][2 * hh + 1] = __fmul_rn(o[mt][dt][2 * hh + 1], alpha);
            }
        }
    }
}

/* Phase 2 of a block: o = mma(P, V, o) over the block's keys in steps of 16 ascending, P (in s)
 * rounded to the dtype (RNE) as the A fragment. */
template <int D, bool kF16, int MT>
__device__ __forceinline__ void valueBlock(const uint16_t* sV, const bool (&mtLive)[MT], const float (&s)[MT][8][4],
    float (&o)[MT][D / 8][4])
{
    constexpr int DT = D / 8;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
    {
        uint32_t pa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
        {
            pa[mt][0] = packP<kF16>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
            pa[mt][1] = packP<kF16>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
            pa[mt][2] = packP<kF16>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
            pa[mt][3] = packP<kF16>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < DT / 2; ++dp)
        {
            const int i = lane >> 3;
            uint32_t bv[4];
            ldsm4t(bv, sV + swz<D>(kk * 16 + (i & 1) * 8 + (lane & 7), 2 * dp + (i >> 1)));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
            {
                if (!mtLive[mt])
                {
                    continue;
                }
                mma16816<kF16>(o[mt][2 * dp], pa[mt][0], pa[mt][1], pa[mt][2], pa[mt][3], bv[0], bv[1]);
                mma16816<kF16>(o[mt][2 * dp + 1], pa[mt][0], pa[mt][1], pa[mt][2], pa[mt][3], bv[2], bv[3]);
            }
        }
    }
}

/*
 * One CTA: kROWS rows of one (sequence, kv head), row tile blockIdx.x, over every chunk (unsplit,
 * gridDim.z == 1) or over chunk blockIdx.z only (split: the partials go to the workspace).
 */
template <int D, bool kF16, bool kSPLIT>
__global__ void __launch_bounds__(kTHREADS) attentionKernel(const AttnParams p)
{
    using C = AttnCfg<D>;
    constexpr int MT = C::kM_TILES;
    constexpr int DT = C::kD_TILES;
    extern __shared__ __align__(128) uint8_t smemRaw[];
    uint16_t* sQ = reinterpret_cast<uint16_t*>(smemRaw);
    uint16_t* sKV = sQ + C::kQ_ELEMS;  // stage s: K at sKV + 2 s kKV, V after it
    float* sTotal = reinterpret_cast<float*>(smemRaw + C::kSMEM_CORE);

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, qd = lane & 3;
    const int seqHead = blockIdx.y;  // b * kvHeads + h
    const int b = seqHead / p.kvHeads, h = seqHead % p.kvHeads;
    const int rows = p.seq * p.group;
    // Larger row tiles see more keys: they go first.
    const int tile = gridDim.x - 1 - blockIdx.x;
    const int row0 = tile * C::kROWS;
    const int past = p.total - p.seq;
    const int lastRow = min(rows, row0 + C::kROWS) - 1;
    const int nBlocks = (past + lastRow / p.group) / kBLOCK_KEYS + 1;
    int blk0 = 0, blkEnd = nBlocks;
    if constexpr (kSPLIT)
    {
        blk0 = blockIdx.z * kCHUNK_BLOCKS;
        if (blk0 >= nBlocks)
        {
            return;
        }
        blkEnd = min(nBlocks, blk0 + kCHUNK_BLOCKS);
    }
    const uint16_t* kBase = p.k + size_t(seqHead) * p.total * D;
    const uint16_t* vBase = p.v + size_t(seqHead) * p.total * D;

    // Q tile (zero rows past the group's rows).
    for (int i = tid; i < C::kROWS * C::kCHUNKS; i += kTHREADS)
    {
        const int r = i / C::kCHUNKS, c = i % C::kCHUNKS;
        const int row = row0 + r;
        const bool ok = row < rows;
        const int pos = ok ? row / p.group : 0, head = h * p.group + (ok ? row % p.group : 0);
        const uint16_t* src = p.q + ((size_t(b) * p.qHeads + head) * p.seq + pos) * D + c * 8;
        cpAsync16(sQ + swz<D>(r, c), src, ok ? 16 : 0);
    }
    loadKV<D>(sKV, kBase, blk0 * kBLOCK_KEYS, p.total);
    loadKV<D>(sKV + C::kKV_ELEMS, vBase, blk0 * kBLOCK_KEYS, p.total);
    cpAsyncCommit();
    if (blk0 + 1 < blkEnd)
    {
        loadKV<D>(sKV + 2 * C::kKV_ELEMS, kBase, (blk0 + 1) * kBLOCK_KEYS, p.total);
        loadKV<D>(sKV + 3 * C::kKV_ELEMS, vBase, (blk0 + 1) * kBLOCK_KEYS, p.total);
    }
    cpAsyncCommit();

    // This thread's rows: (mt, hh) -> warp row mt*16 + hh*8 + g; a row's last key is its absolute
    // position (rows past the group see none).
    int limit[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
    {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
        {
            const int row = row0 + warp * C::kWARP_ROWS + mt * 16 + hh * 8 + g;
            limit[mt][hh] = row < rows ? past + row / p.group : -1;
        }
    }
    float m[MT][2], l[MT][2];
    float o[MT][DT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
    {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
        {
            m[mt][hh] = kNEG_INF;
            l[mt][hh] = 0.0f;
        }
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
        {
#pragma unroll
            for (int e = 0; e < 4; ++e)
            {
                o[mt][dt][e] = 0.0f;
            }
        }
    }
    // m16 tiles holding no row of the group (decode: all but the first) skip their mma work; the
    // arithmetic of the rows that exist does not change.
    bool mtLive[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
    {
        mtLive[mt] = row0 + warp * C::kWARP_ROWS + mt * 16 < rows;
    }
    float* myTotal = sTotal + size_t(warp) * C::kWARP_ROWS * D;
    // (M, L) of row (mt, hh) at myML[((mt * 2 + hh) * 2 + {0, 1}) * kTHREADS].
    float* myML = sTotal + size_t(C::kROWS) * D + tid;

    for (int blk = blk0; blk < blkEnd; ++blk)
    {
        const int stage = (blk - blk0) & 1;
        cpAsyncWait<1>();
        __syncthreads();
        const uint16_t* sK = sKV + 2 * stage * C::kKV_ELEMS;
        const uint16_t* sV = sK + C::kKV_ELEMS;

        if (mtLive[0])
        {
            float s[MT][8][4];
            scoreBlock<D, kF16, MT>(sQ, warp * C::kWARP_ROWS, sK, mtLive, limit, blk * kBLOCK_KEYS, p.scaleLog2, s, m, l, o);
            valueBlock<D, kF16, MT>(sV, mtLive, s, o);
        }
        __syncthreads();
        if (blk + 2 < blkEnd)
        {
            loadKV<D>(sKV + 2 * stage * C::kKV_ELEMS, kBase, (blk + 2) * kBLOCK_KEYS, p.total);
            loadKV<D>(sKV + (2 * stage + 1) * C::kKV_ELEMS, vBase, (blk + 2) * kBLOCK_KEYS, p.total);
        }
        cpAsyncCommit();

        // ---- end of a chunk: fold (unsplit) or hand the partial over (split).
        const bool chunkEnd = ((blk + 1) % kCHUNK_BLOCKS) == 0 || blk + 1 == blkEnd;
        if (!chunkEnd)
        {
            continue;
        }
        if constexpr (kSPLIT)
        {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
            {
#pragma unroll
                for (int hh = 0; hh < 2; ++hh)
                {
                    const int row = row0 + warp * C::kWARP_ROWS + mt * 16 + hh * 8 + g;
                    if (row >= rows)
                    {
                        continue;
                    }
                    int pos, head;
                    rowPosHead(p, h, row, pos, head);
                    const size_t rid = (size_t(b) * p.qHeads + head) * p.seq + pos;
                    const size_t slot = rid * p.nChunks + blockIdx.z;
                    if (qd == 0)
                    {
                        p.wsML[2 * slot] = m[mt][hh];
                        p.wsML[2 * slot + 1] = l[mt][hh];
                    }
                    float* dst = p.wsO + slot * D;
#pragma unroll
                    for (int dt = 0; dt < DT; ++dt)
                    {
                        *reinterpret_cast<float2*>(dst + dt * 8 + 2 * qd) = make_float2(o[mt][dt][2 * hh], o[mt][dt][2 * hh + 1]);
                    }
                }
            }
        }
        else
        {
            const bool first = blk < kCHUNK_BLOCKS;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
            {
#pragma unroll
                for (int hh = 0; hh < 2; ++hh)
                {
                    FoldWeights w{1.0f, 1.0f};
                    float* ml = myML + (mt * 2 + hh) * 2 * kTHREADS;
                    if (first)
                    {
                        ml[0] = m[mt][hh];
                        ml[kTHREADS] = l[mt][hh];
                    }
                    else
                    {
                        float Mr = ml[0], Lr = ml[kTHREADS];
                        w = foldWeights(Mr, Lr, m[mt][hh], l[mt][hh]);
                        ml[0] = Mr;
                        ml[kTHREADS] = Lr;
                    }
#pragma unroll
                    for (int dt = 0; dt < DT; ++dt)
                    {
#pragma unroll
                        for (int e = 0; e < 2; ++e)
                        {
                            // Thread-private slots: element (mt, hh, dt, e) of lane at [elem][lane].
                            float* slot = myTotal + (((mt * 2 + hh) * DT + dt) * 2 + e) * 32 + lane;
                            const float ov = o[mt][dt][2 * hh + e];
                            *slot = first ? ov : foldValue(*slot, ov, w);
                            o[mt][dt][2 * hh + e] = 0.0f;
                        }
                    }
                    m[mt][hh] = kNEG_INF;
                    l[mt][hh] = 0.0f;
                }
            }
        }
    }

    if constexpr (!kSPLIT)
    {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
        {
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
            {
                const int row = row0 + warp * C::kWARP_ROWS + mt * 16 + hh * 8 + g;
                if (row >= rows)
                {
                    continue;
                }
                int pos, head;
                rowPosHead(p, h, row, pos, head);
                const size_t base = ((size_t(b) * p.seq + pos) * p.qHeads + head) * D;
                const float Lr = myML[((mt * 2 + hh) * 2 + 1) * kTHREADS];
#pragma unroll
                for (int dt = 0; dt < DT; ++dt)
                {
                    const float* slot = myTotal + (((mt * 2 + hh) * DT + dt) * 2) * 32 + lane;
                    storeOut2(p, base + dt * 8 + 2 * qd, finishValue(slot[0], Lr), finishValue(slot[32], Lr), kF16);
                }
            }
        }
    }
}

/*
 * The merge of the split mode and of the decode kernel: one warp per row folds the row's chunks
 * 0 .. position / 256 in ascending order (foldWeights / foldValue, as the unsplit kernel) and writes
 * the output.
 */
template <int D, bool kF16>
__global__ void __launch_bounds__(kTHREADS) attentionMergeKernel(const AttnParams p)
{
    constexpr int kPER_LANE = D / 32;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const size_t rid = size_t(blockIdx.x) * kWARPS + warp;  // (b, head, pos)
    const size_t nRows = size_t(p.batch) * p.qHeads * p.seq;
    if (rid >= nRows)
    {
        return;
    }
    const int pos = int(rid % p.seq);
    const size_t bh = rid / p.seq;
    const int head = int(bh % p.qHeads), b = int(bh / p.qHeads);
    const int past = p.total - p.seq;
    const int chunks = (past + pos) / kCHUNK_KEYS + 1;
    const float* ml = p.wsML + rid * p.nChunks * 2;
    const float* os = p.wsO + rid * p.nChunks * D + lane * kPER_LANE;
    float M = ml[0], L = ml[1];
    float O[kPER_LANE];
#pragma unroll
    for (int j = 0; j < kPER_LANE; ++j)
    {
        O[j] = os[j];
    }
    // kBATCH chunks' loads in flight at once, then their folds one after the other (the order of
    // the folds is the chunks' order; only the loads are hoisted).
    constexpr int kBATCH = 8;
    for (int c0 = 1; c0 < chunks; c0 += kBATCH)
    {
        float bm[kBATCH], bl[kBATCH], bo[kBATCH][kPER_LANE];
#pragma unroll
        for (int i = 0; i < kBATCH; ++i)
        {
            const int c = min(c0 + i, chunks - 1);
            bm[i] = ml[2 * c];
            bl[i] = ml[2 * c + 1];
#pragma unroll
            for (int j = 0; j < kPER_LANE; ++j)
            {
                bo[i][j] = os[size_t(c) * D + j];
            }
        }
#pragma unroll
        for (int i = 0; i < kBATCH; ++i)
        {
            if (c0 + i < chunks)
            {
                const FoldWeights w = foldWeights(M, L, bm[i], bl[i]);
#pragma unroll
                for (int j = 0; j < kPER_LANE; ++j)
                {
                    O[j] = foldValue(O[j], bo[i][j], w);
                }
            }
        }
    }
    const size_t base = ((size_t(b) * p.seq + pos) * p.qHeads + head) * D + lane * kPER_LANE;
#pragma unroll
    for (int j = 0; j < kPER_LANE; j += 2)
    {
        storeOut2(p, base + j, finishValue(O[j], L), finishValue(O[j + 1], L), kF16);
    }
}

} // namespace attn
} // namespace metrale

#endif // METRALE_ATTENTION_KERNEL_CUH
