// A small driver of the kernel launchers for compute-sanitizer (tests/gpu/test_memcheck.py).
//
// Every buffer is a cudaMalloc of exactly the size docs/ops.md gives, so memcheck sees any read or
// write past a tensor. Covers every op, activation format and scale granularity, the four kernel
// tiers (m = 1, 9, 17, 300; on sm_90 17 and 300 run the wgmma tier, its slice split where k has
// several blocks), odd n and k with a partial last block. Exit code 0: all launches
// returned cudaSuccess (the sanitizer's own report says whether memory was clean).
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "metrale/kernels.h"

#define CHECK(call)                                                                                 \
    do                                                                                              \
    {                                                                                               \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != cudaSuccess)                                                                      \
        {                                                                                           \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            std::exit(1);                                                                           \
        }                                                                                           \
    } while (0)

static unsigned gSeed = 12345u;
static unsigned nextRand()
{
    gSeed = gSeed * 1664525u + 1013904223u;
    return gSeed >> 8;
}

template <class T>
static T* upload(const std::vector<T>& h)
{
    T* d = nullptr;
    CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
    CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

static std::vector<float> floats(size_t n, float lo, float hi)
{
    std::vector<float> v(n);
    for (auto& f : v) f = lo + (hi - lo) * (nextRand() % 10000) / 10000.0f;
    return v;
}

static std::vector<int8_t> bytes(size_t n, int mask)
{
    std::vector<int8_t> v(n);
    for (auto& b : v) b = static_cast<int8_t>(nextRand() & mask);
    return v;
}

/* e4m3 bit patterns of positive normal values (no NaN). */
static std::vector<int8_t> e4m3Bytes(size_t n)
{
    std::vector<int8_t> v(n);
    for (auto& b : v) b = static_cast<int8_t>(0x20 + nextRand() % 0x40);
    return v;
}

int main()
{
    const int64_t ms[] = {1, 9, 17, 300};
    int launches = 0;
    for (int64_t m : ms)
    {
        for (int xdt = 0; xdt <= 2; xdt += 2)  // float32, bfloat16
        {
            const size_t xsz = xdt == 0 ? 4 : 2;
            // ---- W4A16: n = 67, k = 96 (partial block), group 32 with zero points; group 128 k=384; at
            // m = 300 n = 8200 (a partial last weight tile; 195 tiles of 128 tokens, so that a persistent
            // CTA, the default there, walks two)
            for (int gsel = 0; gsel < 2; ++gsel)
            {
                const int64_t n = m == 300 ? 8200 : 67, k = gsel ? 384 : 96, gs = gsel ? 128 : 32;
                std::vector<float> xh = floats(m * k, -2, 2);
                void* x = nullptr;
                CHECK(cudaMalloc(&x, m * k * xsz));
                CHECK(cudaMemset(x, 0x3c, m * k * xsz));
                int8_t* w = upload(bytes(n * k / 2, 0xFF));
                float* s = upload(floats(n * (k / gs), 0.01f, 0.1f));
                int8_t* zp = gsel ? nullptr : upload(bytes(n * (k / gs), 0x0F));
                float* bias = gsel ? upload(floats(n, -1, 1)) : nullptr;
                void* y = nullptr;
                CHECK(cudaMalloc(&y, m * n * xsz));
                size_t wsb = metrale_w4a16_workspace_size(m, n, k, gs);
                void* ws = nullptr;
                if (wsb) CHECK(cudaMalloc(&ws, wsb));
                CHECK(metrale_w4a16_proj(x, xdt, w, s, zp, bias, y, m, n, k, gs, ws, wsb, 0));
                CHECK(cudaDeviceSynchronize());
                ++launches;
                cudaFree(x); cudaFree(w); cudaFree(s); cudaFree(zp); cudaFree(bias); cudaFree(y); cudaFree(ws);
            }
            // ---- W8A8: n = 67, k = 208 (16 * 13): every format x granularity; at m = 300 n = 8200 (a
            // partial last weight tile; 195 tiles of the FP8 kernel, so that a persistent CTA walks two)
            for (int combo = 0; combo < 6; ++combo)
            {
                const int64_t n = m == 300 ? 8200 : 67, k = 208;
                const int act = combo < 2 ? kMETRALE_ACT_BF16 : kMETRALE_ACT_FP8;
                const int wsg = combo % 2;
                const int asg = combo < 4 ? kMETRALE_ASCALE_ROW : kMETRALE_ASCALE_ROW_BLOCK128;
                void* x = nullptr;
                CHECK(cudaMalloc(&x, m * k * xsz));
                CHECK(cudaMemset(x, 0x3c, m * k * xsz));
                int8_t* w = upload(e4m3Bytes(n * k));
                const int64_t ns = wsg ? ((n + 127) / 128) * ((k + 127) / 128) : n;
                float* s = upload(floats(ns, 0.01f, 0.1f));
                float* bias = combo % 3 == 0 ? upload(floats(n, -1, 1)) : nullptr;
                void* y = nullptr;
                CHECK(cudaMalloc(&y, m * n * xsz));
                size_t wsb = metrale_w8a8_workspace_size(m, n, k, act, asg);
                void* ws = nullptr;
                if (wsb) CHECK(cudaMalloc(&ws, wsb));
                CHECK(metrale_w8a8_proj(x, xdt, w, s, wsg, act, asg, nullptr, bias, y, m, n, k, ws, wsb, 0));
                CHECK(cudaDeviceSynchronize());
                ++launches;
                cudaFree(x); cudaFree(w); cudaFree(s); cudaFree(bias); cudaFree(y); cudaFree(ws);
            }
            // ---- W4A4: n = 67, k = 96 (k/16 = 6: scale rows not word aligned); at m = 300 n = 8200 (a
            // partial last weight tile)
            for (int combo = 0; combo < 3; ++combo)
            {
                const int64_t n = m == 300 ? 8200 : 67, k = 96;
                const int act = combo == 2 ? kMETRALE_ACT_BF16 : kMETRALE_ACT_NVFP4;
                void* x = nullptr;
                CHECK(cudaMalloc(&x, m * k * xsz));
                CHECK(cudaMemset(x, 0x3c, m * k * xsz));
                int8_t* w = upload(bytes(n * k / 2, 0xFF));
                int8_t* s = upload(e4m3Bytes(n * k / 16));
                float* gw = upload(floats(1, 0.001f, 0.002f));
                float* si = combo == 1 ? upload(floats(1, 0.001f, 0.002f)) : nullptr;
                float* bias = combo == 0 ? upload(floats(n, -1, 1)) : nullptr;
                void* y = nullptr;
                CHECK(cudaMalloc(&y, m * n * xsz));
                size_t wsb = metrale_w4a4_workspace_size(m, n, k, act);
                void* ws = nullptr;
                if (wsb) CHECK(cudaMalloc(&ws, wsb));
                CHECK(metrale_w4a4_proj(x, xdt, w, s, gw, si, act, bias, y, m, n, k, ws, wsb, 0));
                CHECK(cudaDeviceSynchronize());
                ++launches;
                cudaFree(x); cudaFree(w); cudaFree(s); cudaFree(gw); cudaFree(si); cudaFree(bias); cudaFree(y);
                cudaFree(ws);
            }
        }
    }
    std::printf("memcheck driver: %d launches returned cudaSuccess\n", launches);
    return 0;
}
