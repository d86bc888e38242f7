/*
 * The grouped W8A8 projection on the dense FP8 wgmma kernel (projWgmmaFp8.cuh), W8A8Proj version 3's
 * arithmetic per expert: fp8 activations with per-row or per-(row, 128-k block) scales, per-channel or
 * 128x128 block weight scales (each block scaled at its promotion, as the dense kernel's). A
 * measurement variant for now (METRALE_MOE_FP8=1, moeW8a8Kernel.cu): W8A8MoEProj is version 2 (exact
 * f16 products); moving it here is its own contract version.
 *
 * The steps: the sorted path's scan (moeScanWgKernel: each expert's rows as token tiles of kN rows
 * starting at offsets[e] rounded down to the operand's 8-row groups) and gather, the dense fused
 * pre-pass (wgFp8Quant; wgFp8QuantBlock for row_block128) over the gathered rows (each row's e4m3
 * bytes and scales from the row alone: the dense op's), this kernel, then the scatter or the combine. The weights of every expert are one
 * TMA tensor map over [E N, K] (expert e's row r is row e N + r; a box past expert e's last row reads
 * the next expert's rows, whose products are never stored, and past the last expert the TMA fills
 * zeros). Row invariance: a row's output is its warpgroup's wgmma on its own e4m3 bytes and its
 * expert's weights, with the dense kernel's k order and promotion points; wgmma's bits do not depend on
 * its N or on the other token columns, so it is bitwise the dense kernel of its expert whichever rows
 * share its tile (the tile's first rows may be the previous expert's: computed, never stored, kLo).
 */
#ifndef METRALE_MOE_FP8_KERNEL_CUH
#define METRALE_MOE_FP8_KERNEL_CUH

#include "moeProjKernel.cuh"
#include "projWgmmaFp8.cuh"

namespace metrale
{

/*
 * kPersist (token tiles of 64 and 128, as the dense kernel's): gridDim.x CTAs walk the items (schedule
 * tile, n tile), tile-major, the ring's slot and phase carried from item to item; else CTA (n tile,
 * schedule tile) and the CTAs past numTiles exit. An item: the dense kernel's tile (its producer's
 * copies, consumeWgmmaFp8) on expert e's weight rows [e N + n0, + 64 kCW) and the token tile's kN rows
 * of the sorted operand from the 8-aligned tileRow0, storing the rows of [offsets[e], offsets[e + 1]).
 */
template <class P, int kN, int kST, int kSc, int kCW, bool kPipe, bool kPersist, class View>
__global__ void __launch_bounds__(wgFp8Threads<kCW>(), kCW == 1 ? 2 : 1) moeWgmmaFp8Kernel(
    const __grid_constant__ CUtensorMap wmap, const typename P::Params p, const View view, const MoeRouting r,
    const uint8_t* __restrict__ Xw, const float* __restrict__ sxT, void* __restrict__ Y, int N, int K,
    int32_t yDtype, int mg)
{
#ifdef METRALE_SM90A
    using L = WgFp8Layout<kN, kST, kSc, kCW>;
    extern __shared__ __align__(1024) uint8_t smemRaw[];
    uint8_t* smem = smemRaw + ((1024u - (smemAddr(smemRaw) & 1023u)) & 1023u);
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::kBar);
    uint64_t* empty = full + kST;
    float* sxS = reinterpret_cast<float*>(smem + L::kSx);  // kSC_BLOCK_X: each stage's token scales
    float* swS = reinterpret_cast<float*>(smem + L::kSw);  // kSC_BLOCK_W: each stage's weight-scale word
    const int tid = threadIdx.x;
    const int nkb = (K + 127) >> 7;
    constexpr int kRows = 64 * kCW;
    const int gx = (N + kRows - 1) / kRows;
    const int numTiles = *r.numTiles;
    const int items = kPersist ? numTiles * gx : 0;
    if constexpr (!kPersist)
    {
        if (static_cast<int>(blockIdx.y) >= numTiles)
        {
            return;
        }
    }
    // The CTA's first item, and the step to its next (one item a CTA unless persistent).
    const int item0 = kPersist ? static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.y) * gx + static_cast<int>(blockIdx.x);
    const int itemEnd = kPersist ? items : item0 + 1;
    const int step = kPersist ? static_cast<int>(gridDim.x) : 1;
    wgFp8RingInit<kST, kCW>(full, empty);
    if ((tid >> 5) >= 4 * kCW)
    {
        if constexpr (kCW == kWG_CONSUMERS)
        {
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWG_PRODUCER_REGS_R));
        }
        if (tid == 128 * kCW)
        {
            asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&wmap)) : "memory");
            int slot = 0;
            uint32_t phase = 0;
            int filled = 0;
            for (int item = item0; item < itemEnd; item += step)
            {
                const int tile = item / gx;
                const int n0 = (item - tile * gx) * kRows;
                const int e = r.tileExpert[tile];
                produceFp8Tile<P, kN, kST, kSc, kCW>(&wmap, view(p, e, 0), smem, full, empty, Xw, sxT, sxS, swS, mg,
                    nkb, r.tileRow0[tile], n0, e * N + n0, slot, phase, filled);
            }
        }
    }
    else
    {
        if constexpr (kCW == kWG_CONSUMERS)
        {
            asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kWG_CONSUMER_REGS_R));
        }
        int slot = 0;
        uint32_t phase = 0;
        for (int item = item0; item < itemEnd; item += step)
        {
            const int tile = item / gx;
            const int n0 = (item - tile * gx) * kRows;
            const int e = r.tileExpert[tile];
            const int m0 = r.tileRow0[tile];
            const int lo = max(m0, r.offsets[e]);
            const int hi = min(m0 + kN, r.offsets[e + 1]);
            // The persistent form of the consumer at every tile (its scales where the producer stages them,
            // or p.sx: the tile's tokens change from item to item): the same values, so the same bits.
            consumeWgmmaFp8<P, kN, kST, true, kSc, kCW, kPipe, true, true>(view(p, e, 0), smemAddr(smem), sxS, swS,
                full, empty, Y, hi, N, yDtype, nkb, m0, n0, slot, phase, lo);
        }
    }
#else
    __trap();  // launched only where wgFp8Available() found sm_90a machine code
#endif
}

/* The grouped FP8 kernel's token tile (the schedule's rows a tile): from the rows an expert averages,
 * m top_k / min(E, m top_k), the dense wgFp8TokenTile's steps up to 64, and past m = 128 the grouped
 * wgmma tier's rule (128 where the experts average 96 rows or more, moeTierFor). METRALE_MOE_FP8_TILE
 * (read at each call) forces 8 / 16 / 32 / 64 / 128 for the benchmark. A speed choice only: wgmma's
 * bits do not depend on it. */
inline int moeFp8TokenTile(int64_t m, int64_t topK, int64_t E)
{
    const char* env = std::getenv("METRALE_MOE_FP8_TILE");
    if (env != nullptr)
    {
        const int t = std::atoi(env);
        if (t == 8 || t == 16 || t == 32 || t == 64 || t == 128)
        {
            return t;
        }
    }
    const int64_t total = m * topK;
    if (m > 128)
    {
        return total >= 96 * E ? 128 : 64;
    }
    const int64_t used = E < total ? E : total;
    const int64_t avg = (total + used - 1) / used;
    return avg <= 8 ? 8 : avg <= 16 ? 16 : avg <= 32 ? 32 : 64;
}

template <class P, int kN, int kSc, class View>
inline cudaError_t moeLaunchWgmmaFp8N(const typename P::Params& p, const View& view, const MoeRun& u,
    const uint8_t* Xw, const float* sxT)
{
    constexpr int kCW = wgFp8Consumers<kN>(true);
    constexpr bool kPersist = kN >= 64;
    // The dense default's paired blocks (kPipe) at every tile but the 128 one of block128 weights x row
    // activations (it spilled there, launchProjWgmmaFp8Tile).
    constexpr bool kPipe = !(kN == 128 && kSc == kSC_BLOCK_W);
    constexpr int kST = wgFp8Stages<kN, kSc, kCW>();
    using L = WgFp8Layout<kN, kST, kSc, kCW>;
    auto kern = moeWgmmaFp8Kernel<P, kN, kST, kSc, kCW, kPipe, kPersist, View>;
    cudaError_t e = raiseSmemOnce<moeWgmmaFp8Kernel<P, kN, kST, kSc, kCW, kPipe, kPersist, View>>(L::kSmem);
    if (e != cudaSuccess)
    {
        return e;
    }
    CUtensorMap map;  // every expert's [N, K] e4m3 weights as one [E N, K] map, boxes of 64 kCW rows
    e = wgFp8WeightMap(p.codes, u.E * u.n, u.k, &map, 64 * kCW);
    if (e != cudaSuccess)
    {
        return e;
    }
    const int n = static_cast<int>(u.n);
    const int gx = (n + 64 * kCW - 1) / (64 * kCW);
    const dim3 grid = kPersist ? dim3(static_cast<unsigned>(wgPersistentCtas(gx * u.w.tileCap)))
                               : dim3(static_cast<unsigned>(gx), static_cast<unsigned>(u.w.tileCap));
    kern<<<grid, wgFp8Threads<kCW>(), L::kSmem, u.stream>>>(map, p, view, u.r, Xw, sxT, u.ws + u.w.ys, n,
        static_cast<int>(u.k), u.xDtype, static_cast<int>((u.rows + 7) / 8));
    return cudaGetLastError();
}

template <class P, int kSc, class View>
inline cudaError_t moeGemmWgmmaFp8At(const typename P::Params& p, const View& view, const MoeRun& u, const uint8_t* Xw,
    const float* sxT, int tile)
{
    switch (tile)
    {
    case 8: return moeLaunchWgmmaFp8N<P, 8, kSc, View>(p, view, u, Xw, sxT);
    case 16: return moeLaunchWgmmaFp8N<P, 16, kSc, View>(p, view, u, Xw, sxT);
    case 32: return moeLaunchWgmmaFp8N<P, 32, kSc, View>(p, view, u, Xw, sxT);
    case 64: return moeLaunchWgmmaFp8N<P, 64, kSc, View>(p, view, u, Xw, sxT);
    default: return moeLaunchWgmmaFp8N<P, 128, kSc, View>(p, view, u, Xw, sxT);
    }
}

/* Step 4 of the grouped FP8 path at the schedule's token tile (the run's tileRows), with the scales
 * of p (block128 weights: kSC_BLOCK_W; row_block128 activations, p.nbx > 1: kSC_BLOCK_X, their
 * block-major scales sxT from wgFp8QuantBlock). */
template <class P, class View>
inline cudaError_t moeGemmWgmmaFp8(const typename P::Params& p, const View& view, const MoeRun& u, const uint8_t* Xw,
    const float* sxT, int tile)
{
    const bool w = p.blockScales != 0;
    const bool x = p.nbx > 1;
    return w && x ? moeGemmWgmmaFp8At<P, kSC_BLOCK_W | kSC_BLOCK_X>(p, view, u, Xw, sxT, tile)
        : w       ? moeGemmWgmmaFp8At<P, kSC_BLOCK_W>(p, view, u, Xw, sxT, tile)
        : x       ? moeGemmWgmmaFp8At<P, kSC_BLOCK_X>(p, view, u, Xw, sxT, tile)
                  : moeGemmWgmmaFp8At<P, 0>(p, view, u, Xw, sxT, tile);
}

} // namespace metrale

#endif // METRALE_MOE_FP8_KERNEL_CUH
