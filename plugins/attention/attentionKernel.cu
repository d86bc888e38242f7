/*
 * metrale_attention: the C launcher of the Attention op (plugins/include/metrale/kernels.h).
 *
 * Chooses the split mode (one CTA per 256-key chunk, then the merge kernel) or the unsplit mode
 * (each CTA folds its chunks itself); both give the same bits (attentionKernel.cuh), so the choice
 * (metrale_attention_split) is about speed only: split when the unsplit grid would leave most of the
 * GPU idle (decode, short batches).
 */
#include "metrale/kernels.h"
#include "attentionKernel.cuh"

#include <algorithm>

using namespace metrale;
using namespace metrale::attn;

namespace
{

constexpr int64_t kSPLIT_BELOW_CTAS = 264;  // about two waves of an H100/H200 (132 SMs)

int rowsPerCta(int64_t headDim)
{
    return headDim <= 128 ? AttnCfg<128>::kROWS : AttnCfg<256>::kROWS;
}

size_t bf16Bytes(int64_t elems)
{
    return alignUp(size_t(elems) * 2, 256);
}

cudaError_t toBf16(const void* src, uint16_t* dst, int64_t elems, cudaStream_t stream)
{
    const size_t n2 = size_t(elems) / 2;  // head_dim is even
    const unsigned blocks = static_cast<unsigned>(std::min<size_t>((n2 + 255) / 256, 8192));
    toBf16Kernel<<<blocks, 256, 0, stream>>>(static_cast<const float*>(src), dst, n2);
    return cudaGetLastError();
}

int64_t chunksOf(int64_t total)
{
    return (total + kCHUNK_KEYS - 1) / kCHUNK_KEYS;
}

bool validArgs(int64_t batch, int64_t qHeads, int64_t kvHeads, int64_t seq, int64_t total)
{
    return batch > 0 && qHeads > 0 && kvHeads > 0 && seq > 0 && total >= seq && qHeads % kvHeads == 0
        && batch * qHeads * seq < (int64_t(1) << 31) && total < (int64_t(1) << 30);
}

template <int D, bool kF16>
cudaError_t launch(const AttnParams& p, bool split, int64_t rowTiles, cudaStream_t stream)
{
    using C = AttnCfg<D>;
    const dim3 grid(static_cast<unsigned>(rowTiles), static_cast<unsigned>(p.batch * p.kvHeads),
        split ? static_cast<unsigned>(p.nChunks) : 1u);
    if (grid.z > 65535u || grid.y > 65535u)
    {
        return cudaErrorInvalidValue;
    }
    cudaError_t err;
    if (split)
    {
        const size_t smem = C::kSMEM_CORE;
        err = cudaFuncSetAttribute(attentionKernel<D, kF16, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        if (err != cudaSuccess)
        {
            return err;
        }
        attentionKernel<D, kF16, true><<<grid, kTHREADS, smem, stream>>>(p);
        const int64_t rows = int64_t(p.batch) * p.qHeads * p.seq;
        attentionMergeKernel<D, kF16><<<static_cast<unsigned>((rows + kWARPS - 1) / kWARPS), kTHREADS, 0, stream>>>(p);
    }
    else
    {
        const size_t smem = C::kSMEM_CORE + C::kSMEM_TOTAL;
        err = cudaFuncSetAttribute(attentionKernel<D, kF16, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        if (err != cudaSuccess)
        {
            return err;
        }
        attentionKernel<D, kF16, false><<<grid, kTHREADS, smem, stream>>>(p);
    }
    return cudaGetLastError();
}

} // namespace

extern "C" int32_t metrale_attention_split(int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t seq,
    int64_t total, int64_t head_dim)
{
    if (!validArgs(batch, q_heads, kv_heads, seq, total))
    {
        return 0;
    }
    const int64_t rows = seq * (q_heads / kv_heads);
    const int64_t tiles = (rows + rowsPerCta(head_dim) - 1) / rowsPerCta(head_dim);
    return chunksOf(total) > 1 && tiles * batch * kv_heads < kSPLIT_BELOW_CTAS ? 1 : 0;
}

extern "C" size_t metrale_attention_workspace_size(int32_t dtype, int64_t batch, int64_t q_heads,
    int64_t kv_heads, int64_t seq, int64_t total, int64_t head_dim, int32_t split)
{
    if (!validArgs(batch, q_heads, kv_heads, seq, total))
    {
        return 0;
    }
    const bool useSplit = split > 0 || (split < 0 && metrale_attention_split(batch, q_heads, kv_heads, seq, total, head_dim));
    size_t bytes = 0;
    if (useSplit)
    {
        const size_t slots = size_t(batch) * q_heads * seq * chunksOf(total);
        bytes += alignUp(slots * size_t(head_dim + 2) * sizeof(float), 256);
    }
    if (dtype == kMETRALE_FLOAT32)
    {
        bytes += bf16Bytes(batch * q_heads * seq * head_dim) + 2 * bf16Bytes(batch * kv_heads * total * head_dim);
    }
    return bytes;
}

extern "C" cudaError_t metrale_attention(const void* q, const void* k, const void* v, void* out, int32_t dtype,
    int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t seq, int64_t total, int64_t head_dim,
    float scale_log2, int32_t split, void* workspace, size_t workspace_bytes, cudaStream_t stream)
{
    if (!validArgs(batch, q_heads, kv_heads, seq, total) || !q || !k || !v || !out)
    {
        return cudaErrorInvalidValue;
    }
    if ((dtype != kMETRALE_BFLOAT16 && dtype != kMETRALE_FLOAT16 && dtype != kMETRALE_FLOAT32)
        || (head_dim != 64 && head_dim != 128 && head_dim != 256))
    {
        return cudaErrorNotSupported;
    }
    const bool useSplit = split > 0 || (split < 0 && metrale_attention_split(batch, q_heads, kv_heads, seq, total, head_dim));
    const size_t need = metrale_attention_workspace_size(dtype, batch, q_heads, kv_heads, seq, total, head_dim, useSplit ? 1 : 0);
    if (workspace_bytes < need || (need > 0 && !workspace))
    {
        return cudaErrorInvalidValue;
    }
    AttnParams p{};
    p.q = static_cast<const uint16_t*>(q);
    p.k = static_cast<const uint16_t*>(k);
    p.v = static_cast<const uint16_t*>(v);
    p.out = out;
    p.outF32 = dtype == kMETRALE_FLOAT32 ? 1 : 0;
    p.batch = int(batch);
    p.qHeads = int(q_heads);
    p.kvHeads = int(kv_heads);
    p.seq = int(seq);
    p.total = int(total);
    p.group = int(q_heads / kv_heads);
    p.nChunks = int(chunksOf(total));
    p.scaleLog2 = scale_log2;
    uint8_t* ws = static_cast<uint8_t*>(workspace);
    if (useSplit)
    {
        const size_t slots = size_t(batch) * q_heads * seq * p.nChunks;
        p.wsO = reinterpret_cast<float*>(ws);
        p.wsML = p.wsO + slots * head_dim;
        ws += alignUp(slots * size_t(head_dim + 2) * sizeof(float), 256);
    }
    if (p.outF32)
    {
        // Step 0 of a float32 graph: q, k, v rounded to bf16 (RNE) into the workspace.
        const int64_t nq = batch * q_heads * seq * head_dim, nkv = batch * kv_heads * total * head_dim;
        uint16_t* q16 = reinterpret_cast<uint16_t*>(ws);
        uint16_t* k16 = reinterpret_cast<uint16_t*>(ws + bf16Bytes(nq));
        uint16_t* v16 = reinterpret_cast<uint16_t*>(ws + bf16Bytes(nq) + bf16Bytes(nkv));
        cudaError_t err = toBf16(q, q16, nq, stream);
        if (err == cudaSuccess)
        {
            err = toBf16(k, k16, nkv, stream);
        }
        if (err == cudaSuccess)
        {
            err = toBf16(v, v16, nkv, stream);
        }
        if (err != cudaSuccess)
        {
            return err;
        }
        p.q = q16;
        p.k = k16;
        p.v = v16;
    }
    const int64_t rowTiles = (seq * p.group + rowsPerCta(head_dim) - 1) / rowsPerCta(head_dim);
    const bool f16 = dtype == kMETRALE_FLOAT16;
    switch (head_dim)
    {
    case 64: return f16 ? launch<64, true>(p, useSplit, rowTiles, stream) : launch<64, false>(p, useSplit, rowTiles, stream);
    case 128: return f16 ? launch<128, true>(p, useSplit, rowTiles, stream) : launch<128, false>(p, useSplit, rowTiles, stream);
    default: return f16 ? launch<256, true>(p, useSplit, rowTiles, stream) : launch<256, false>(p, useSplit, rowTiles, stream);
    }
}
