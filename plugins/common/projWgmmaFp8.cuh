/*
 * The FP8 wgmma kernel of W8A8Proj version 3 (fp8 activations: per-row activation x per-channel
 * weight scales, and the block-scaled variants, kSc), sm_90a, at every m: `wgmma m64nNk32 e4m3 x e4m3` on both operands from shared
 * memory. It is the version's default (w8a8ProjKernel.cu); its bits are its own (FP8 wgmma and the
 * f16 mma.sync of the exact path never share bits), which is why W8A8Proj versions 1 and 2 (the
 * exact path's) are refused (docs/ops.md, Older exports).
 *
 * Swap-AB as projWgmma.cuh: the weights are wgmma's A operand (M = 64 weight rows per consumer
 * warpgroup, two per CTA), the tokens its N (8, 16, 32, 64 or 128 per CTA, from m and the weight's
 * shape only). A producer thread fills each pipeline stage through the TMA engine: the weight tile
 * [128 rows x 128 k] by one 2-D tensor copy (cuTensorMapEncodeTiled, 128-byte swizzle, zero fill
 * past N and K) and the token tile by one bulk copy of the operand that wgFp8OperandKernel wrote;
 * the producer loop is projWgmma.cuh's produceStages, the CTA order its wgRasterTile, the epilogue
 * its wgEpilogue. Where the tiles outnumber the SMs (token tiles of 64 and 128, kPersist, the default),
 * one CTA an SM walks the raster's tiles in turn, the ring's stages carried from tile to tile. Per
 * consumer warpgroup, one group of four wgmmas per block, waited for before the promotion (DeepGEMM's
 * form); the two consumer warpgroups interleave on the tensor pipe.
 *
 * Invariants (row invariance):
 * - One instruction and one promotion point at every m. For each 128-k block b in ascending order:
 *   four chained wgmma k32 (the first with scale-d 0: a fresh accumulator; instruction q over
 *   k = 128 b + 32 q + (0..31)), wait, then final = __fadd_rn(final, block) from final = +0. No
 *   slices, no split-K. Then (final * sx[m]) * sw[n] (+ bias), each an explicit rounding (the
 *   policy's finish, __fmul_rn). The tensor core's accumulator inside a block is not float32
 *   (measured 1.1e-4 .. 1.5e-4 of sum |terms| on the H200 at a24630d, flat in K).
 * - wgmma bits do not depend on the instruction's N (measured on the H200), so the token tile may
 *   change with m; a token's column of the result depends on its own B row only (rows past M in a
 *   tile are stale shared memory, never stored).
 * - Layouts (K-major both, as e4m3 wgmma requires): A as the TMA writes it with the 128-byte swizzle
 *   (weight row r's 128 k in the 128 bytes at 128 r, 16-byte chunk c at c ^ (r & 7); 8-row groups
 *   1024 bytes apart, the stride byte offset; stages 1024-byte aligned), step q at +32 q bytes of
 *   the start address (the swizzle applies to the address bits). B without swizzle: per (block,
 *   8 tokens) 1024 contiguous bytes, 16-k chunk c at 128 c (wgFp8OperandOffset), step q at +256 q.
 */
#ifndef METRALE_PROJ_WGMMA_FP8_CUH
#define METRALE_PROJ_WGMMA_FP8_CUH

#include <cstdint>
#include <type_traits>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include "actQuant.cuh"
#include "metraleNumerics.cuh"
#include "projGemm.cuh"
#include "projWgmma.cuh"

namespace metrale
{

/* Byte offset of xq[m, k] in the FP8 wgmma operand of a launch whose rows form mg groups of 8. */
__host__ __device__ __forceinline__ size_t wgFp8OperandOffset(int m, int k, int mg)
{
    const int b = k >> 7;
    return (((static_cast<size_t>(b) * mg + (m >> 3)) * 8 + ((k & 127) >> 4)) * 8 + (m & 7)) * 16 + (k & 15);
}

/* Bytes of the FP8 wgmma operand of [m, k]: every 128-k block and every row group of 8 complete. */
inline size_t wgFp8OperandBytes(int64_t m, int64_t k)
{
    const size_t mg = static_cast<size_t>((m + 7) / 8);
    const size_t nkb = static_cast<size_t>((k + 127) / 128);
    return (nkb * mg * 1024 + 255) / 256 * 256;
}

/*
 * The e4m3 values of the fp8 pre-pass (xq as exact f16, row-major [M, K], K a multiple of 16) as
 * e4m3 bytes in the operand layout. One CTA of 64 threads per (block, row group): thread (r, c)
 * writes the 16 bytes of row r, chunk c; values past M or K are +0.
 */
static __global__ void __launch_bounds__(64) wgFp8OperandKernel(const uint16_t* __restrict__ xq, uint8_t* __restrict__ out,
    int M, int K, int mg)
{
    const int grp = blockIdx.x % mg;
    const int b = blockIdx.x / mg;
    const int c = threadIdx.x & 7;
    const int r = threadIdx.x >> 3;
    const int m = 8 * grp + r;
    const int k0 = 128 * b + 16 * c;
    uint4 v[2] = {make_uint4(0u, 0u, 0u, 0u), make_uint4(0u, 0u, 0u, 0u)};
    if (m < M && k0 < K)  // K % 16 == 0: the chunk is all inside K or all past it
    {
        const uint4* src = reinterpret_cast<const uint4*>(xq + static_cast<size_t>(m) * K + k0);
        v[0] = src[0];
        v[1] = src[1];
    }
    const uint32_t h[8] = {v[0].x, v[0].y, v[0].z, v[0].w, v[1].x, v[1].y, v[1].z, v[1].w};
    uint32_t w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
    {
        uint32_t word = 0u;
#pragma unroll
        for (int j = 0; j < 2; ++j)
        {
            __half2_raw hr;
            hr.x = static_cast<unsigned short>(h[2 * q + j] & 0xFFFFu);
            hr.y = static_cast<unsigned short>(h[2 * q + j] >> 16);
            // Exact: every value is an e4m3 value (the pre-pass's), +0 stays +0.
            word |= static_cast<uint32_t>(__nv_cvt_halfraw2_to_fp8x2(hr, __NV_SATFINITE, __NV_E4M3)) << (16 * j);
        }
        w[q] = word;
    }
    *reinterpret_cast<uint4*>(out + static_cast<size_t>(blockIdx.x) * 1024 + c * 128 + r * 16)
        = make_uint4(w[0], w[1], w[2], w[3]);
}

/* Sixteen consecutive elements of x from element i (16-byte aligned: K % 16 == 0 and x 16-byte
 * aligned), each as loadXBf16 gives it (bf16(x) as a float). */
__device__ __forceinline__ void loadX16Bf16(const void* __restrict__ x, int32_t dtype, size_t i, float (&v)[16])
{
    if (dtype == kMETRALE_FLOAT32)
    {
        const float4* s = reinterpret_cast<const float4*>(static_cast<const float*>(x) + i);
#pragma unroll
        for (int q = 0; q < 4; ++q)
        {
            const float4 f = s[q];
            v[4 * q + 0] = bf16Round(f.x);
            v[4 * q + 1] = bf16Round(f.y);
            v[4 * q + 2] = bf16Round(f.z);
            v[4 * q + 3] = bf16Round(f.w);
        }
        return;
    }
    const uint4* s = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x) + i);
    const uint4 a = s[0];
    const uint4 b = s[1];
    const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int q = 0; q < 8; ++q)
    {
        if (dtype == kMETRALE_BFLOAT16)
        {
            v[2 * q] = __uint_as_float(w[q] << 16);  // exact: a bf16 is the high half of its float
            v[2 * q + 1] = __uint_as_float(w[q] & 0xFFFF0000u);
        }
        else
        {
            __half_raw lo, hi;
            lo.x = static_cast<unsigned short>(w[q] & 0xFFFFu);
            hi.x = static_cast<unsigned short>(w[q] >> 16);
            v[2 * q] = bf16Round(__half2float(__half(lo)));
            v[2 * q + 1] = bf16Round(__half2float(__half(hi)));
        }
    }
}

/*
 * The fp8 pre-pass fused with the operand layout (the fused variants of METRALE_W8A8_MMA): one CTA
 * (kACT_THREADS threads) per row m of the 8 mg rows of the operand. Row m < M: sx[m] = amax / 448
 * (1 where amax == 0), or the static *inputScale, and the e4m3 bytes e4m3(bf16(x) / sx) straight
 * into the wgFp8OperandOffset layout, +0 past K up to the last block's end; rows M .. 8 mg - 1 all +0.
 * The same values as quantFp8Kernel (or quantFp8StaticKernel) followed by wgFp8OperandKernel: the
 * same roundings (__fdiv_rn, the saturating RNE e4m3 encoding, the amax a max, whose order changes
 * nothing), the same e4m3 byte those two passes carry through an exact f16; one read of x (16-byte
 * loads) and one write of the operand instead of a read of x, a write and a read of the f16 xq and
 * a second launch. K a multiple of 16, x 16-byte aligned (the launcher checks). At few rows a row
 * is split over gridDim.y CTAs (actRowChunks): chunk blockIdx.y writes only its range of the 16-k
 * chunks (actChunk, whole 128-k blocks), each computing the row's amax whole (rowAmax: the same
 * max), chunk 0 writing sx; the same bytes at every split.
 */
static __global__ void __launch_bounds__(kACT_THREADS) wgFp8QuantKernel(const void* __restrict__ x, int32_t dtype,
    const float* __restrict__ inputScale, uint8_t* __restrict__ out, float* __restrict__ sx, int M, int K, int mg)
{
    const int m = blockIdx.x;
    const int nch = ((K + 127) >> 7) * 8;  // 16-k chunks of the operand's row, whole blocks
    const int kch = K >> 4;                // those inside K
    const size_t rowOff = static_cast<size_t>(m >> 3) * 1024 + static_cast<size_t>(m & 7) * 16;
    const size_t blockStride = static_cast<size_t>(mg) * 1024;
    int c0, c1;
    actChunk(nch, 8, &c0, &c1);
    if (m >= M)
    {
        for (int c = c0 + threadIdx.x; c < c1; c += kACT_THREADS)
        {
            *reinterpret_cast<uint4*>(out + (c >> 3) * blockStride + rowOff + (c & 7) * 128) = make_uint4(0u, 0u, 0u, 0u);
        }
        return;
    }
    if (c0 == c1 && blockIdx.y != 0)
    {
        return;
    }
    const size_t base = static_cast<size_t>(m) * K;
    float s;
    if (inputScale != nullptr)
    {
        s = __ldg(inputScale);
    }
    else
    {
        const float amax = rowAmax(x, dtype, base, K);
        s = amax > 0.0f ? __fdiv_rn(amax, kE4M3_MAX) : 1.0f;
    }
    if (threadIdx.x == 0 && blockIdx.y == 0)
    {
        sx[m] = s;
    }
    for (int c = c0 + threadIdx.x; c < c1; c += kACT_THREADS)
    {
        uint32_t w[4] = {0u, 0u, 0u, 0u};
        if (c < kch)
        {
            float v[16];
            loadX16Bf16(x, dtype, base + 16 * static_cast<size_t>(c), v);
#pragma unroll
            for (int e = 0; e < 16; ++e)
            {
                w[e >> 2] |= static_cast<uint32_t>(e4m3Encode(__fdiv_rn(v[e], s))) << (8 * (e & 3));
            }
        }
        *reinterpret_cast<uint4*>(out + (c >> 3) * blockStride + rowOff + (c & 7) * 128) = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* Bytes of the block-scaled FP8 kernel's activation scales, [nkb, 8 mg] float32 (block-major, so
 * that a stage's token tile of one block is one contiguous bulk copy). */
inline size_t wgFp8BlockScaleBytes(int64_t m, int64_t k)
{
    const size_t mg = static_cast<size_t>((m + 7) / 8);
    const size_t nkb = static_cast<size_t>((k + 127) / 128);
    return (nkb * mg * 8 * 4 + 255) / 256 * 256;
}

/*
 * The row_block128 fp8 pre-pass fused with the operand layout (the block-scaled FP8 kernel's): one
 * CTA (kACT_THREADS threads) per row m of the 8 mg rows; the 8 consecutive threads of a 128-k block
 * hold its 8 chunks of 16 k. Row m < M, block b: sx = amax / 448 over the block's elements inside K
 * (1 where amax == 0), the e4m3 bytes e4m3(bf16(x) / sx) into the wgFp8OperandOffset layout, +0 past
 * K; sxT[b, m] = sx. Rows M .. 8 mg - 1: bytes +0 and sxT 0. The same values as quantFp8Kernel's
 * row_block128 branch (the same roundings; the amax a max, whose order changes nothing) followed by
 * wgFp8OperandKernel. K a multiple of 16, x 16-byte aligned (the launcher checks). At few rows a
 * row is split over gridDim.y CTAs (actRowChunks): chunk blockIdx.y does only its range of the
 * 128-k blocks (actChunk; no row amax to share), the same bytes at every split.
 */
static __global__ void __launch_bounds__(kACT_THREADS) wgFp8QuantBlockKernel(const void* __restrict__ x, int32_t dtype,
    uint8_t* __restrict__ out, float* __restrict__ sxT, int M, int K, int mg)
{
    static_assert(kACT_THREADS % 32 == 0, "whole warps: a block's 8 chunks are 8 lanes of one warp");
    const int m = blockIdx.x;
    const int nch = ((K + 127) >> 7) * 8;  // 16-k chunks of the operand's row, whole blocks
    const int kch = K >> 4;                // those inside K
    const size_t rowOff = static_cast<size_t>(m >> 3) * 1024 + static_cast<size_t>(m & 7) * 16;
    const size_t blockStride = static_cast<size_t>(mg) * 1024;
    const size_t base = static_cast<size_t>(m) * K;
    const int mp = 8 * mg;
    int cb, ce;
    actChunk(nch, 8, &cb, &ce);  // whole blocks: cb a multiple of 8, so a block's 8 chunks stay 8 aligned lanes
    for (int c0 = cb; c0 < ce; c0 += kACT_THREADS)  // the same trip count in every thread (the shuffles)
    {
        const int c = c0 + static_cast<int>(threadIdx.x);
        float v[16];
        float amax = 0.0f;
#pragma unroll
        for (int e = 0; e < 16; ++e)
        {
            v[e] = 0.0f;
        }
        if (m < M && c < kch)
        {
            loadX16Bf16(x, dtype, base + 16 * static_cast<size_t>(c), v);
#pragma unroll
            for (int e = 0; e < 16; ++e)
            {
                amax = fmaxf(amax, fabsf(v[e]));
            }
        }
        // The block's amax over its 8 lanes (nch and kACT_THREADS are multiples of 8).
        amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
        amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
        amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 4));
        if (c >= ce)
        {
            continue;
        }
        const float s = amax > 0.0f ? __fdiv_rn(amax, kE4M3_MAX) : 1.0f;
        uint32_t w[4] = {0u, 0u, 0u, 0u};
        if (m < M && c < kch)
        {
#pragma unroll
            for (int e = 0; e < 16; ++e)
            {
                w[e >> 2] |= static_cast<uint32_t>(e4m3Encode(__fdiv_rn(v[e], s))) << (8 * (e & 3));
            }
        }
        *reinterpret_cast<uint4*>(out + (c >> 3) * blockStride + rowOff + (c & 7) * 128) = make_uint4(w[0], w[1], w[2], w[3]);
        if ((c & 7) == 0)
        {
            sxT[static_cast<size_t>(c >> 3) * mp + m] = m < M ? s : 0.0f;
        }
    }
}

/* sxT[b, m] = sx[m, b] (the split pre-pass's row-major [M, nkb] scales, block-major for the
 * block-scaled FP8 kernel), 0 for the rows M .. 8 mg - 1. */
static __global__ void wgFp8BlockScaleKernel(const float* __restrict__ sx, float* __restrict__ sxT, int M, int nkb, int mg)
{
    const int mp = 8 * mg;
    const int i = static_cast<int>(blockIdx.x) * blockDim.x + static_cast<int>(threadIdx.x);
    if (i < nkb * mp)
    {
        const int b = i / mp;
        const int m = i - b * mp;
        sxT[i] = m < M ? sx[static_cast<size_t>(m) * nkb + b] : 0.0f;
    }
}

/* d = (scaleD ? d : 0) + A * B: wgmma m64nNk32 e4m3 x e4m3, both operands through shared-memory
 * descriptors, float32 results. */
template <int kN>
struct WgmmaFp8;

template <>
struct WgmmaFp8<8>
{
    __device__ static void run(float (&d)[4], uint64_t descA, uint64_t descB, int scaleD)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "l"(descA), "l"(descB), "r"(scaleD));
    }
};

template <>
struct WgmmaFp8<16>
{
    __device__ static void run(float (&d)[8], uint64_t descA, uint64_t descB, int scaleD)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
            : "l"(descA), "l"(descB), "r"(scaleD));
    }
};

template <>
struct WgmmaFp8<32>
{
    __device__ static void run(float (&d)[16], uint64_t descA, uint64_t descB, int scaleD)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
            : "l"(descA), "l"(descB), "r"(scaleD));
    }
};

template <>
struct WgmmaFp8<64>
{
    __device__ static void run(float (&d)[32], uint64_t descA, uint64_t descB, int scaleD)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "l"(descA), "l"(descB), "r"(scaleD));
    }
};

template <>
struct WgmmaFp8<128>
{
    __device__ static void run(float (&d)[64], uint64_t descA, uint64_t descB, int scaleD)
    {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "l"(descA), "l"(descB), "r"(scaleD));
    }
};

/* A (the weights as the TMA writes them): K-major, 128-byte swizzle (layout type 1 in bits 62-63),
 * 8-row groups 1024 bytes apart (stride byte offset), leading byte offset unused (1), base offset 0
 * (stages 1024-byte aligned). */
__device__ __forceinline__ uint64_t wgFp8DescA(uint32_t saddr)
{
    return static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(1) << 16)
        | (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}

/* B (the token tile): K-major, no swizzle, core matrices of 8 rows x 16 bytes; the next 16 k at +128
 * bytes (leading byte offset), the next 8 rows at +1024 (stride byte offset). */
__device__ __forceinline__ uint64_t wgFp8DescB(uint32_t saddr)
{
    return static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(128 >> 4) << 16)
        | (static_cast<uint64_t>(1024 >> 4) << 32);
}

/* The 2-D box at (c0 = k, c1 = row) of the tensor map into shared memory, completing on bar. */
__device__ __forceinline__ void tmaLoad2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar)
{
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            smemAddr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smemAddr(bar))
        : "memory");
}

/* The scales a block-scaled FP8 kernel applies per 128-k block (kSc, a bit set; 0: row x channel,
 * the scales once in the epilogue): kSC_BLOCK_W block128 weights (sw[n / 128, b]), kSC_BLOCK_X
 * row_block128 activations (sx[m, b]). */
constexpr int kSC_BLOCK_W = 1;
constexpr int kSC_BLOCK_X = 2;
// A measurement probe, not the contract's arithmetic (METRALE_W8A8_MMA=wg-fma-probe, block128 x
// row_block128 only, benchmarks alone): fin = fma(P, sx[m, b] * sw[b], fin), one FFMA an
// accumulator instead of two FMUL and an FADD, to time what the promotion's FP32 issue costs.
constexpr int kSC_FMA_PROBE = 4;
// The weight-scale row a block128 CTA keeps in shared memory: K up to 512 blocks (65536).
constexpr int kFP8_SW_MAX = 512;

/* Consumer warpgroups per CTA (each 64 weight rows): kWG_CONSUMERS (128 rows), or 1 at token tiles
 * of 8 and 16 (decode: twice the CTAs, two an SM). A row's arithmetic is its warpgroup's alone (the
 * same wgmma on the same operands, the same promotion points), so the bits do not depend on it. */
template <int kN>
constexpr int wgFp8Consumers(bool rows64)
{
    return rows64 && kN <= 16 ? 1 : kWG_CONSUMERS;
}

/* Shared memory (bytes, from a 1024-byte aligned base): kST stages of [the weights' 64 kCW rows x
 * 128 k (swizzled) | kN token rows x 128 k], then the full / empty mbarriers; with per-block scales
 * (kSc) then the token scales (kSC_BLOCK_X: kST stages of kN floats, each filled with its stage;
 * else kN floats, the tile's sx[m], written once) and the CTA's weight-scale row (kSC_BLOCK_W:
 * kFP8_SW_MAX floats). */
template <int kN, int kST, int kSc = 0, int kCW = kWG_CONSUMERS>
struct WgFp8Layout
{
    static constexpr int kA = 64 * kCW * 128;
    static constexpr int kStage = kA + kN * 128;
    static constexpr int kBar = kST * kStage;
    static constexpr int kSx = kBar + 2 * kST * 8;
    static constexpr int kSxBytes = kSc == 0 ? 0 : ((kSc & kSC_BLOCK_X) ? kST : 1) * kN * 4;
    static constexpr int kSw = kSx + kSxBytes;
    static constexpr int kSmem = 1024 + kSw + ((kSc & kSC_BLOCK_W) ? kFP8_SW_MAX * 4 : 0);  // + the base's alignment
    static_assert(kSmem <= 227 * 1024, "shared memory");
    static_assert(kStage % 1024 == 0, "1024-byte aligned stages (the 128-byte swizzle)");
    static_assert(kSx % 16 == 0, "16-byte aligned token scales (the bulk copy)");
};

/* Stages per token tile: as many as the shared memory holds (at kCW = 1 half of it: two CTAs an
 * SM), at most 12. */
template <int kN, int kSc = 0, int kCW = kWG_CONSUMERS>
constexpr int wgFp8Stages()
{
    constexpr int perStage = 64 * kCW * 128 + kN * 128 + 16 + ((kSc & kSC_BLOCK_X) ? kN * 4 : 0);
    constexpr int fixed = 1024 + (kSc != 0 && !(kSc & kSC_BLOCK_X) ? kN * 4 : 0) + ((kSc & kSC_BLOCK_W) ? kFP8_SW_MAX * 4 : 0);
    constexpr int budget = kCW == 1 ? 113 * 1024 : 227 * 1024;
    constexpr int fit = (budget - fixed) / perStage;
    return fit < 12 ? fit : 12;
}

/*
 * The FP8 kernel's epilogue with the scales hoisted (the default; METRALE_W8A8_MMA=wg-base / wg-q
 * keep wgEpilogue): W8A8Fp8Policy<false>::finish's arithmetic, y = (acc * sx[m]) * sw[n] (+ bias)
 * with __fmul_rn / __fadd_rn in that order, so the bits are wgEpilogue's; but every sx[m], sw[n]
 * and bias[n] this thread needs (kN / 4 + 4 values) is read before its first store. In wgEpilogue
 * the policy reads them per element between the stores, which may alias them (Y is void *), so each
 * element waited one L2 latency (SASS: LDG, LDG, STG per element, 64 times a thread at kN = 128; on
 * the H200 about 9.5 us a CTA, fitted over the four M = 4096 shapes of
 * benchmarks/results/w8a8-stages-20261202-1533-4a278e6.md). The scales were written by the
 * pre-pass (sx) or are weights, read-only here (the non-coherent path).
 */
template <class P, int kN, bool kScaled = false, bool kLo = false>
__device__ __forceinline__ void wgFp8Epilogue(const typename P::Params& p, const float (&tot)[kN / 2],
    void* __restrict__ Y, int M, int N, int32_t yDtype, int m0, const int (&nRow)[2], const bool (&nOk)[2], int t,
    int mLo = 0)
{
    float sxv[kN / 4];  // tokens m0 + 8 j + 2 t + e at 2 j + e
#pragma unroll
    for (int j = 0; j < kN / 8; ++j)
    {
#pragma unroll
        for (int e = 0; e < 2; ++e)
        {
            const int m = m0 + 8 * j + 2 * t + e;
            sxv[2 * j + e] = m < M && !kScaled ? __ldg(p.sx + m) : 0.0f;
        }
    }
    float swv[2];
    float bv[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
    {
        swv[hr] = nOk[hr] && !kScaled ? __ldg(p.scale + nRow[hr]) : 0.0f;
        bv[hr] = nOk[hr] && p.bias != nullptr ? __ldg(p.bias + nRow[hr]) : 0.0f;
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
    {
        if (!nOk[hr])
        {
            continue;
        }
        const int n = nRow[hr];
#pragma unroll
        for (int j = 0; j < kN / 8; ++j)
        {
#pragma unroll
            for (int e = 0; e < 2; ++e)
            {
                const int m = m0 + 8 * j + 2 * t + e;
                if (m < M && (!kLo || m >= mLo))  // kLo: the rows from mLo (a grouped tile's own expert's)
                {
                    // kScaled: the blocks were scaled at their promotion (consumeWgmmaFp8)
                    float v = kScaled ? tot[4 * j + 2 * hr + e]
                                      : __fmul_rn(__fmul_rn(tot[4 * j + 2 * hr + e], sxv[2 * j + e]), swv[hr]);
                    if (p.bias != nullptr)
                    {
                        v = __fadd_rn(v, bv[hr]);
                    }
                    storeY(Y, yDtype, static_cast<size_t>(m) * N + n, v);
                }
            }
        }
    }
}

/*
 * The consumer warpgroups: per 128-k block in ascending order, wait for its stage, issue its four
 * wgmmas (the first from zero) as one group, wait for it, release the stage and promote,
 * final = final + partial. The wait drains this warpgroup's pipe once per block (the promotion reads
 * the block's result; reading it while another group is in flight makes ptxas serialize the wgmmas,
 * C7514); the CTA's other consumer warpgroup issues meanwhile.
 * Per-block scales (kSc != 0, the block-scaled variants): the promotion is
 * final = final + (partial * sx[m, b]) * sw[n, b] (__fmul_rn, __fmul_rn, __fadd_rn), the CPU
 * reference's order, and the epilogue adds the bias alone. sx[m, b] comes from the stage (kSC_BLOCK_X,
 * read while the block's wgmmas run and before the stage is released) or is the tile's sx[m] (held in
 * registers); sw[n, b] is the CTA's one block128 scale of block b (its 128 rows start at a multiple
 * of 128; shared memory) or sw[n] (channel, in registers).
 */
/* kPipe (the default at every token tile but the 128 tile of block128 x row; METRALE_W8A8_MMA=wg-plain
 * without; measured 2-7% faster on the H200 at token tiles up to 32, w8a8-variants-20261203-1730-e28ca9b.md,
 * 3-21% at 64 and 128, w8a8-variants- and w8a8-block-variants-20261204-1444-5ad8fe6.md): the blocks in pairs, both
 * pairs' wgmma groups issued into two partial sets before the first is waited for (`wgmma.wait_group
 * 1`), released and promoted, so that one block's tensor work runs under the wait, release and
 * promotion of the other. Each block's partial is still four chained wgmmas from a fresh accumulator,
 * promoted in ascending order: the same bits. */
template <class P, int kN, int kST, bool kHoist = false, int kSc = 0, int kCW = kWG_CONSUMERS, bool kPipe = false,
    bool kPersist = false, bool kLo = false>
__device__ __forceinline__ void consumeWgmmaFp8(const typename P::Params& p, uint32_t sbase, const float* sxS,
    const float* swS, uint64_t* full, uint64_t* empty, void* __restrict__ Y, int M, int N, int32_t yDtype, int nkb,
    int m0, int n0, int& slot, uint32_t& phase, int mLo = 0)
{
#ifdef METRALE_SM90A
    using L = WgFp8Layout<kN, kST, kSc, kCW>;
    constexpr int kACC = kN / 2;  // accumulators per thread: kN / 8 n8 column tiles x 4
    const int tid = threadIdx.x;
    const int warpId = tid >> 5;
    const int lane = tid & 31;
    // Warp wq of warpgroup wg holds weight rows n0 + 64 wg + 16 wq + (0..15).
    const int wg = warpId >> 2;
    const int wq = warpId & 3;
    const int g = lane >> 2;
    const int t = lane & 3;
    int nRow[2];
    bool nOk[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
    {
        nRow[hr] = n0 + 64 * wg + 16 * wq + g + 8 * hr;
        nOk[hr] = nRow[hr] < N;
    }
    float fin[kACC];  // the float32 sum of the promoted blocks, from +0
    float pt[kACC];   // the block's partial
#pragma unroll
    for (int e = 0; e < kACC; ++e)
    {
        fin[e] = 0.0f;
        pt[e] = 0.0f;
    }
    constexpr int kSXV = kSc != 0 ? kN / 4 : 1;
    float sxv[kSXV];  // the block's token scales: token m0 + 8 j + 2 t + e at 2 j + e
    float swc[2];     // channel weight scales of the thread's two rows (kSc without kSC_BLOCK_W)
#pragma unroll
    for (int i = 0; i < kSXV; ++i)
    {
        sxv[i] = 0.0f;
    }
    if constexpr (kSc != 0 && !(kSc & kSC_BLOCK_X))
    {
#pragma unroll
        for (int j = 0; j < kN / 8; ++j)
        {
            if constexpr (kPersist)  // the tile's tokens change with the tile: read where the pre-pass wrote them
            {
#pragma unroll
                for (int e = 0; e < 2; ++e)
                {
                    const int m = m0 + 8 * j + 2 * t + e;
                    sxv[2 * j + e] = m < M ? __ldg(p.sx + m) : 0.0f;
                }
            }
            else
            {
                const float2 v = *reinterpret_cast<const float2*>(sxS + 8 * j + 2 * t);
                sxv[2 * j] = v.x;
                sxv[2 * j + 1] = v.y;
            }
        }
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
    {
        swc[hr] = kSc != 0 && !(kSc & kSC_BLOCK_W) && nOk[hr] ? __ldg(p.scale + nRow[hr]) : 0.0f;
    }
    // One block's wgmmas into acc, once the stage `slot` is full.
    auto issueBlock = [&](int slot, uint32_t phase, float (&acc)[kACC]) {
        mbarWait(&full[slot], phase);
        fenceRegs(acc);
        wgFence();
        const uint32_t st = sbase + slot * L::kStage;
        const uint64_t descA = wgFp8DescA(st + wg * (64 * 128));
        const uint64_t descB = wgFp8DescB(st + L::kA);
#pragma unroll
        for (int q = 0; q < 4; ++q)
        {
            // k = 128 kb + 32 q + (0..31): A at +32 q bytes, B at +256 q bytes (the descriptors count 16 bytes)
            WgmmaFp8<kN>::run(acc, descA + static_cast<uint64_t>(2 * q), descB + static_cast<uint64_t>(16 * q),
                q > 0 ? 1 : 0);
        }
        wgCommit();
    };
    // A block's scales (kSc): the stage's token scales into sxv, the weight scale returned; read while
    // its wgmmas run.
    auto blockScales = [&](int slot, int kb) {
        float swb = 0.0f;
        if constexpr ((kSc & kSC_BLOCK_X) != 0)
        {
            const float* sxb = sxS + slot * kN;
#pragma unroll
            for (int j = 0; j < kN / 8; ++j)
            {
                const float2 v = *reinterpret_cast<const float2*>(sxb + 8 * j + 2 * t);
                sxv[2 * j] = v.x;
                sxv[2 * j + 1] = v.y;
            }
        }
        if constexpr ((kSc & kSC_BLOCK_W) != 0)
        {
            // persistent: the tile's block row changes with the tile; the producer put the block's scale
            // in the stage's word (swS[slot]), else the CTA's row is in shared memory
            swb = kPersist ? swS[slot] : swS[kb];
        }
        return swb;
    };
    // A complete block (acc): the stage's release and the promotion.
    // Whether the stage holds the block's scales (the token scales, kSC_BLOCK_X; the weight scale of a
    // persistent launch): then it is released after the promotion, else at once.
    constexpr bool kStageScales = (kSc & kSC_BLOCK_X) != 0 || (kPersist && (kSc & kSC_BLOCK_W) != 0);
    auto promoteBlock = [&](int slot, float (&acc)[kACC], float swb) {
        fenceRegs(acc);
        if constexpr (!kStageScales)
        {
            if (lane == 0)
            {
                mbarArrive(&empty[slot]);
            }
        }
        if constexpr (kSc == 0)
        {
#pragma unroll
            for (int e = 0; e < kACC; ++e)
            {
                fin[e] = __fadd_rn(fin[e], acc[e]);  // the promotion, once per 128-k block
            }
        }
        else
        {
#pragma unroll
            for (int j = 0; j < kN / 8; ++j)
            {
                if constexpr ((kSc & kSC_FMA_PROBE) != 0)
                {
                    static_assert((kSc & kSC_BLOCK_W) != 0, "the probe's one scale a token needs block128 weights");
                    const float s0 = __fmul_rn(sxv[2 * j], swb);
                    const float s1 = __fmul_rn(sxv[2 * j + 1], swb);
#pragma unroll
                    for (int hr = 0; hr < 2; ++hr)
                    {
                        fin[4 * j + 2 * hr] = __fmaf_rn(acc[4 * j + 2 * hr], s0, fin[4 * j + 2 * hr]);
                        fin[4 * j + 2 * hr + 1] = __fmaf_rn(acc[4 * j + 2 * hr + 1], s1, fin[4 * j + 2 * hr + 1]);
                    }
                    continue;
                }
#pragma unroll
                for (int hr = 0; hr < 2; ++hr)
                {
                    const float sw = (kSc & kSC_BLOCK_W) ? swb : swc[hr];
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                    {
                        const int i = 4 * j + 2 * hr + e;  // the promotion with the block's scales
                        fin[i] = __fadd_rn(fin[i], __fmul_rn(__fmul_rn(acc[i], sxv[2 * j + e]), sw));
                    }
                }
            }
            if constexpr (kStageScales)
            {
                // The stage holds this block's scales: released only after the promotion has
                // consumed every lane's loads of them (an arrival right after the loads could
                // overtake them, as the ring's did at 32ab8e0), the warp synchronized for the order.
                __syncwarp();
                if (lane == 0)
                {
                    mbarArrive(&empty[slot]);
                }
            }
        }
    };
    auto advance = [&]() {
        if (++slot == kST)
        {
            slot = 0;
            phase ^= 1u;
        }
    };
    if constexpr (kPipe)
    {
        static_assert((kSc & kSC_FMA_PROBE) == 0, "two partial sets: not the probe");
        float pb[kACC];
#pragma unroll
        for (int e = 0; e < kACC; ++e)
        {
            pb[e] = 0.0f;
        }
        // Blocks in pairs within one iteration (ptxas serializes the wgmmas, C7514, when a group is
        // still in flight across the loop's back edge): both issued, the first waited for (1 left),
        // released and promoted under the second's tensor work, then the second.
#pragma unroll 1
        for (int kb = 0; kb < nkb; kb += 2)
        {
            const int sa = slot;
            issueBlock(slot, phase, pt);  // block kb into pt
            advance();
            if (kb + 1 < nkb)
            {
                const int sb = slot;
                issueBlock(slot, phase, pb);  // block kb + 1 into pb
                advance();
                wgWait<1>();  // block kb complete
                promoteBlock(sa, pt, blockScales(sa, kb));
                wgWait<0>();
                promoteBlock(sb, pb, blockScales(sb, kb + 1));
            }
            else
            {
                const float swb = blockScales(sa, kb);
                wgWait<0>();
                promoteBlock(sa, pt, swb);
            }
        }
    }
    else
    {
#pragma unroll 1
        for (int kb = 0; kb < nkb; ++kb)
        {
            const int sa = slot;
            issueBlock(slot, phase, pt);
            const float swb = blockScales(sa, kb);  // while the wgmmas run
            wgWait<0>();
            promoteBlock(sa, pt, swb);
            advance();
        }
    }
    if constexpr (kSc != 0)
    {
        wgFp8Epilogue<P, kN, true, kLo>(p, fin, Y, M, N, yDtype, m0, nRow, nOk, t, mLo);
    }
    else if constexpr (kHoist)
    {
        wgFp8Epilogue<P, kN, false, kLo>(p, fin, Y, M, N, yDtype, m0, nRow, nOk, t, mLo);
    }
    else
    {
        static_assert(!kLo, "the rows' lower bound: the hoisted epilogue only");
        wgEpilogue<P, kN>(p, fin, Y, nullptr, M, N, yDtype, m0, nRow, nOk, t);
    }
#endif
}

/* The FP8 kernels' ring: each stage's full barrier (the producer's expect_tx arrival) and empty
 * barrier (one arrival per consumer warp), initialized by thread 0 before the CTA's first barrier. */
template <int kST, int kCW>
__device__ __forceinline__ void wgFp8RingInit(uint64_t* full, uint64_t* empty)
{
    if (threadIdx.x == 0)
    {
        for (int s = 0; s < kST; ++s)
        {
            mbarInit(&full[s], 1);
            mbarInit(&empty[s], 4 * kCW);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
}

/* A persistent producer's stages of one tile (token rows m0.., weight rows n0.. of the tensor map's
 * row wRow..): per 128-k block, once its stage is free (after the ring's first kST fills), the token
 * tile by one bulk copy, the block's token scales (kSC_BLOCK_X) and weight scale (kSC_BLOCK_W, into the
 * stage's word, visible to the consumers by the arrival's release), the weights' box by TMA; the ring's
 * slot, phase and fill count carried from tile to tile (the next tile's first stages fill under this
 * one's last blocks). wRow is n0 in the dense kernel; the grouped kernel's expert e starts at e N. */
template <class P, int kN, int kST, int kSc, int kCW>
__device__ __forceinline__ void produceFp8Tile(const CUtensorMap* wmap, const typename P::Params& p, uint8_t* smem,
    uint64_t* full, uint64_t* empty, const uint8_t* __restrict__ Xw, const float* __restrict__ sxT, float* sxS,
    float* swS, int mg, int nkb, int m0, int n0, int wRow, int& slot, uint32_t& phase, int& filled)
{
    using L = WgFp8Layout<kN, kST, kSc, kCW>;
    const uint32_t rowsB = static_cast<uint32_t>(min(kN, 8 * mg - m0));
    const uint32_t bytesB = rowsB * 128u;
    const uint32_t bytesS = (kSc & kSC_BLOCK_X) ? rowsB * 4u : 0u;  // a multiple of 32
    for (int kb = 0; kb < nkb; ++kb)
    {
        if (filled >= kST)
        {
            mbarWait(&empty[slot], phase ^ 1u);
        }
        uint8_t* st = smem + slot * L::kStage;
        if constexpr ((kSc & kSC_BLOCK_W) != 0)
        {
            // the tile's block row: its rows start at a multiple of 128
            swS[slot] = __ldg(p.scale + static_cast<size_t>(n0 >> 7) * p.kBlocks + kb);
        }
        mbarExpectTx(&full[slot], bytesB + bytesS + static_cast<uint32_t>(L::kA));  // the box counts whole
        bulkCopy(st + L::kA, Xw + (static_cast<size_t>(kb) * mg + (m0 >> 3)) * 1024, bytesB, &full[slot]);
        if constexpr ((kSc & kSC_BLOCK_X) != 0)
        {
            bulkCopy(sxS + slot * kN, sxT + static_cast<size_t>(kb) * 8 * mg + m0, bytesS, &full[slot]);
        }
        tmaLoad2d(st, wmap, kb * 128, wRow, &full[slot]);
        ++filled;
        if (++slot == kST)
        {
            slot = 0;
            phase ^= 1u;
        }
    }
}

/* kSc: the per-block scales (kSC_BLOCK_W / kSC_BLOCK_X; 0: row x channel). sxT: the token scales
 * block-major, [nkb, 8 mg] (kSC_BLOCK_X only; else null, the tile's sx[m] read from p.sx). */
/* Threads of the kernel at kCW consumer warpgroups: theirs and the producer warpgroup. */
template <int kCW>
constexpr int wgFp8Threads()
{
    return 128 * kCW + 128;
}

template <class P, int kN, int kST, bool kHoist = false, int kSc = 0, int kCW = kWG_CONSUMERS, bool kPipe = false,
    bool kPersist = false>
__global__ void __launch_bounds__(wgFp8Threads<kCW>(), kCW == 1 ? 2 : 1) projWgmmaFp8Kernel(
    const __grid_constant__ CUtensorMap wmap, const typename P::Params p, const uint8_t* __restrict__ Xw,
    const float* __restrict__ sxT, void* __restrict__ Y, int M, int N, int K, int32_t yDtype)
{
#ifdef METRALE_SM90A
    using L = WgFp8Layout<kN, kST, kSc, kCW>;
    constexpr int kT = wgFp8Threads<kCW>();
    extern __shared__ __align__(1024) uint8_t smemRaw[];
    uint8_t* smem = smemRaw + ((1024u - (smemAddr(smemRaw) & 1023u)) & 1023u);
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::kBar);
    uint64_t* empty = full + kST;
    const int tid = threadIdx.x;
    const int nkb = (K + 127) >> 7;
    const int mg = (M + 7) >> 3;
    int m0 = 0;
    int n0 = 0;
    // kPersist: gridDim.x CTAs walk the raster's tiles id = blockIdx.x, + gridDim.x, ... (gx weight
    // tiles x gy token tiles); else one tile a CTA.
    const int gx = (N + 64 * kCW - 1) / (64 * kCW);
    const int gy = (M + kN - 1) / kN;
    const int tiles = gx * gy;
    const int tile0 = static_cast<int>(blockIdx.x);
    const int tileStep = static_cast<int>(gridDim.x);
    if constexpr (!kPersist)
    {
        wgRasterTile(kN, m0, n0, 64 * kCW);
    }
    float* sxS = reinterpret_cast<float*>(smem + L::kSx);
    float* swS = reinterpret_cast<float*>(smem + L::kSw);
    if constexpr (kSc != 0 && !(kSc & kSC_BLOCK_X) && !kPersist)
    {
        for (int i = tid; i < kN; i += kT)  // the tile's one scale a token (0 past M: never stored)
        {
            sxS[i] = m0 + i < M ? p.sx[m0 + i] : 0.0f;
        }
    }
    if constexpr ((kSc & kSC_BLOCK_W) != 0 && !kPersist)
    {
        const float* row = p.scale + static_cast<size_t>(n0 >> 7) * p.kBlocks;  // rows n0 .. n0 + 64 kCW - 1: one block row
        for (int i = tid; i < nkb; i += kT)
        {
            swS[i] = row[i];
        }
    }
    wgFp8RingInit<kST, kCW>(full, empty);
    if ((tid >> 5) >= 4 * kCW)
    {
        if constexpr (kCW == kWG_CONSUMERS)  // at kCW = 1 (two CTAs an SM, few accumulators) the launch's registers serve
        {
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWG_PRODUCER_REGS_R));
        }
        if (tid == 128 * kCW)
        {
            asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&wmap)) : "memory");
            if constexpr (!kPersist)
            {
                const uint32_t rowsB = static_cast<uint32_t>(min(kN, 8 * mg - m0));
                const uint32_t bytesB = rowsB * 128u;
                const uint32_t bytesS = (kSc & kSC_BLOCK_X) ? rowsB * 4u : 0u;  // a multiple of 32
                produceStages<kST>(SliceCursor(nkb, 1), nkb, full, empty, [&](int slot, int kb) {
                    uint8_t* st = smem + slot * L::kStage;
                    mbarExpectTx(&full[slot], bytesB + bytesS + static_cast<uint32_t>(L::kA));  // the box counts whole
                    bulkCopy(st + L::kA, Xw + (static_cast<size_t>(kb) * mg + (m0 >> 3)) * 1024, bytesB, &full[slot]);
                    if constexpr ((kSc & kSC_BLOCK_X) != 0)
                    {
                        bulkCopy(sxS + slot * kN, sxT + static_cast<size_t>(kb) * 8 * mg + m0, bytesS, &full[slot]);
                    }
                    tmaLoad2d(st, &wmap, kb * 128, n0, &full[slot]);
                });
                return;
            }
            // Persistent: produceStages' walk over every tile of this CTA, the ring's slot and phase
            // carried from tile to tile (the next tile's first stages fill under this one's last blocks).
            int slot = 0;
            uint32_t phase = 0;
            int filled = 0;
            for (int tile = tile0; tile < tiles; tile += tileStep)
            {
                wgRasterTileAt(tile, gx, gy, kN, m0, n0, 64 * kCW);
                produceFp8Tile<P, kN, kST, kSc, kCW>(&wmap, p, smem, full, empty, Xw, sxT, sxS, swS, mg, nkb, m0, n0,
                    n0, slot, phase, filled);
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
        if constexpr (!kPersist)
        {
            consumeWgmmaFp8<P, kN, kST, kHoist, kSc, kCW, kPipe, kPersist>(p, smemAddr(smem), sxS, swS, full, empty, Y,
                M, N, yDtype, nkb, m0, n0, slot, phase);
            return;
        }
        for (int tile = tile0; tile < tiles; tile += tileStep)
        {
            wgRasterTileAt(tile, gx, gy, kN, m0, n0, 64 * kCW);
            consumeWgmmaFp8<P, kN, kST, kHoist, kSc, kCW, kPipe, kPersist>(p, smemAddr(smem), sxS, swS, full, empty, Y,
                M, N, yDtype, nkb, m0, n0, slot, phase);
        }
    }
#else
    __trap();  // launched only where wgFp8Available() found sm_90a machine code
#endif
}

/* Token tile: a function of m, the weight's shape (n, k) and (wave) the device's SM count, never of the
 * bits (wgmma's bits do not depend on its N). wave (the default; METRALE_W8A8_MMA=wg-onetile without):
 * at m > 64, where the 128 tile takes at most two rounds of one-CTA-an-SM tiles, the tile of 64 where its
 * rounds cost less, a 64-token tile's CTA counted at f of a 128 one's: f = 0.45 at 32 blocks of K rising to
 * 0.58 at 64 and beyond (the CTA's fixed cost, its pipeline fill and epilogue, weighs less on a long K), as
 * fitted to the H200's times of both tiles (benchmarks/results/w8a8-variants-20261203-2026-c0940e9.md and
 * -2058-1723d97.md: 8B-up M = 128 (32 blocks) the 64 tile 30.7 us against 33.3, 32B-up M = 128 (40 blocks)
 * the 128 tile 58.5 against 61.4, 32B-down M = 256 (200 blocks) the 128 tile 98.3 against 114.3); past two
 * rounds 128 (where the persistent CTAs hide the fixed cost). Without wave: 128 once it fills the SMs,
 * else 64. */
inline int wgFp8TokenTile(int64_t m, int64_t n, int64_t k, bool wave = false)
{
    if (m <= 64)
    {
        return m <= 8 ? 8 : m <= 16 ? 16 : m <= 32 ? 32 : 64;
    }
    const int64_t ctas128 = ((n + kWG_ROWS - 1) / kWG_ROWS) * ((m + 127) / 128);
    if (wave)
    {
        const int64_t sms = wgSms();
        const int64_t ctas64 = ((n + kWG_ROWS - 1) / kWG_ROWS) * ((m + 63) / 64);
        const double nkb = static_cast<double>((k + 127) / 128);
        const double t = nkb <= 32.0 ? 0.0 : nkb >= 64.0 ? 1.0 : (nkb - 32.0) / 32.0;
        const double f = 0.45 + 0.13 * t;
        const double w128 = static_cast<double>((ctas128 + sms - 1) / sms);
        const double w64 = f * static_cast<double>((ctas64 + sms - 1) / sms);
        return w128 <= 2.0 && w64 < 0.95 * w128 ? 64 : 128;
    }
    return ctas128 >= 132 ? 128 : 64;
}

/* The weights [n, k] (e4m3 bytes, row-major, k a multiple of 16) as a TMA tensor map: boxes of
 * 128 k x kWG_ROWS rows, 128-byte swizzle, zero fill outside. The driver's encoder through the
 * runtime's entry point (no link against libcuda). */
inline cudaError_t wgFp8WeightMap(const uint8_t* w, int64_t n, int64_t k, CUtensorMap* map, int rows = kWG_ROWS)
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
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(n)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k)};
    const cuuint32_t box[2] = {128, static_cast<cuuint32_t>(rows)};
    const cuuint32_t elem[2] = {1, 1};
    const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(w), dims, strides, box, elem,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

template <class P, int kN, bool kHoist = false, int kSc = 0, int kCW = kWG_CONSUMERS, bool kPipe = false,
    bool kPersist = false>
inline cudaError_t launchProjWgmmaFp8N(const CUtensorMap& map, const typename P::Params& p, const uint8_t* Xw,
    const float* sxT, void* y, int m, int n, int k, int32_t yDtype, cudaStream_t stream)
{
    constexpr int kST = wgFp8Stages<kN, kSc, kCW>();
    using L = WgFp8Layout<kN, kST, kSc, kCW>;
    auto kern = projWgmmaFp8Kernel<P, kN, kST, kHoist, kSc, kCW, kPipe, kPersist>;
    const cudaError_t e = raiseSmemOnce<projWgmmaFp8Kernel<P, kN, kST, kHoist, kSc, kCW, kPipe, kPersist>>(L::kSmem);
    if (e != cudaSuccess)
    {
        return e;
    }
    constexpr int kRows = 64 * kCW;
    const int gx = (n + kRows - 1) / kRows;
    const int gy = (m + kN - 1) / kN;
    const dim3 grid = kPersist ? dim3(wgPersistentCtas(gx * gy), 1, 1) : dim3(gx, gy, 1);
    kern<<<grid, wgFp8Threads<kCW>(), L::kSmem, stream>>>(map, p, Xw, sxT, y, m, n, k, yDtype);
    return cudaGetLastError();
}

/* The weight map of the token tile's CTA (64 kCW rows a box) and that launch; pipe: kPipe where the
 * tile allows it (kN <= 32, the hoisted epilogue, not the FFMA probe; elsewhere ignored); persist:
 * kPersist where the tile allows it (kN >= 64, the hoisted epilogue, not the FFMA probe; elsewhere
 * ignored); pipeLarge: kPipe at kN >= 64 as well (the default; METRALE_W8A8_MMA=wg-pipe32 without). */
template <class P, int kN, bool kHoist = false, int kSc = 0>
inline cudaError_t launchProjWgmmaFp8Tile(const typename P::Params& p, const uint8_t* Xw, const float* sxT, void* y,
    int m, int n, int k, int32_t yDtype, cudaStream_t stream, bool rows64, bool pipe, bool persist = false,
    bool pipeLarge = false)
{
    const int consumers = wgFp8Consumers<kN>(rows64);
    CUtensorMap map;
    const cudaError_t e = wgFp8WeightMap(p.codes, n, k, &map, 64 * consumers);
    if (e != cudaSuccess)
    {
        return e;
    }
    auto launch = [&](auto pipeTag) {
        constexpr bool kPipe = decltype(pipeTag)::value;
        if constexpr (wgFp8Consumers<kN>(true) == 1)
        {
            if (consumers == 1)
            {
                return launchProjWgmmaFp8N<P, kN, kHoist, kSc, 1, kPipe>(map, p, Xw, sxT, y, m, n, k, yDtype, stream);
            }
        }
        return launchProjWgmmaFp8N<P, kN, kHoist, kSc, kWG_CONSUMERS, kPipe>(map, p, Xw, sxT, y, m, n, k, yDtype,
            stream);
    };
    if constexpr (kN <= 32 && kHoist && (kSc & kSC_FMA_PROBE) == 0)
    {
        if (pipe)
        {
            return launch(std::true_type{});
        }
    }
    if constexpr (kN >= 64 && kHoist && (kSc & kSC_FMA_PROBE) == 0)
    {
        const int64_t tiles = static_cast<int64_t>((n + 64 * kWG_CONSUMERS - 1) / (64 * kWG_CONSUMERS)) * ((m + kN - 1) / kN);
        // The paired blocks at the 128 tile of block128 weights x row activations spilled (ptxas: 132 bytes,
        // persistent): not served there.
        constexpr bool kPipeLarge = !(kN == 128 && kSc == kSC_BLOCK_W);
        if (persist && tiles > wgSms())  // one tile a CTA where the tiles fit the SMs (measured: 1.01 -> 1.04 at M = 64)
        {
            if constexpr (kPipeLarge)
            {
                if (pipeLarge)
                {
                    return launchProjWgmmaFp8N<P, kN, kHoist, kSc, kWG_CONSUMERS, true, true>(map, p, Xw, sxT, y, m, n,
                        k, yDtype, stream);
                }
            }
            return launchProjWgmmaFp8N<P, kN, kHoist, kSc, kWG_CONSUMERS, false, true>(map, p, Xw, sxT, y, m, n, k,
                yDtype, stream);
        }
        if constexpr (kPipeLarge)
        {
            if (pipeLarge)
            {
                return launch(std::true_type{});
            }
        }
    }
    return launch(std::false_type{});
}

/* The FP8 kernel at the token tile of m rows (wgFp8TokenTile): launchProjWgmmaFp8Tile<P, tile, ...>. */
template <class P, bool kHoist, int kSc>
inline cudaError_t launchProjWgmmaFp8AtTile(const typename P::Params& p, const uint8_t* Xw, const float* sxT, void* y,
    int m, int n, int k, int32_t yDtype, cudaStream_t stream, bool rows64, bool pipe, bool persist = false,
    bool wave = false, bool pipeLarge = false)
{
    switch (wgFp8TokenTile(m, n, k, wave))
    {
    case 8: return launchProjWgmmaFp8Tile<P, 8, kHoist, kSc>(p, Xw, sxT, y, m, n, k, yDtype, stream, rows64, pipe);
    case 16: return launchProjWgmmaFp8Tile<P, 16, kHoist, kSc>(p, Xw, sxT, y, m, n, k, yDtype, stream, rows64, pipe);
    case 32: return launchProjWgmmaFp8Tile<P, 32, kHoist, kSc>(p, Xw, sxT, y, m, n, k, yDtype, stream, rows64, pipe);
    case 64:
        return launchProjWgmmaFp8Tile<P, 64, kHoist, kSc>(p, Xw, sxT, y, m, n, k, yDtype, stream, rows64, pipe, persist,
            pipeLarge);
    default:
        return launchProjWgmmaFp8Tile<P, 128, kHoist, kSc>(p, Xw, sxT, y, m, n, k, yDtype, stream, rows64, pipe,
            persist, pipeLarge);
    }
}

/* The FP8 wgmma variant on the operand Xw (wgFp8OperandOffset layout) and the weights p.codes;
 * hoist: wgFp8Epilogue (the scales read before the first store) instead of wgEpilogue, the same bits;
 * rows64: CTAs of 64 weight rows at token tiles of 8 and 16 (wgFp8Consumers), the same bits;
 * pipe: the paired blocks (consumeWgmmaFp8's kPipe) where the tile allows it, the same bits. */
template <class P>
inline cudaError_t launchProjWgmmaFp8(const typename P::Params& p, const uint8_t* Xw, void* y, int m, int n, int k,
    int32_t yDtype, cudaStream_t stream, bool hoist = false, bool rows64 = true, bool pipe = false, bool persist = false,
    bool wave = false, bool pipeLarge = false)
{
    return hoist
        ? launchProjWgmmaFp8AtTile<P, true, 0>(p, Xw, nullptr, y, m, n, k, yDtype, stream, rows64, pipe, persist, wave,
              pipeLarge)
        : launchProjWgmmaFp8AtTile<P, false, 0>(p, Xw, nullptr, y, m, n, k, yDtype, stream, rows64, pipe);
}

/* The block-scaled FP8 variant (block128 weights and/or row_block128 activations, p.blockScales /
 * p.nbx > 1; not both absent: that is launchProjWgmmaFp8) on the operand Xw, the block-major token
 * scales sxT (row_block128) or p.sx (row / tensor), the weights p.codes. Block128 weights need
 * ceil(K / 128) <= kFP8_SW_MAX (the launcher checks: wgFp8BlocksServe). */
template <class P>
inline cudaError_t launchProjWgmmaFp8Blocks(const typename P::Params& p, const uint8_t* Xw, const float* sxT, void* y,
    int m, int n, int k, int32_t yDtype, cudaStream_t stream, bool fmaProbe = false, bool rows64 = true,
    bool pipe = false, bool persist = false, bool wave = false, bool pipeLarge = false)
{
    const int sc = (p.blockScales ? kSC_BLOCK_W : 0) | (p.nbx > 1 ? kSC_BLOCK_X : 0);
    switch (sc)
    {
    case kSC_BLOCK_W:
        return launchProjWgmmaFp8AtTile<P, true, kSC_BLOCK_W>(p, Xw, nullptr, y, m, n, k, yDtype, stream, rows64, pipe,
            persist, wave, pipeLarge);
    case kSC_BLOCK_X:
        return launchProjWgmmaFp8AtTile<P, true, kSC_BLOCK_X>(p, Xw, sxT, y, m, n, k, yDtype, stream, rows64, pipe,
            persist, wave, pipeLarge);
    case kSC_BLOCK_W | kSC_BLOCK_X:
        if (fmaProbe)
        {
            return launchProjWgmmaFp8AtTile<P, true, kSC_BLOCK_W | kSC_BLOCK_X | kSC_FMA_PROBE>(p, Xw, sxT, y, m, n, k,
                yDtype, stream, rows64, false);
        }
        return launchProjWgmmaFp8AtTile<P, true, kSC_BLOCK_W | kSC_BLOCK_X>(p, Xw, sxT, y, m, n, k, yDtype, stream,
            rows64, pipe, persist, wave, pipeLarge);
    default: return cudaErrorInvalidValue;
    }
}

/* Whether the block-scaled FP8 variant serves a weight of k columns (a function of the shape). */
inline bool wgFp8BlocksServe(bool blockWeights, int64_t k)
{
    return !blockWeights || (k + 127) / 128 <= kFP8_SW_MAX;
}

/* Whether this device runs the FP8 wgmma variant (its sm_90a machine code loaded). */
template <class P>
inline bool wgFp8Available()
{
    return sm90aKernelLoaded<projWgmmaFp8Kernel<P, 8, wgFp8Stages<8>()>>();
}

/* The fused pre-pass (wgFp8QuantKernel): the operand and sx straight from x (inputScale: the static
 * scale, or null for per-row amax scales). */
inline cudaError_t wgFp8Quant(const void* x, int32_t dtype, const float* inputScale, int64_t m, int64_t k, void* dst,
    float* sx, cudaStream_t stream)
{
    const int mg = static_cast<int>((m + 7) / 8);
    const dim3 grid(static_cast<unsigned>(8 * mg), actRowChunks(m, k));  // the chunks of the m real rows
    wgFp8QuantKernel<<<grid, kACT_THREADS, 0, stream>>>(x, dtype, inputScale, static_cast<uint8_t*>(dst), sx,
        static_cast<int>(m), static_cast<int>(k), mg);
    return cudaGetLastError();
}

/* The row_block128 pre-pass fused with the operand layout (wgFp8QuantBlockKernel): the operand and
 * the block-major token scales sxT straight from x. */
inline cudaError_t wgFp8QuantBlock(const void* x, int32_t dtype, int64_t m, int64_t k, void* dst, float* sxT,
    cudaStream_t stream)
{
    const int mg = static_cast<int>((m + 7) / 8);
    const dim3 grid(static_cast<unsigned>(8 * mg), actRowChunks(m, k));  // the chunks of the m real rows
    wgFp8QuantBlockKernel<<<grid, kACT_THREADS, 0, stream>>>(x, dtype, static_cast<uint8_t*>(dst), sxT,
        static_cast<int>(m), static_cast<int>(k), mg);
    return cudaGetLastError();
}

/* sxT (block-major [nkb, 8 mg]) from the split pre-pass's row-major sx [m, nkb]. */
inline cudaError_t wgFp8BlockScales(const float* sx, int64_t m, int64_t k, float* sxT, cudaStream_t stream)
{
    const int mg = static_cast<int>((m + 7) / 8);
    const int nkb = static_cast<int>((k + 127) / 128);
    const int total = nkb * 8 * mg;
    wgFp8BlockScaleKernel<<<(total + 255) / 256, 256, 0, stream>>>(sx, sxT, static_cast<int>(m), nkb, mg);
    return cudaGetLastError();
}

/* The operand of the variant in the workspace, from the fp8 pre-pass's xq (exact f16, [m, k]). */
inline cudaError_t wgFp8Operand(const __half* xq, int64_t m, int64_t k, void* dst, cudaStream_t stream)
{
    const int mg = static_cast<int>((m + 7) / 8);
    const int nkb = static_cast<int>((k + 127) / 128);
    wgFp8OperandKernel<<<mg * nkb, 64, 0, stream>>>(reinterpret_cast<const uint16_t*>(xq), static_cast<uint8_t*>(dst),
        static_cast<int>(m), static_cast<int>(k), mg);
    return cudaGetLastError();
}

} // namespace metrale

#endif // METRALE_PROJ_WGMMA_FP8_CUH
