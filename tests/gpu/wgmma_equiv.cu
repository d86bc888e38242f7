// Instruction equivalence behind the wgmma tier (tests/gpu/test_wgmma_equiv.py), adapted from the
// team's measurement tool mma_equiv.cu: does the kernels' wgmma path give the same float32 bits as
// their mma.sync path?
//
// One warpgroup computes D[64 x N] = C + A[64 x 128] * B[N x 128]^T twice, in the contract's 8 steps
// of one 128-k block (quad lane t feeds k = 32 t + 4 s + j to instruction positions 2t, 2t+1, 2t+8,
// 2t+9), from the same A fragments: once with the library's own WgmmaRS (wgmma m64nNk16, A from
// registers) on B laid out in shared memory by the library's wgOperandOffset and read through its
// wgDescB, once with its mma16816 (mma.sync m16n8k16) on B fragments read in natural k order. Random
// C, bf16 and f16, N in {64, 128}, exponents spread up to 2^+-30 (bf16) / 2^+-6 (f16). Also checks both
// against float64. Exit code 0 and "RESULT: bit-identical" when every element agrees.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "projGemm.cuh"
#include "projWgmma.cuh"

using namespace metrale;

template <bool kF16, int kN>
__global__ void __launch_bounds__(128) both(const uint16_t* A, const uint16_t* B, const float* C, float* Dw, float* Dm)
{
    __shared__ __align__(1024) uint8_t sB[kN * 256];
    const int tid = threadIdx.x;
    for (int i = tid; i < kN * 128; i += 128)
    {
        const int n = i / 128;
        const int k = i % 128;
        *reinterpret_cast<uint16_t*>(sB + wgOperandOffset(n, k, kN / 8)) = B[i];
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int g = lane / 4;
    const int t = lane % 4;
    const int r0 = 16 * warp + g;
    const int r1 = r0 + 8;
    auto pk = [](uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16); };
    uint32_t a[8][4];
    for (int s = 0; s < 8; ++s)
    {
        const int k = 32 * t + 4 * s;
        a[s][0] = pk(A[r0 * 128 + k], A[r0 * 128 + k + 1]);
        a[s][1] = pk(A[r1 * 128 + k], A[r1 * 128 + k + 1]);
        a[s][2] = pk(A[r0 * 128 + k + 2], A[r0 * 128 + k + 3]);
        a[s][3] = pk(A[r1 * 128 + k + 2], A[r1 * 128 + k + 3]);
    }
#ifdef METRALE_SM90A
    float d[kN / 2];
    for (int j = 0; j < kN / 8; ++j)
        for (int hr = 0; hr < 2; ++hr)
            for (int e = 0; e < 2; ++e)
                d[4 * j + 2 * hr + e] = C[(r0 + 8 * hr) * kN + 8 * j + 2 * t + e];
    const uint32_t base = smemAddr(sB);
#pragma unroll
    for (int s = 0; s < 8; ++s)
    {
        wgFence();
        WgmmaRS<kF16, kN>::run(d, a[s], wgDescB(base + 256 * s));
        wgCommit();
        wgWait<0>();
    }
    for (int j = 0; j < kN / 8; ++j)
        for (int hr = 0; hr < 2; ++hr)
            for (int e = 0; e < 2; ++e)
                Dw[(r0 + 8 * hr) * kN + 8 * j + 2 * t + e] = d[4 * j + 2 * hr + e];
#endif
    for (int j = 0; j < kN / 8; ++j)
    {
        float c[4];
        for (int hr = 0; hr < 2; ++hr)
            for (int e = 0; e < 2; ++e)
                c[2 * hr + e] = C[(r0 + 8 * hr) * kN + 8 * j + 2 * t + e];
        const uint16_t* Bn = B + (8 * j + g) * 128;
        for (int s = 0; s < 8; ++s)
        {
            const int k = 32 * t + 4 * s;
            mma16816<kF16>(c, a[s][0], a[s][1], a[s][2], a[s][3], pk(Bn[k], Bn[k + 1]), pk(Bn[k + 2], Bn[k + 3]));
        }
        for (int hr = 0; hr < 2; ++hr)
            for (int e = 0; e < 2; ++e)
                Dm[(r0 + 8 * hr) * kN + 8 * j + 2 * t + e] = c[2 * hr + e];
    }
}

static uint64_t gState = 0x9E3779B97F4A7C15ull;
static double rnd()
{
    gState = gState * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(gState >> 11) * (1.0 / 9007199254740992.0);
}
static float value(int spread)
{
    const int e = static_cast<int>(rnd() * (2 * spread + 1)) - spread;
    return static_cast<float>((rnd() < 0.5 ? -1.0 : 1.0) * std::ldexp(1.0 + rnd(), e));
}
static float decode(uint16_t h, bool f16)
{
    if (f16)
    {
        __half_raw r;
        r.x = h;
        return __half2float(__half(r));
    }
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
static uint16_t encode(float v, bool f16)
{
    if (f16)
    {
        return static_cast<__half_raw>(__float2half_rn(v)).x;
    }
    return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(v)).x;
}

template <bool kF16, int kN>
static long run(int trials, int spread, long& total)
{
    uint16_t *A, *B;
    float *C, *Dw, *Dm;
    cudaMallocManaged(&A, 64 * 128 * 2);
    cudaMallocManaged(&B, kN * 128 * 2);
    cudaMallocManaged(&C, 64 * kN * 4);
    cudaMallocManaged(&Dw, 64 * kN * 4);
    cudaMallocManaged(&Dm, 64 * kN * 4);
    long diff = 0;
    double errW = 0, errM = 0;
    for (int tr = 0; tr < trials; ++tr)
    {
        for (int i = 0; i < 64 * 128; ++i)
            A[i] = encode(value(spread), kF16);
        for (int i = 0; i < kN * 128; ++i)
            B[i] = encode(value(spread), kF16);
        for (int i = 0; i < 64 * kN; ++i)
            C[i] = value(spread);
        both<kF16, kN><<<1, 128>>>(A, B, C, Dw, Dm);
        if (cudaDeviceSynchronize() != cudaSuccess)
        {
            std::printf("launch failed: %s\n", cudaGetErrorString(cudaGetLastError()));
            std::exit(2);
        }
        for (int i = 0; i < 64 * kN; ++i)
        {
            const int r = i / kN, n = i % kN;
            double ref = C[i], mag = std::fabs(C[i]);
            for (int k = 0; k < 128; ++k)
            {
                const double pr = static_cast<double>(decode(A[r * 128 + k], kF16)) * decode(B[n * 128 + k], kF16);
                ref += pr;
                mag += std::fabs(pr);
            }
            errW = std::fmax(errW, std::fabs(Dw[i] - ref) / mag);
            errM = std::fmax(errM, std::fabs(Dm[i] - ref) / mag);
            uint32_t bw, bm;
            std::memcpy(&bw, &Dw[i], 4);
            std::memcpy(&bm, &Dm[i], 4);
            diff += bw != bm;
            ++total;
        }
    }
    std::printf("%s N=%3d spread 2^+-%-2d: %ld of %ld elements differ in bits; |err| / sum|terms| vs float64: "
                "wgmma %.2e, mma.sync %.2e\n",
        kF16 ? "f16 " : "bf16", kN, spread, diff, static_cast<long>(trials) * 64 * kN, errW, errM);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    cudaFree(Dw);
    cudaFree(Dm);
    // Both paths must also be right (a layout error would make the wgmma path wrong, not just different).
    return diff + (errW > 1e-5 || errM > 1e-5 ? 1 : 0);
}

int main()
{
    long bad = 0, total = 0;
    for (int spread : {0, 4, 30})
    {
        bad += run<false, 64>(20, spread, total);
        bad += run<false, 128>(20, spread, total);
    }
    for (int spread : {0, 3, 6})
    {
        bad += run<true, 64>(20, spread, total);
        bad += run<true, 128>(20, spread, total);
    }
    std::printf(bad ? "RESULT: DIFFER (%ld of %ld)\n" : "RESULT: bit-identical (%ld of %ld differ)\n", bad, total);
    return bad ? 1 : 0;
}
