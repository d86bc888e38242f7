/*
 * Scalar formats of the op contract (docs/ops.md) on the device: bf16, fp16, FP8 e4m3fn, NVFP4 e2m1.
 *
 * Invariants:
 * - Every rounding the contract names is explicit here: __fmul_rn/__fdiv_rn/__fadd_rn, so that the
 *   result does not depend on -fmad or fast-math flags (no contraction into an FMA).
 * - e4m3 encoding saturates to +-448 and rounds to nearest even (never NaN for finite input).
 * - e2m1 encoding rounds to {0, .5, 1, 1.5, 2, 3, 4, 6} with ties to the even code, saturates at 6,
 *   and keeps the sign (-0 is code 8), exactly as metrale_export/ops/numerics.py.
 */
#ifndef METRALE_NUMERICS_CUH
#define METRALE_NUMERICS_CUH

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "metrale/kernels.h"

namespace metrale
{

// The op contract's constants (metrale/contract.h, generated from metrale_export/contract/numerics.py).
constexpr float kE4M3_MAX = contract::kE4M3_MAX;
constexpr float kE2M1_MAX = contract::kE2M1_MAX;
constexpr float kNVFP4_GLOBAL_DIV = contract::kNVFP4_GLOBAL_DIVISOR;  // E2M1_MAX * E4M3_MAX
constexpr int kNVFP4_BLOCK = contract::kNVFP4_BLOCK;
constexpr int kFP8_BLOCK = contract::kFP8_BLOCK;

/* An activation element (float32, float16 or bfloat16) as a float: exact. */
__device__ __forceinline__ float elementToFloat(float v)
{
    return v;
}
__device__ __forceinline__ float elementToFloat(__half v)
{
    return __half2float(v);
}
__device__ __forceinline__ float elementToFloat(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

/* Element i of p as a float (exact): the typed load of the non-projection kernels (RMSNorm, the
 * router, Gated DeltaNet). */
template <typename T, typename Index>
__device__ __forceinline__ float elementLoad(const T* p, Index i)
{
    return elementToFloat(p[i]);
}

/* v as an element of type T: float32 as it is, float16 and bfloat16 rounded to nearest even. */
template <typename T>
__device__ __forceinline__ T elementStore(float v);
template <>
__device__ __forceinline__ float elementStore<float>(float v)
{
    return v;
}
template <>
__device__ __forceinline__ __half elementStore<__half>(float v)
{
    return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 elementStore<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}

/* bf16(v) as a float (RNE). */
__device__ __forceinline__ float bf16Round(float v)
{
    return __bfloat162float(__float2bfloat16_rn(v));
}

/* Element `i` of x (float32, float16 or bfloat16), rounded to bf16 (the contract's step 0). */
__device__ __forceinline__ float loadXBf16(const void* x, int32_t dtype, size_t i)
{
    if (dtype == kMETRALE_BFLOAT16)
    {
        return __bfloat162float(static_cast<const __nv_bfloat16*>(x)[i]);
    }
    if (dtype == kMETRALE_FLOAT16)
    {
        return bf16Round(__half2float(static_cast<const __half*>(x)[i]));
    }
    return bf16Round(static_cast<const float*>(x)[i]);
}

/* Two floats -> packed bf16x2 (lo in the low half), RNE. */
__device__ __forceinline__ uint32_t packBf16x2(float lo, float hi)
{
    __nv_bfloat162 r = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&r);
}

/* Two floats -> packed f16x2 (lo in the low half), RNE. */
__device__ __forceinline__ uint32_t packHalf2(float lo, float hi)
{
    __half2 r = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&r);
}

/* e4m3(v): saturating RNE. */
__device__ __forceinline__ uint8_t e4m3Encode(float v)
{
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float e4m3Decode(uint8_t bits)
{
    __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(bits), __NV_E4M3);
    return __half2float(__half(h));
}

/* Two e4m3 bytes (low byte = first element) -> f16x2, exact. */
__device__ __forceinline__ uint32_t e4m3x2ToHalf2(uint32_t twoBytes)
{
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(twoBytes & 0xFFFFu), __NV_E4M3);
    return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

/* e2m1 code (0..15) of v, ties to the even code, saturating, sign kept. */
__device__ __forceinline__ uint32_t e2m1Encode(float v)
{
    const float mag = fabsf(v);
    uint32_t code = 0;
    code += mag > 0.25f ? 1u : 0u;
    code += mag >= 0.75f ? 1u : 0u;
    code += mag > 1.25f ? 1u : 0u;
    code += mag >= 1.75f ? 1u : 0u;
    code += mag > 2.5f ? 1u : 0u;
    code += mag >= 3.5f ? 1u : 0u;
    code += mag > 5.0f ? 1u : 0u;
    return code | (signbit(v) ? 8u : 0u);
}

/* The f16 bit pattern of e2m1(code): exact (every e2m1 magnitude is an f16). Arithmetic, not a
 * table, so that device code never indexes a local array. */
__host__ __device__ constexpr uint16_t e2m1HalfBits(uint32_t code)
{
    const uint32_t e = (code >> 1) & 3u;
    const uint32_t mbit = code & 1u;
    const uint32_t mag = e != 0u ? (((14u + e) << 10) | (mbit << 9)) : (mbit != 0u ? 0x3800u : 0u);
    return static_cast<uint16_t>(mag | ((code & 8u) << 12));
}

__device__ __forceinline__ float e2m1Decode(uint32_t code)
{
    return __half2float(__ushort_as_half(e2m1HalfBits(code)));
}

/* Store one output element in the dtype of x (one rounding). */
__device__ __forceinline__ void storeY(void* y, int32_t dtype, size_t i, float v)
{
    if (dtype == kMETRALE_BFLOAT16)
    {
        static_cast<__nv_bfloat16*>(y)[i] = __float2bfloat16_rn(v);
    }
    else if (dtype == kMETRALE_FLOAT16)
    {
        static_cast<__half*>(y)[i] = __float2half_rn(v);
    }
    else
    {
        static_cast<float*>(y)[i] = v;
    }
}

/* Store two adjacent output elements (i even, both in range) with one access. */
__device__ __forceinline__ void storeY2(void* y, int32_t dtype, size_t i, float v0, float v1)
{
    if (dtype == kMETRALE_BFLOAT16)
    {
        *reinterpret_cast<uint32_t*>(static_cast<__nv_bfloat16*>(y) + i) = packBf16x2(v0, v1);
    }
    else if (dtype == kMETRALE_FLOAT16)
    {
        *reinterpret_cast<uint32_t*>(static_cast<__half*>(y) + i) = packHalf2(v0, v1);
    }
    else
    {
        *reinterpret_cast<float2*>(static_cast<float*>(y) + i) = make_float2(v0, v1);
    }
}

} // namespace metrale

#endif // METRALE_NUMERICS_CUH
