/*
 * Attention as a TensorRT IPluginV3 (namespace, version and fields from metrale/contract.h):
 * causal grouped-query attention over the KV cache the graph concatenates, reduced over key blocks
 * at fixed absolute positions, so a token's bits depend only on its own sequence (docs/ops.md,
 * "Attention"). Inputs: q [B, Hq, S, D] (kFLOAT/kHALF/kBF16), key and value [B, Hkv, T, D] of q's
 * type, T >= S; B, S and T may be dynamic. Output y [B, S, Hq, D], q's type. Fields: the ONNX
 * attributes q_heads, kv_heads, head_dim, scale, family, name.
 *
 * The plugin runs the launcher unsplit (split 0): the bits are those of every split choice
 * (kernels.h), and a split's workspace grows with the key chunks of the shape at hand, which a
 * workspace sized once for the profile's largest shape does not bound.
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

//! The unsplit launcher's workspace for the shapes at hand.
template <>
size_t OpPluginOf<AttentionOp>::workspaceSize(nvinfer1::Dims const* in, int32_t xDType) const;

} // namespace plugin
} // namespace metrale

#endif // METRALE_ATTENTION_PLUGIN_H
