/*
 * metrale_attention: the C launcher of the Attention op (plugins/include/metrale/kernels.h).
 *
 * Three paths, all with the same bits (attentionKernel.cuh, attentionDecodeKernel.cuh), so the
 * choice (metrale_attention_path) is about speed only:
 * - decode (split < 0, a (sequence, kv head) of at most 16 rows, seq * group): the decode kernel,
 *   warps over 256-key chunks, CTAs per (sequence, kv head) from the SM count, then the merge
 *   kernel; METRALE_ATTENTION_DECODE=base turns it off (the split / unsplit choice below instead);
 * - split (one CTA per 256-key chunk, then the merge kernel) when the unsplit grid would leave most
 *   of the GPU idle;
 * - unsplit (each CTA folds its chunks itself).
 */
#include "metrale/kernels.h"
#include "attentionDecodeKernel.cuh"

#include <algorithm>
#include <cstdlib>
#include <cstring>

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

bool decodeOff()
{
    const char* v = std::getenv("METRALE_ATTENTION_DECODE");
    return v != nullptr && std::strcmp(v, "base") == 0;
}

/* The path of a launch: 2 the decode kernel, 1 split, 0 unsplit (split: the caller's 0 / 1 / -1). */
int pathOf(int64_t batch, int64_t qHeads, int64_t kvHeads, int64_t seq, int64_t total, int64_t headDim, int32_t split)
{
    if (split >= 0)
    {
        return split > 0 ? 1 : 0;
    }
    if (seq * (qHeads / kvHeads) <= kDEC_MAX_ROWS && !decodeOff())
    {
        return 2;
    }
    const int64_t rows = seq * (qHeads / kvHeads);
    const int64_t tiles = (rows + rowsPerCta(headDim) - 1) / rowsPerCta(headDim);
    return chunksOf(total) > 1 && tiles * batch * kvHeads < kSPLIT_BELOW_CTAS ? 1 : 0;
}

/* A device attribute of the current device, read once per device (fallback where it cannot be read). */
template <cudaDeviceAttr kATTR>
int deviceAttr(int fallback)
{
    static int cached[64] = {};
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0)
    {
        return fallback;
    }
    if (dev < 64 && cached[dev] > 0)
    {
        return cached[dev];
    }
    int n = 0;
    if (cudaDeviceGetAttribute(&n, kATTR, dev) != cudaSuccess || n <= 0)
    {
        return fallback;
    }
    if (dev < 64)
    {
        cached[dev] = n;
    }
    return n;
}

int smCount()
{
    return deviceAttr<cudaDevAttrMultiProcessorCount>(132);
}

/* CTAs of the decode kernel per (sequence, kv head): fill the SMs' CTA slots once when the
 * (sequence, kv head) pairs do not, never more than the chunks need (speed only). */
template <int D>
int decodeSplits(const AttnParams& p)
{
    const int64_t perSm = DecCfg<D>::kSMEM * 2 <= 227 * 1024 ? 2 : 1;
    const int64_t slots = smCount() * perSm;
    const int64_t pairs = int64_t(p.batch) * p.kvHeads;
    const int64_t need = (p.nChunks + DecCfg<D>::kWARPS - 1) / DecCfg<D>::kWARPS;
    return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(slots / pairs, need)));
}

template <int D, bool kF16>
cudaError_t launchDecode(const AttnParams& p, cudaStream_t stream)
{
    using C = DecCfg<D>;
    const dim3 grid(static_cast<unsigned>(decodeSplits<D>(p)), static_cast<unsigned>(p.batch * p.kvHeads), 1u);
    if (grid.y > 65535u)
    {
        return cudaErrorInvalidValue;
    }
    cudaError_t err = cudaFuncSetAttribute(attentionDecodeKernel<D, kF16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
        int(C::kSMEM));
    if (err != cudaSuccess)
    {
        return err;
    }
    attentionDecodeKernel<D, kF16><<<grid, C::kTHREADS, C::kSMEM, stream>>>(p);
    const int64_t rows = int64_t(p.batch) * p.qHeads * p.seq;
    attentionMergeKernel<D, kF16><<<static_cast<unsigned>((rows + kWARPS - 1) / kWARPS), kTHREADS, 0, stream>>>(p);
    return cudaGetLastError();
}

bool validArgs(int64_t batch, int64_t qHeads, int64_t kvHeads, int64_t seq, int64_t total)
{
    return batch > 0 && qHeads > 0 && kvHeads > 0 && seq > 0 && total >= seq && qHeads % kvHeads == 0
        && batch * qHeads * seq < (int64_t(1) << 31) && total < (int64_t(1) << 30);
}

template <int D, bool kF16>
cudaError_t launch(const AttnParams& p, int path, int64_t rowTiles, cudaStream_t stream)
{
    using C = AttnCfg<D>;
    // The decode kernel's shared memory (200 KB at d = 128) exceeds what sm_80 / sm_86 grant a
    // block: there it takes the split path (the same workspace, the same bits).
    if (path == 2 && size_t(deviceAttr<cudaDevAttrMaxSharedMemoryPerBlockOptin>(0)) >= DecCfg<D>::kSMEM)
    {
        return launchDecode<D, kF16>(p, stream);
    }
    path = path == 2 ? 1 : path;
    const bool split = path == 1;
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
    return pathOf(batch, q_heads, kv_heads, seq, total, head_dim, -1) == 1 ? 1 : 0;
}

extern "C" int32_t metrale_attention_path(int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t seq,
    int64_t total, int64_t head_dim, int32_t split)
{
    if (!validArgs(batch, q_heads, kv_heads, seq, total))
    {
        return -1;
    }
    return pathOf(batch, q_heads, kv_heads, seq, total, head_dim, split);
}

extern "C" size_t metrale_attention_workspace_size(int32_t dtype, int64_t batch, int64_t q_heads,
    int64_t kv_heads, int64_t seq, int64_t total, int64_t head_dim, int32_t split)
{
    if (!validArgs(batch, q_heads, kv_heads, seq, total))
    {
        return 0;
    }
    const bool useSplit = pathOf(batch, q_heads, kv_heads, seq, total, head_dim, split) > 0;
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
    const int path = pathOf(batch, q_heads, kv_heads, seq, total, head_dim, split);
    const bool useSplit = path > 0;
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
    case 64: return f16 ? launch<64, true>(p, path, rowTiles, stream) : launch<64, false>(p, path, rowTiles, stream);
    case 128: return f16 ? launch<128, true>(p, path, rowTiles, stream) : launch<128, false>(p, path, rowTiles, stream);
    default: return f16 ? launch<256, true>(p, path, rowTiles, stream) : launch<256, false>(p, path, rowTiles, stream);
    }
}
