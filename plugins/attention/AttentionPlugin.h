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

struct AttentionOp
{
    using Op = contract::Attention;

    int32_t qHeads{0};
    int32_t kvHeads{0};
    int32_t headDim{0};
    float scale{0.0F};
    NodeNames names;

    template <typename Visitor>
    void visitFields(Visitor& v) const
    {
        v.intField("q_heads", qHeads);
        v.intField("kv_heads", kvHeads);
        v.intField("head_dim", headDim);
        v.floatField("scale", scale);
        names.visit(v);
    }

    static AttentionOp parse(FieldReader const& reader);
    bool isDynamic(int32_t input, int32_t dim, int32_t rank) const;
    void checkDims(nvinfer1::Dims const* dims, int32_t nbInputs, bool allowWildcards) const;
    void outputShapes(nvinfer1::DimsExprs const* in, nvinfer1::DimsExprs* out, nvinfer1::IExprBuilder& b) const;
    std::vector<nvinfer1::Dims> outputDims(nvinfer1::Dims const* in) const;
    size_t workspaceSize(nvinfer1::Dims const* in, int32_t xDType) const;
    cudaError_t launch(OpTensors const& t) const;
    std::string describe() const;
    int64_t rows(nvinfer1::Dims const* in) const
    {
        return in[kX_IDX].d[0];
    }
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_ATTENTION_PLUGIN_H
