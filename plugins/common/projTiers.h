/*
 * Which kernel tier serves a projection at m rows: a pure decision, host and device.
 *
 * Invariants: the tier changes only the tile shape (rows per CTA, weight rows per warp, pipeline
 * depth). Every tier issues the same mma instruction (m16n8k16, fp32 accumulate) over the same
 * 128-k blocks in ascending order, with the same assignment of k to instruction positions
 * (k = 128*b + 32*t + 4*s + j for quad lane t, step s, element j), starting from zero, and the same
 * slices (even / odd blocks, added once at the end; projGemm.cuh). So a row's
 * output bits do not depend on the tier, on m, or on the row's position (tests/gpu checks this
 * bitwise).
 */
#ifndef METRALE_PROJ_TIERS_H
#define METRALE_PROJ_TIERS_H

#include <stdint.h>

namespace metrale
{

enum class ProjTier : int32_t
{
    kM8 = 0,   // m <= 8: one n8 tile of rows; GEMV-like, weight-streaming, two K warps
    kM16 = 1,  // m <= 16: two n8 tiles
    kM64 = 2,  // m <= 256: 32-row tiles, 32 weight rows per CTA
    kM128 = 3, // larger: 64-row x 256-weight-row tiles, the weight-reuse tier
};

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
