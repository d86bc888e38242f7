/*
 * Which kernel tier serves a projection at m rows: a pure decision, host and device.
 *
 * Invariants: the tier changes only how the work is laid out (rows per CTA, weight rows per warp,
 * warps per slice, pipeline depth). Every tier issues the same mma instruction (m16n8k16, fp32
 * accumulate) with the same assignment of k to instruction positions (k = 128*b + 32*t + 4*s + j for
 * quad lane t, step s, element j), over the same slices of 128-k blocks (projSlices: a function of
 * the weight's shape only), each from zero in ascending order, summed from the left
 * (projGemm.cuh). So a row's output bits do not depend on the tier, on m, or on the row's position
 * (tests/gpu checks this bitwise).
 */
#ifndef METRALE_PROJ_TIERS_H
#define METRALE_PROJ_TIERS_H

#include <stdint.h>

namespace metrale
{

enum class ProjTier : int32_t
{
    kM8 = 0,   // m <= 8: one n8 tile of rows; weight-streaming, one warp per slice (projStream.cuh)
    kM16 = 1,  // m <= 16: two n8 tiles, weight-streaming
    kM64 = 2,  // m <= 256: 32-row tiles, 64 weight rows per CTA
    kM128 = 3, // larger: 64-row x 256-weight-row tiles, the weight-reuse tier
};

/*
 * How many slices the 128-k blocks of an [n, k] weight form (blocks b = s mod S make slice s):
 * enough that the streaming tier, one warp per slice and 16 weight rows, has about 2048 warps, at
 * most 8, never more than the blocks. A function of the weight's shape alone, so every m and every
 * tier uses the same summation order.
 */
inline constexpr int projSlices(int64_t n, int64_t k)
{
    const int64_t nkb = (k + 127) / 128;
    const int64_t tiles = (n + 15) / 16;
    int64_t s = 2;
    while (s < 8 && tiles * s < 2048)
    {
        s *= 2;
    }
    return static_cast<int>(s < nkb ? s : (nkb > 0 ? nkb : 1));
}

/*
 * The wgmma tier (projWgmma.cuh, sm_90a) serves m >= kWG_MIN_M rows where the device has it and the
 * policy scales per element (the launchers ask projWgmma.cuh's useWgmma); it replaces the kM64 and
 * kM128 shared-memory tiers there, with the same bits.
 */
constexpr int64_t kWG_MIN_M = 17;

inline constexpr bool wgmmaTierFor(int64_t m)
{
    return m >= kWG_MIN_M;
}

inline constexpr ProjTier selectProjTier(int64_t m)
{
    return m <= 8 ? ProjTier::kM8 : m <= 16 ? ProjTier::kM16 : m <= 256 ? ProjTier::kM64 : ProjTier::kM128;
}

inline constexpr const char* projTierName(ProjTier t)
{
    return t == ProjTier::kM8 ? "m8" : t == ProjTier::kM16 ? "m16" : t == ProjTier::kM64 ? "m64" : "m128";
}

} // namespace metrale

#endif // METRALE_PROJ_TIERS_H
