/*
 * The plain launch functions of the metrale projection kernels (C ABI).
 *
 * One function per op type of docs/ops.md. The TensorRT plugins (plugins/<op>/<Op>Plugin.cpp), the
 * torch CUDA ops (metrale_export/ops/cuda.py, through ctypes) and the GPU tests all call these and
 * nothing else, so every front end runs exactly the same arithmetic.
 *
 * Invariants:
 * - Functions only validate arguments, compute a grid and launch on `stream`; they never allocate,
 *   synchronize or print. Errors come back as cudaError_t (cudaErrorInvalidValue for bad
 *   arguments, cudaErrorNotSupported for a combination the op contract does not allow).
 * - A row's output bits depend only on that row of `x` and the weights, never on `m`.
 * - `workspace` holds at least the bytes the matching *_workspace_size(m, ...) returns; it may be
 *   NULL when that size is 0.
 */
#ifndef METRALE_KERNELS_H
#define METRALE_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#include "metrale/contract.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The argument codes (x_dtype: MetraleDType, act_format: MetraleActFormat, weight_scale_granularity:
 * MetraleWeightScale, act_scale_granularity: MetraleActScale) are the op contract's, generated into
 * metrale/contract.h; y always has the dtype of x. */

/* W4A16Proj (op version 2). weight: int8 [n, k/2] packed codes; weight_scale: bfloat16 bit patterns
 * [n, ceil(k/group_size)]; zero_point: int8 [n, ceil(k/group_size)] or NULL (symmetric, zero point
 * 8); bias: float32 [n] or NULL. k even (a partial last group allowed); k a multiple of 32, else
 * cudaErrorNotSupported. */
size_t metrale_w4a16_workspace_size(int64_t m, int64_t n, int64_t k, int64_t group_size);
cudaError_t metrale_w4a16_proj(const void* x, int32_t x_dtype, const int8_t* weight,
    const void* weight_scale, const int8_t* zero_point, const float* bias, void* y, int64_t m,
    int64_t n, int64_t k, int64_t group_size, void* workspace, size_t workspace_bytes,
    cudaStream_t stream);

/* W8A8Proj (op version 2). weight: int8 [n, k] e4m3 bit patterns; weight_scale: float32 [n] or
 * [ceil(n/128), ceil(k/128)]; act_format: bf16 or fp8; input_scale: float32 [1] (device), the
 * static activation scale, for act_scale_granularity TENSOR (else ignored; NULL there:
 * cudaErrorInvalidValue). A static scale skips the amax pre-pass: one elementwise quantization. */
size_t metrale_w8a8_workspace_size(int64_t m, int64_t n, int64_t k, int32_t act_format,
    int32_t act_scale_granularity);
cudaError_t metrale_w8a8_proj(const void* x, int32_t x_dtype, const int8_t* weight,
    const float* weight_scale, int32_t weight_scale_granularity, int32_t act_format,
    int32_t act_scale_granularity, const float* input_scale, const float* bias, void* y, int64_t m,
    int64_t n, int64_t k, void* workspace, size_t workspace_bytes, cudaStream_t stream);

/* W4A4Proj. weight: int8 [n, k/2] e2m1 codes; weight_scale: int8 [n, k/16] e4m3 bit patterns;
 * weight_global_scale: float32 [1] (device); input_scale: float32 [1] (device) or NULL for the
 * dynamic per-row activation global scale; act_format: bf16 or nvfp4. */
size_t metrale_w4a4_workspace_size(int64_t m, int64_t n, int64_t k, int32_t act_format);
cudaError_t metrale_w4a4_proj(const void* x, int32_t x_dtype, const int8_t* weight,
    const int8_t* weight_scale, const float* weight_global_scale, const float* input_scale,
    int32_t act_format, const float* bias, void* y, int64_t m, int64_t n, int64_t k,
    void* workspace, size_t workspace_bytes, cudaStream_t stream);

/* The grouped-expert ops (docs/ops.md, "Grouped-expert ops"), W4A16MoEProj / W8A8MoEProj /
 * W4A4MoEProj: the dense op's weight tensors stacked with a leading expert axis [num_experts, ...]
 * (weight_global_scale: float32 [num_experts]); topk_ids: int32 [m, top_k] (device); combine 0:
 * x [m, k] -> y [m, top_k, n]; combine 1: x [m, top_k, k], topk_weights [m, top_k] (dtype of x)
 * -> y [m, n], the weighted sum over the row's experts in ascending id. top_k <= 32. No host
 * synchronization: routing, sorting and offsets stay on the device (moeProj/moeProjKernel.cuh). */
size_t metrale_w4a16_moe_workspace_size(int64_t m, int64_t top_k, int64_t num_experts, int64_t n,
    int64_t k, int32_t x_dtype);
cudaError_t metrale_w4a16_moe_proj(const void* x, int32_t x_dtype, const int32_t* topk_ids,
    const void* topk_weights, const int8_t* weight, const void* weight_scale, const int8_t* zero_point,
    const float* bias, void* y, int64_t m, int64_t top_k, int64_t num_experts, int64_t n, int64_t k,
    int64_t group_size, int32_t combine, void* workspace, size_t workspace_bytes, cudaStream_t stream);
size_t metrale_w8a8_moe_workspace_size(int64_t m, int64_t top_k, int64_t num_experts, int64_t n,
    int64_t k, int32_t x_dtype, int32_t act_format, int32_t act_scale_granularity);
cudaError_t metrale_w8a8_moe_proj(const void* x, int32_t x_dtype, const int32_t* topk_ids,
    const void* topk_weights, const int8_t* weight, const float* weight_scale,
    int32_t weight_scale_granularity, int32_t act_format, int32_t act_scale_granularity,
    const float* bias, void* y, int64_t m, int64_t top_k, int64_t num_experts, int64_t n, int64_t k,
    int32_t combine, void* workspace, size_t workspace_bytes, cudaStream_t stream);
size_t metrale_w4a4_moe_workspace_size(int64_t m, int64_t top_k, int64_t num_experts, int64_t n,
    int64_t k, int32_t x_dtype, int32_t act_format);
cudaError_t metrale_w4a4_moe_proj(const void* x, int32_t x_dtype, const int32_t* topk_ids,
    const void* topk_weights, const int8_t* weight, const int8_t* weight_scale,
    const float* weight_global_scale, const float* input_scale, int32_t act_format, const float* bias,
    void* y, int64_t m, int64_t top_k, int64_t num_experts, int64_t n, int64_t k, int32_t combine,
    void* workspace, size_t workspace_bytes, cudaStream_t stream);

/* Attention (docs/ops.md, "Attention"): causal grouped-query attention over a KV cache.
 * q: [batch, q_heads, seq, head_dim]; k, v: [batch, kv_heads, total, head_dim] (the cache with this
 * step's keys appended, total >= seq); out: [batch, seq, q_heads, head_dim]; all of `dtype`
 * (bfloat16, float16, or float32: then q, k, v are rounded to bf16 in the workspace and the output
 * is float32); head_dim 64, 128 or 256, else cudaErrorNotSupported. Query position i
 * (absolute total - seq + i) sees keys 0 .. total - seq + i. scale_log2: the contract's
 * float32(scale * log2 e). split: 1 one CTA per 256-key chunk and a merge, 0 none, -1 the
 * launcher's choice: the decode kernel (warps over 256-key chunks, then the merge) where a
 * (sequence, kv head) has at most 16 rows (seq * q_heads / kv_heads) unless the environment sets
 * METRALE_ATTENTION_DECODE=base, else as metrale_attention_split chooses; the bits are the same on
 * every path. metrale_attention_path: the path a launch takes (2 decode kernel, 1 split, 0 unsplit;
 * -1 bad arguments). A row's output depends only on its own query and its own sequence's keys and
 * values up to its position. */
#define METRALE_ATTENTION_DECODE_MAX_ROWS 16 /* seq * q_heads / kv_heads the decode kernel takes */
int32_t metrale_attention_split(int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t seq,
    int64_t total, int64_t head_dim);
int32_t metrale_attention_path(int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t seq,
    int64_t total, int64_t head_dim, int32_t split);
size_t metrale_attention_workspace_size(int32_t dtype, int64_t batch, int64_t q_heads,
    int64_t kv_heads, int64_t seq, int64_t total, int64_t head_dim, int32_t split);
cudaError_t metrale_attention(const void* q, const void* k, const void* v, void* out, int32_t dtype,
    int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t seq, int64_t total, int64_t head_dim,
    float scale_log2, int32_t split, void* workspace, size_t workspace_bytes, cudaStream_t stream);
/* --- the non-projection ops (docs/ops.md, "Norms, the float projection and the router") --- */

/* RMSNorm. x, residual, gate, y, residual_out: [m, k] of x_dtype; weight: [k] of x_dtype; residual
 * and gate NULL when absent; residual_out (NULL or [m, k]) gets s = x + residual, or x without a
 * residual (the torch op's second output, written by the kernel: no separate copy). All pointers 16-byte
 * aligned; k a multiple of 8 (4 for float32) and at most 16 chunks of 16 bytes a thread, else
 * cudaErrorNotSupported. No workspace. threads_per_row: the row group's width for k (32 or 256). */
int32_t metrale_rms_norm_threads_per_row(int64_t k);
cudaError_t metrale_rms_norm(const void* x, int32_t x_dtype, const void* weight, const void* residual,
    const void* gate, void* y, void* residual_out, int64_t m, int64_t k, float epsilon,
    int32_t weight_offset, cudaStream_t stream);

/* FloatProj. weight: bfloat16 bit patterns [n, k] (16-byte aligned); bias: float32 [n] or NULL;
 * k a multiple of 16, else cudaErrorNotSupported. */
size_t metrale_float_proj_workspace_size(int64_t m, int64_t n, int64_t k);
cudaError_t metrale_float_proj(const void* x, int32_t x_dtype, const void* weight, const float* bias,
    void* y, int64_t m, int64_t n, int64_t k, void* workspace, size_t workspace_bytes,
    cudaStream_t stream);

/* Router. logits: [m, num_experts] of x_dtype; topk_ids: int32 [m, top_k]; topk_weights:
 * [m, top_k] of x_dtype. num_experts <= 1024 and top_k <= 32, else cudaErrorNotSupported. No
 * workspace. */
cudaError_t metrale_router(const void* logits, int32_t x_dtype, int32_t* topk_ids, void* topk_weights,
    int64_t m, int64_t num_experts, int64_t top_k, int32_t normalize, cudaStream_t stream);

/* --- Gated DeltaNet (docs/ops.md, "Gated DeltaNet"): each sequence's tokens in order ------------ */

/* CausalConv1d. x, y: [batch, seq, channels]; weight: [channels, 1, kernel_size]; conv_state,
 * conv_state_out: [batch, channels, kernel_size - 1]; all of x_dtype. kernel_size <= 8, else
 * cudaErrorNotSupported. No workspace. */
cudaError_t metrale_causal_conv1d(const void* x, int32_t x_dtype, const void* weight, const void* conv_state,
    void* y, void* conv_state_out, int64_t batch, int64_t seq, int64_t channels, int64_t kernel_size,
    cudaStream_t stream);

/* GatedDeltaRule. x: [batch, seq, 2 Hk dk + Hv dv] ([q | k | v]); ba: [batch, seq, 2 Hv]; a_log,
 * dt_bias: [Hv]; y: [batch, seq, Hv, dv]; all of x_dtype. state, state_out: float32 [batch, Hv, dk,
 * dv]. dk 64 or 128 and dv a multiple of 32, else cudaErrorNotSupported. No workspace. */
cudaError_t metrale_gated_delta_rule(const void* x, int32_t x_dtype, const void* ba, const void* a_log,
    const void* dt_bias, const float* state, void* y, float* state_out, int64_t batch, int64_t seq,
    int64_t num_k_heads, int64_t num_v_heads, int64_t head_k_dim, int64_t head_v_dim, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* METRALE_KERNELS_H */
