/*
 * Router as a TensorRT IPluginV3 (namespace, version and fields from metrale/contract.h): softmax
 * over the experts and top-k a row, ties to the lower expert id, optionally renormalized
 * (docs/ops.md). Input: logits [M, E] (kFLOAT/kHALF/kBF16, M dynamic). Outputs: topk_ids kINT32
 * [M, top_k], topk_weights [M, top_k] of the logits' type. Fields: the ONNX attributes
 * num_experts, top_k, normalize, family, name.
 */
#ifndef METRALE_ROUTER_PLUGIN_H
#define METRALE_ROUTER_PLUGIN_H

#include "../common/opPlugin.h"

namespace metrale
{
namespace plugin
{

struct RouterOp
{
    using Op = contract::Router;

    int32_t numExperts{0};
    int32_t topK{0};
    int32_t normalize{0};
    NodeNames names;

    template <typename Visitor>
    void visitFields(Visitor& v) const
    {
        v.intField("num_experts", numExperts);
        v.intField("top_k", topK);
        v.intField("normalize", normalize);
        names.visit(v);
    }

    static RouterOp parse(FieldReader const& reader);
    bool isDynamic(int32_t input, int32_t dim, int32_t /*rank*/) const
    {
        return input == kX_IDX && dim == 0;
    }
    void checkDims(nvinfer1::Dims const* dims, int32_t nbInputs, bool allowWildcards) const;
    void outputShapes(nvinfer1::DimsExprs const* in, nvinfer1::DimsExprs* out, nvinfer1::IExprBuilder& b) const;
    std::vector<nvinfer1::Dims> outputDims(nvinfer1::Dims const* in) const;
    size_t workspaceSize(nvinfer1::Dims const* /*in*/, int32_t /*xDType*/) const
    {
        return 0;
    }
    cudaError_t launch(OpTensors const& t) const;
    std::string describe() const;
    int64_t rows(nvinfer1::Dims const* in) const
    {
        return in[kX_IDX].d[0];
    }
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_ROUTER_PLUGIN_H
