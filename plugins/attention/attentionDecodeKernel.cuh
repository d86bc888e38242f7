/*
 * The decode kernel of the Attention op: a (sequence, kv head) whose rows (seq * group) fit one m16
 * tile (decode, and prefill chunks of a few tokens), spread over warps by 256-key chunk.
 *
 * Invariants (the same bits as attentionKernel's split and unsplit modes, hence the same bits in any
 * batch and any chunking of the prefill):
 * - A chunk (256 keys at a fixed absolute position) is, by the op's definition, reduced from
 *   (-inf, 0, 0) over its 64-key blocks in ascending order, and the chunks are folded into the row's
 *   total in ascending chunk order (foldWeights / foldValue, attentionMergeKernel). So a chunk's
 *   partial (m, l, o) does not depend on which warp or CTA computes it: here each warp reduces whole
 *   chunks (gw, gw + NW, gw + 2 NW, ... for warp gw of the NW warps a (sequence, kv head) has) with
 *   the one block step every kernel runs (scoreBlock, valueBlock: the same instructions in the same
 *   order on the same operand layout, the row tile's other rows never entering a row), writes the
 *   partial to the split workspace exactly as the split mode does, and attentionMergeKernel folds.
 * - How many CTAs and warps a (sequence, kv head) gets is chosen from the shape and the SM count
 *   (speed only): a chunk's partial is the same whatever computes it, and the fold's order is fixed.
 * - Warps run their own cp.async pipeline (a ring of kSLOTS 64-key K or V tiles, items K0 V0 K1 V1
 *   ...; __syncwarp orders a tile's copy before its reads and its reads before the next copy over
 *   it): no barrier couples the warps after the Q tile.
 * Compiled with -fmad=false: no multiply-add is contracted.
 */
#ifndef METRALE_ATTENTION_DECODE_KERNEL_CUH
#define METRALE_ATTENTION_DECODE_KERNEL_CUH

#include "attentionKernel.cuh"

namespace metrale
{
namespace attn
{

constexpr int kDEC_MAX_ROWS = METRALE_ATTENTION_DECODE_MAX_ROWS;  // rows (seq * group): one m16 tile (kernels.h)

template <int D>
struct DecCfg
{
    static constexpr int kWARPS = D <= 128 ? 4 : 2;
    static constexpr int kTHREADS = kWARPS * 32;
    static constexpr int kSLOTS = 3;                   // K/V tiles in flight per warp, ring
    static constexpr int kTILE = kBLOCK_KEYS * D;      // elements of one K or V tile
    static constexpr size_t kSMEM = (size_t(kDEC_MAX_ROWS) * D + size_t(kWARPS) * kSLOTS * kTILE) * 2;
};

/* Copy one 64-key tile (K or V of a block) with the warp's 32 lanes; keys past total are zero. */
template <int D>
__device__ __forceinline__ void loadTileWarp(uint16_t* tile, const uint16_t* base, int key0, int total, int lane)
{
    constexpr int kC = D / 8;
#pragma unroll 4
    for (int i = lane; i < kBLOCK_KEYS * kC; i += 32)
    {
        const int r = i / kC, c = i % kC;
        const int key = key0 + r;
        const bool ok = key < total;
        const uint16_t* src = base + (ok ? size_t(key) * D + c * 8 : 0);
        cpAsync16(tile + swz<D>(r, c), src, ok ? 16 : 0);
    }
}

/* The pipeline's item j of a warp: its chunk ordinal j / (2 kCHUNK_BLOCKS), the block in it, K or V. */
struct DecItem
{
    int blk;
    bool isV;
    bool valid;
};

__device__ __forceinline__ DecItem decItem(int j, int chunk0, int chunkStep, int nChunks, int nBlocks)
{
    constexpr int kPER_CHUNK = 2 * kCHUNK_BLOCKS;
    const int chunk = chunk0 + (j / kPER_CHUNK) * chunkStep;
    const int within = j % kPER_CHUNK;
    DecItem it;
    it.blk = chunk * kCHUNK_BLOCKS + within / 2;
    it.isV = (within & 1) != 0;
    it.valid = chunk < nChunks && it.blk < nBlocks;
    return it;
}

template <int D>
__device__ __forceinline__ void issueItem(uint16_t* ring, int j, int chunk0, int chunkStep, int nChunks, int nBlocks,
    const uint16_t* kBase, const uint16_t* vBase, int total, int lane)
{
    using C = DecCfg<D>;
    const DecItem it = decItem(j, chunk0, chunkStep, nChunks, nBlocks);
    if (it.valid)
    {
        loadTileWarp<D>(ring + (j % C::kSLOTS) * C::kTILE, it.isV ? vBase : kBase, it.blk * kBLOCK_KEYS, total, lane);
    }
    cpAsyncCommit();
}

/* A chunk's partial (m, l, o) of this thread's rows to the split workspace (the split mode's layout). */
template <int D>
__device__ __forceinline__ void storePartial(const AttnParams& p, int b, int h, int rows, int chunk,
    const float (&m)[1][2], const float (&l)[1][2], const float (&o)[1][D / 8][4])
{
    const int lane = threadIdx.x & 31, g = lane >> 2, qd = lane & 3;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
    {
        const int row = hh * 8 + g;
        if (row >= rows)
        {
            continue;
        }
        int pos, head;
        rowPosHead(p, h, row, pos, head);
        const size_t rid = (size_t(b) * p.qHeads + head) * p.seq + pos;
        const size_t slot = rid * p.nChunks + chunk;
        if (qd == 0)
        {
            p.wsML[2 * slot] = m[0][hh];
            p.wsML[2 * slot + 1] = l[0][hh];
        }
        float* dst = p.wsO + slot * D;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
        {
            *reinterpret_cast<float2*>(dst + dt * 8 + 2 * qd) = make_float2(o[0][dt][2 * hh], o[0][dt][2 * hh + 1]);
        }
    }
}

/*
 * grid (splits, batch * kvHeads): CTA x of a (sequence, kv head); its warp w is warp
 * gw = x * kWARPS + w of the NW = splits * kWARPS warps, and reduces chunks gw, gw + NW, ...
 */
template <int D, bool kF16>
__global__ void __launch_bounds__(DecCfg<D>::kTHREADS) attentionDecodeKernel(const AttnParams p)
{
    using C = DecCfg<D>;
    constexpr int DT = D / 8;
    extern __shared__ __align__(128) uint8_t smemRaw[];
    uint16_t* sQ = reinterpret_cast<uint16_t*>(smemRaw);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2;
    uint16_t* ring = sQ + kDEC_MAX_ROWS * D + warp * C::kSLOTS * C::kTILE;
    const int seqHead = blockIdx.y;
    const int b = seqHead / p.kvHeads, h = seqHead % p.kvHeads;
    const int rows = p.seq * p.group;
    const int past = p.total - p.seq;
    const int nBlocks = (past + (rows - 1) / p.group) / kBLOCK_KEYS + 1;
    const int nChunks = (nBlocks + kCHUNK_BLOCKS - 1) / kCHUNK_BLOCKS;
    const int chunkStep = gridDim.x * C::kWARPS;
    const int chunk0 = blockIdx.x * C::kWARPS + warp;
    const uint16_t* kBase = p.k + size_t(seqHead) * p.total * D;
    const uint16_t* vBase = p.v + size_t(seqHead) * p.total * D;

    for (int i = tid; i < kDEC_MAX_ROWS * (D / 8); i += C::kTHREADS)
    {
        const int r = i / (D / 8), c = i % (D / 8);
        const bool ok = r < rows;
        const int pos = ok ? r / p.group : 0, head = h * p.group + (ok ? r % p.group : 0);
        const uint16_t* src = p.q + ((size_t(b) * p.qHeads + head) * p.seq + pos) * D + c * 8;
        cpAsync16(sQ + swz<D>(r, c), src, ok ? 16 : 0);
    }
    cpAsyncCommit();
    const bool hasWork = chunk0 < nChunks;
    if (hasWork)
    {
#pragma unroll
        for (int j = 0; j < C::kSLOTS; ++j)
        {
            issueItem<D>(ring, j, chunk0, chunkStep, nChunks, nBlocks, kBase, vBase, p.total, lane);
        }
        cpAsyncWait<C::kSLOTS>();  // the Q tile (the oldest group)
    }
    else
    {
        cpAsyncWait<0>();
    }
    __syncthreads();
    if (!hasWork)
    {
        return;
    }

    const bool mtLive[1] = {true};
    int limit[1][2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
    {
        const int row = hh * 8 + g;
        limit[0][hh] = row < rows ? past + row / p.group : -1;
    }
    float m[1][2], l[1][2], o[1][DT][4], s[1][8][4];
    for (int j = 0;; ++j)
    {
        const DecItem it = decItem(j, chunk0, chunkStep, nChunks, nBlocks);
        if (!it.valid)
        {
            break;
        }
        if (!it.isV && it.blk % kCHUNK_BLOCKS == 0)
        {
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
            {
                m[0][hh] = kNEG_INF;
                l[0][hh] = 0.0f;
            }
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    o[0][dt][e] = 0.0f;
        }
        cpAsyncWait<C::kSLOTS - 1>();
        __syncwarp();
        const uint16_t* tile = ring + (j % C::kSLOTS) * C::kTILE;
        if (!it.isV)
        {
            scoreBlock<D, kF16, 1>(sQ, 0, tile, mtLive, limit, it.blk * kBLOCK_KEYS, p.scaleLog2, s, m, l, o);
        }
        else
        {
            valueBlock<D, kF16, 1>(tile, mtLive, s, o);
        }
        __syncwarp();
        issueItem<D>(ring, j + C::kSLOTS, chunk0, chunkStep, nChunks, nBlocks, kBase, vBase, p.total, lane);
        if (it.isV && ((it.blk + 1) % kCHUNK_BLOCKS == 0 || it.blk + 1 == nBlocks))
        {
            storePartial<D>(p, b, h, rows, it.blk / kCHUNK_BLOCKS, m, l, o);
        }
    }
    cpAsyncWait<0>();
}

} // namespace attn
} // namespace metrale

#endif // METRALE_ATTENTION_DECODE_KERNEL_CUH
