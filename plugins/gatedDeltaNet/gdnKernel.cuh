/*
 * Gated DeltaNet (docs/ops.md, "Gated DeltaNet"): CausalConv1d (depthwise causal conv + SiLU with
 * its state) and GatedDeltaRule (the l2-normalized, gated delta rule with its float32 state), both in
 * the recurrent form: each sequence's tokens one at a time, in order.
 *
 * Invariants (the batch- and chunking-invariance argument):
 * - A thread (conv: one channel of one sequence) or a warp (rule: 32 value columns of one value head
 *   of one sequence) owns its sequence's state and reads nothing of another sequence, so a
 *   sequence's bits do not depend on the batch.
 * - Tokens are processed in order and the state out is exactly what the next token would read (the
 *   conv's last K - 1 inputs as stored, the rule's float32 state), so splitting a sequence into calls
 *   changes nothing.
 * - Every float operation is one correctly rounded IEEE operation (__fmul_rn, __fadd_rn, __fsub_rn,
 *   __fdiv_rn, __fsqrt_rn: no contraction into an FMA), sums ascending from +0; exp and log1p are
 *   evaluated in double and rounded once to float, as the CPU reference (ops/gdn.py) does.
 */
#ifndef METRALE_GDN_KERNEL_CUH
#define METRALE_GDN_KERNEL_CUH

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "metrale/contract.h"
#include "metrale/kernels.h"
#include "metraleNumerics.cuh"

namespace metrale
{

constexpr int kGDN_CONV_THREADS = 128;                         // channels a CTA of the conv
constexpr int kGDN_V_BLOCK = contract::kGDN_HEAD_V_BLOCK;      // dv a multiple of it
constexpr int kGDN_STATE_PART = contract::kGDN_STATE_PART;    // state elements a lane (the sum's part)
constexpr int kGDN_MAX_CONV_KERNEL = contract::kGDN_MAX_CONV_KERNEL;
constexpr float kGDN_L2NORM_EPS = contract::kGDN_L2NORM_EPS;
constexpr float kGDN_SOFTPLUS_THRESHOLD = contract::kGDN_SOFTPLUS_THRESHOLD;

/* float(exp(double(v))): one rounding of the double result (the reference's _exp). */
__device__ __forceinline__ float gdnExp(float v)
{
    return static_cast<float>(exp(static_cast<double>(v)));
}

/* a / (1 + exp(-a)) in float. */
__device__ __forceinline__ float gdnSilu(float a)
{
    return __fdiv_rn(a, __fadd_rn(1.0f, gdnExp(-a)));
}

/* y[b, t, c] = silu(sum_j w[c, j] * u[t + j, c]) over u = cat(conv_state[b, c, :], x[b, :, c]); one
 * thread a (b, c), the window of the last K - 1 inputs in registers as stored (T). */
template <typename T, int K>
__global__ void __launch_bounds__(kGDN_CONV_THREADS) causalConv1dKernel(const T* __restrict__ x,
    const T* __restrict__ weight, const T* __restrict__ state, T* __restrict__ y, T* __restrict__ stateOut,
    int64_t seq, int64_t channels)
{
    const int64_t c = static_cast<int64_t>(blockIdx.x) * kGDN_CONV_THREADS + threadIdx.x;
    const int64_t b = blockIdx.y;
    if (c >= channels)
    {
        return;
    }
    float w[K];
#pragma unroll
    for (int j = 0; j < K; ++j)
    {
        w[j] = elementLoad(weight, c * K + j);
    }
    T win[K];  // win[0 .. K-2]: the last K - 1 inputs, oldest first; win[K-1]: this token's
    const T* st = state + (b * channels + c) * (K - 1);
#pragma unroll
    for (int j = 0; j < K - 1; ++j)
    {
        win[j] = st[j];
    }
    const T* xs = x + b * seq * channels + c;
    T* ys = y + b * seq * channels + c;
    T next = seq > 0 ? xs[0] : T{};
    for (int64_t t = 0; t < seq; ++t)
    {
        win[K - 1] = next;
        if (t + 1 < seq)
        {
            next = xs[(t + 1) * channels];  // the next token's input, loaded ahead
        }
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < K; ++j)
        {
            acc = __fadd_rn(acc, __fmul_rn(w[j], elementToFloat(win[j])));
        }
        ys[t * channels] = elementStore<T>(gdnSilu(acc));
#pragma unroll
        for (int j = 0; j < K - 1; ++j)
        {
            win[j] = win[j + 1];
        }
    }
    T* so = stateOut + (b * channels + c) * (K - 1);
#pragma unroll
    for (int j = 0; j < K - 1; ++j)
    {
        so[j] = win[j];
    }
}

/* beta and gamma of one (token, value head): beta = 1 / (1 + exp(-b)); gamma = exp(-(exp(A_log) *
 * softplus(a + dt_bias))), softplus(u) = u above the threshold, else float(log1p(exp(double u))). */
__device__ __forceinline__ void gdnGates(float bIn, float aIn, float aLog, float dtBias, float& beta, float& gamma)
{
    beta = __fdiv_rn(1.0f, __fadd_rn(1.0f, gdnExp(-bIn)));
    const float u = __fadd_rn(aIn, dtBias);
    const float sp = u > kGDN_SOFTPLUS_THRESHOLD ? u : static_cast<float>(log1p(exp(static_cast<double>(u))));
    gamma = gdnExp(-__fmul_rn(gdnExp(aLog), sp));
}

/* sum_i v[i]^2 ascending from +0 over the warp's shared copy, then (v[i] * r) [/ div] in place for
 * this lane's elements; every lane computes the same r. */
template <int DK>
__device__ __forceinline__ void gdnL2Normalize(float* v, int lane, bool divide, float div)
{
    float ss = 0.0f;
#pragma unroll 8
    for (int i = 0; i < DK; ++i)
    {
        ss = __fadd_rn(ss, __fmul_rn(v[i], v[i]));
    }
    const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(ss, kGDN_L2NORM_EPS)));
    __syncwarp();
#pragma unroll
    for (int e = 0; e < DK / 32; ++e)
    {
        const float n = __fmul_rn(v[lane + 32 * e], r);
        v[lane + 32 * e] = divide ? __fdiv_rn(n, div) : n;
    }
}

/* One warp a (column block, value head, sequence). The dk state elements of a value column are
 * split into parts of kGDN_STATE_PART consecutive i, one lane a part (the lane pairs l, l + 16 for
 * dk = 128): lane holds s[i] of its part in registers, sums its part ascending from +0, and the
 * parts' sums are added in ascending part order (the contract's order, ops/gdn.py). q and k of the
 * token go through shared memory, normalized. */
template <typename T, int DK>
__global__ void __launch_bounds__(32) gatedDeltaRuleKernel(const T* __restrict__ x, const T* __restrict__ ba,
    const T* __restrict__ aLogIn, const T* __restrict__ dtBiasIn, const float* __restrict__ state, T* __restrict__ y,
    float* __restrict__ stateOut, int64_t seq, int kHeads, int vHeads, int dv, float sqrtDk)
{
    constexpr int kPARTS = DK / kGDN_STATE_PART;  // 1 or 2
    constexpr int kCOLS = 32 / kPARTS;            // value columns a warp
    constexpr int kP = kGDN_STATE_PART;
    static_assert(kPARTS == 1 || kPARTS == 2, "dk is 64 or 128");
    __shared__ float sq[DK];
    __shared__ float sk[DK];
    __shared__ float sBeta[32];   // the gates of the next 32 tokens, lane l's token t0 + l
    __shared__ float sGamma[32];
    const int lane = threadIdx.x;
    const int part = lane / kCOLS;
    const int j = blockIdx.x * kCOLS + lane % kCOLS;
    const int i0 = part * kP;
    const int h = blockIdx.y;
    const int64_t b = blockIdx.z;
    const int hk = h / (vHeads / kHeads);
    const int64_t width = 2LL * kHeads * DK + static_cast<int64_t>(vHeads) * dv;
    const float aLog = elementLoad(aLogIn, h);
    const float dtBias = elementLoad(dtBiasIn, h);

    float s[kP];
    const int64_t sBase = ((b * vHeads + h) * DK + i0) * dv + j;
    {
        const float* p = state + sBase;
#pragma unroll
        for (int i = 0; i < kP; ++i)
        {
            s[i] = *p;
            p += dv;
        }
    }
    const T* xb = x + b * seq * width;
    const T* bab = ba + b * seq * 2 * vHeads;
    T* yb = y + (b * seq * vHeads + h) * dv + j;
    for (int64_t t = 0; t < seq; ++t)
    {
        const T* xt = xb + t * width;
        __syncwarp();  // the previous token's reads of sq, sk are done
#pragma unroll
        for (int e = 0; e < DK / 32; ++e)
        {
            sq[lane + 32 * e] = elementLoad(xt, static_cast<int64_t>(hk) * DK + lane + 32 * e);
            sk[lane + 32 * e] = elementLoad(xt, static_cast<int64_t>(kHeads + hk) * DK + lane + 32 * e);
        }
        const float v = elementLoad(xt, 2LL * kHeads * DK + static_cast<int64_t>(h) * dv + j);
        if ((t & 31) == 0)
        {
            // Lane l the gates of token t + l (whole tokens a lane: the same bits as one at a time),
            // so the double-precision code runs once every 32 tokens.
            float beta = 0.0f;
            float gamma = 0.0f;
            const int64_t tl = t + lane;
            if (tl < seq)
            {
                gdnGates(elementLoad(bab, tl * 2 * vHeads + h), elementLoad(bab, tl * 2 * vHeads + vHeads + h), aLog, dtBias,
                    beta, gamma);
            }
            sBeta[lane] = beta;
            sGamma[lane] = gamma;
        }
        __syncwarp();
        const float beta = sBeta[t & 31];
        const float gamma = sGamma[t & 31];
        gdnL2Normalize<DK>(sq, lane, true, sqrtDk);
        gdnL2Normalize<DK>(sk, lane, false, 1.0f);
        __syncwarp();
        float kv = 0.0f;
#pragma unroll
        for (int i = 0; i < kP; ++i)
        {
            s[i] = __fmul_rn(s[i], gamma);
            kv = __fadd_rn(kv, __fmul_rn(s[i], sk[i0 + i]));
        }
        if (kPARTS == 2)
        {
            const float other = __shfl_xor_sync(0xffffffffu, kv, kCOLS);
            kv = part == 0 ? __fadd_rn(kv, other) : __fadd_rn(other, kv);  // part 0's sum + part 1's
        }
        const float delta = __fmul_rn(__fsub_rn(v, kv), beta);
        float o = 0.0f;
#pragma unroll
        for (int i = 0; i < kP; ++i)
        {
            s[i] = __fadd_rn(s[i], __fmul_rn(sk[i0 + i], delta));
            o = __fadd_rn(o, __fmul_rn(s[i], sq[i0 + i]));
        }
        if (kPARTS == 2)
        {
            const float other = __shfl_xor_sync(0xffffffffu, o, kCOLS);
            o = part == 0 ? __fadd_rn(o, other) : __fadd_rn(other, o);
        }
        if (part == 0)
        {
            yb[t * vHeads * dv] = elementStore<T>(o);
        }
    }
    float* p = stateOut + sBase;
#pragma unroll
    for (int i = 0; i < kP; ++i)
    {
        *p = s[i];
        p += dv;
    }
}

} // namespace metrale

#endif // METRALE_GDN_KERNEL_CUH
