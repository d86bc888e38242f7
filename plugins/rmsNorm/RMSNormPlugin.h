/*
 * RMSNorm as a TensorRT IPluginV3 (namespace, version and fields from metrale/contract.h): the
 * fixed-order norm over the last dimension, with the fused residual add and the gated norm
 * (docs/ops.md). Inputs: x [..., K] (kFLOAT/kHALF/kBF16; the leading dimensions are the rows and
 * may be dynamic), weight [K], residual [..., K] (has_residual=1), gate [..., K] (has_gate=1), all
 * of x's type. Outputs: y [..., K], and residual_out [..., K] (has_residual=1), x's type. Fields:
 * the ONNX attributes k, epsilon, weight_offset, has_residual, has_gate, family, name.
 */
#ifndef METRALE_RMS_NORM_PLUGIN_H
#define METRALE_RMS_NORM_PLUGIN_H

#include "../common/opPlugin.h"

namespace metrale
{
namespace plugin
{

struct RMSNormOp
{
    using Op = contract::RMSNorm;

    int32_t k{0};
    float epsilon{0.0F};
    int32_t weightOffset{0};
    int32_t hasResidual{0};
    int32_t hasGate{0};
    NodeNames names;

    template <typename Visitor>
    void visitFields(Visitor& v) const
    {
        v.intField("k", k);
        v.floatField("epsilon", epsilon);
        v.intField("weight_offset", weightOffset);
        v.intField("has_residual", hasResidual);
        v.intField("has_gate", hasGate);
        names.visit(v);
    }

    static RMSNormOp parse(FieldReader const& reader);
    bool isDynamic(int32_t input, int32_t dim, int32_t rank) const;
    void checkDims(nvinfer1::Dims const* dims, int32_t nbInputs, bool allowWildcards) const;
    void outputShapes(nvinfer1::DimsExprs const* in, nvinfer1::DimsExprs* out, nvinfer1::IExprBuilder& b) const;
    std::vector<nvinfer1::Dims> outputDims(nvinfer1::Dims const* in) const;
    size_t workspaceSize(nvinfer1::Dims const* /*in*/, int32_t /*xDType*/) const
    {
        return 0;
    }
    cudaError_t launch(OpTensors const& t) const;
    std::string describe() const;
    int64_t rows(nvinfer1::Dims const* in) const;
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_RMS_NORM_PLUGIN_H
