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
    //! The longest seq up to `seq` that the decode rule admits, and the launch's split argument.
    int64_t decodeSeq(int64_t seq) const;
    int32_t splitFor(int64_t seq) const;
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
