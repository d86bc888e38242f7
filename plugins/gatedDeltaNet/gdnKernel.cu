/*
 * metrale_causal_conv1d and metrale_gated_delta_rule: the C launchers of the Gated DeltaNet ops
 * (plugins/include/metrale/kernels.h). No workspace.
 */
#include "gdnKernel.cuh"

#include <cmath>

using namespace metrale;

namespace
{

template <typename T, int K>
cudaError_t launchConvK(const void* x, const void* w, const void* st, void* y, void* so, int64_t batch, int64_t seq,
    int64_t channels, cudaStream_t stream)
{
    const dim3 grid(static_cast<unsigned>((channels + kGDN_CONV_THREADS - 1) / kGDN_CONV_THREADS),
        static_cast<unsigned>(batch));
    causalConv1dKernel<T, K><<<grid, kGDN_CONV_THREADS, 0, stream>>>(static_cast<const T*>(x),
        static_cast<const T*>(w), static_cast<const T*>(st), static_cast<T*>(y), static_cast<T*>(so), seq, channels);
    return cudaGetLastError();
}

template <typename T>
cudaError_t launchConv(const void* x, const void* w, const void* st, void* y, void* so, int64_t batch, int64_t seq,
    int64_t channels, int kernel, cudaStream_t stream)
{
    switch (kernel)
    {
    case 2: return launchConvK<T, 2>(x, w, st, y, so, batch, seq, channels, stream);
    case 3: return launchConvK<T, 3>(x, w, st, y, so, batch, seq, channels, stream);
    case 4: return launchConvK<T, 4>(x, w, st, y, so, batch, seq, channels, stream);
    case 5: return launchConvK<T, 5>(x, w, st, y, so, batch, seq, channels, stream);
    case 6: return launchConvK<T, 6>(x, w, st, y, so, batch, seq, channels, stream);
    case 7: return launchConvK<T, 7>(x, w, st, y, so, batch, seq, channels, stream);
    default: return launchConvK<T, 8>(x, w, st, y, so, batch, seq, channels, stream);
    }
}

template <typename T, int DK>
cudaError_t launchRuleDk(const void* x, const void* ba, const void* aLog, const void* dtBias, const float* state,
    void* y, float* stateOut, int64_t batch, int64_t seq, int hk, int hv, int dv, cudaStream_t stream)
{
    const dim3 grid(static_cast<unsigned>(dv / (32 / (DK / kGDN_STATE_PART))), static_cast<unsigned>(hv),
        static_cast<unsigned>(batch));
    const float sqrtDk = static_cast<float>(std::sqrt(static_cast<double>(DK)));
    gatedDeltaRuleKernel<T, DK><<<grid, 32, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(ba),
        static_cast<const T*>(aLog), static_cast<const T*>(dtBias), state, static_cast<T*>(y), stateOut, seq, hk, hv,
        dv, sqrtDk);
    return cudaGetLastError();
}

template <typename T>
cudaError_t launchRule(const void* x, const void* ba, const void* aLog, const void* dtBias, const float* state,
    void* y, float* stateOut, int64_t batch, int64_t seq, int hk, int hv, int dk, int dv, cudaStream_t stream)
{
    if (dk == 64)
    {
        return launchRuleDk<T, 64>(x, ba, aLog, dtBias, state, y, stateOut, batch, seq, hk, hv, dv, stream);
    }
    return launchRuleDk<T, 128>(x, ba, aLog, dtBias, state, y, stateOut, batch, seq, hk, hv, dv, stream);
}

bool knownDtype(int32_t d)
{
    return d == kMETRALE_FLOAT32 || d == kMETRALE_FLOAT16 || d == kMETRALE_BFLOAT16;
}

} // namespace

extern "C" cudaError_t metrale_causal_conv1d(const void* x, int32_t x_dtype, const void* weight,
    const void* conv_state, void* y, void* conv_state_out, int64_t batch, int64_t seq, int64_t channels,
    int64_t kernel_size, cudaStream_t stream)
{
    if (batch < 0 || seq < 0 || channels <= 0 || kernel_size < 2 || !knownDtype(x_dtype))
    {
        return cudaErrorInvalidValue;
    }
    if (kernel_size > kGDN_MAX_CONV_KERNEL || batch > 65535)
    {
        return cudaErrorNotSupported;
    }
    if (batch == 0)
    {
        return cudaSuccess;
    }
    if ((seq > 0 && (x == nullptr || y == nullptr)) || weight == nullptr || conv_state == nullptr
        || conv_state_out == nullptr)
    {
        return cudaErrorInvalidValue;
    }
    const int k = static_cast<int>(kernel_size);
    switch (x_dtype)
    {
    case kMETRALE_FLOAT32: return launchConv<float>(x, weight, conv_state, y, conv_state_out, batch, seq, channels, k, stream);
    case kMETRALE_FLOAT16: return launchConv<__half>(x, weight, conv_state, y, conv_state_out, batch, seq, channels, k, stream);
    default: return launchConv<__nv_bfloat16>(x, weight, conv_state, y, conv_state_out, batch, seq, channels, k, stream);
    }
}

extern "C" cudaError_t metrale_gated_delta_rule(const void* x, int32_t x_dtype, const void* ba, const void* a_log,
    const void* dt_bias, const float* state, void* y, float* state_out, int64_t batch, int64_t seq,
    int64_t num_k_heads, int64_t num_v_heads, int64_t head_k_dim, int64_t head_v_dim, cudaStream_t stream)
{
    if (batch < 0 || seq < 0 || num_k_heads <= 0 || num_v_heads <= 0 || num_v_heads % num_k_heads != 0
        || head_k_dim <= 0 || head_v_dim <= 0 || !knownDtype(x_dtype))
    {
        return cudaErrorInvalidValue;
    }
    if ((head_k_dim != 64 && head_k_dim != 128) || head_v_dim % kGDN_V_BLOCK != 0 || num_v_heads > 65535
        || batch > 65535)
    {
        return cudaErrorNotSupported;
    }
    if (batch == 0)
    {
        return cudaSuccess;
    }
    if ((seq > 0 && (x == nullptr || ba == nullptr || y == nullptr)) || a_log == nullptr || dt_bias == nullptr
        || state == nullptr || state_out == nullptr)
    {
        return cudaErrorInvalidValue;
    }
    const int hk = static_cast<int>(num_k_heads);
    const int hv = static_cast<int>(num_v_heads);
    const int dk = static_cast<int>(head_k_dim);
    const int dv = static_cast<int>(head_v_dim);
    switch (x_dtype)
    {
    case kMETRALE_FLOAT32:
        return launchRule<float>(x, ba, a_log, dt_bias, state, y, state_out, batch, seq, hk, hv, dk, dv, stream);
    case kMETRALE_FLOAT16:
        return launchRule<__half>(x, ba, a_log, dt_bias, state, y, state_out, batch, seq, hk, hv, dk, dv, stream);
    default:
        return launchRule<__nv_bfloat16>(x, ba, a_log, dt_bias, state, y, state_out, batch, seq, hk, hv, dk, dv, stream);
    }
}
