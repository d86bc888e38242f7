/*
 * Attention as a TensorRT IPluginV3 (namespace, version and fields from metrale/contract.h):
 * causal grouped-query attention over the KV cache the graph concatenates, reduced over key blocks
 * at fixed absolute positions, so a token's bits depend only on its own sequence (docs/ops.md,
 * "Attention"). Inputs: q [B, Hq, S, D] (kFLOAT/kHALF/kBF16), key and value [B, Hkv, T, D] of q's
 * type, T >= S; B, S and T may be dynamic. Output y [B, S, Hq, D], q's type. Fields: the ONNX
 * attributes q_heads, kv_heads, head_dim, scale, family, name.
 *
 * Where a launch has at most METRALE_ATTENTION_DECODE_MAX_ROWS rows a (sequence, kv head) (decode:
 * seq * q_heads / kv_heads <= 16), the plugin lets the launcher choose (split -1: the decode kernel);
 * otherwise it runs unsplit (split 0), because a split prefill's workspace grows with seq * the key
 * chunks, which the profile's largest shape would make gigabytes. The bits are those of every split
 * choice (kernels.h). The workspace is sized for both: the unsplit need at the shape, and the split
 * need at the longest seq the decode rule admits (min(seq, 16 / group)); both grow with every
 * dimension, so the profile's largest shape bounds every launch of the profile.
 */
#ifndef METRALE_ATTENTION_PLUGIN_H
#define METRALE_ATTENTION_PLUGIN_H

#include "../common/opPlugin.h"

namespace metrale
{
namespace plugin
{

struct AttentionOp : OpFields<contract::Attention>
{
    int32_t qHeads{0}, kvHeads{0}, headDim{0};
    float scale{0.0F};
    static constexpr auto kMEMBERS =
        std::make_tuple(&AttentionOp::qHeads, &AttentionOp::kvHeads, &AttentionOp::headDim, &AttentionOp::scale);

    static AttentionOp parse(FieldReader const& reader);
};

//! The launcher's workspace for the shapes at hand: unsplit, or split at the decode rule's seq.
template <>
size_t OpPluginOf<AttentionOp>::workspaceSize(nvinfer1::Dims const* in, int32_t xDType) const;

METRALE_OP_PLUGIN_SPECIALIZATIONS(AttentionOp);

} // namespace plugin
} // namespace metrale

#endif // METRALE_ATTENTION_PLUGIN_H
