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

struct RMSNormOp : OpFields<contract::RMSNorm>
{
    int32_t k{0};
    float epsilon{0.0F};
    int32_t weightOffset{0}, hasResidual{0}, hasGate{0};
    static constexpr auto kMEMBERS = std::make_tuple(
        &RMSNormOp::k, &RMSNormOp::epsilon, &RMSNormOp::weightOffset, &RMSNormOp::hasResidual, &RMSNormOp::hasGate);

    static RMSNormOp parse(FieldReader const& reader);
};

//! The rows: the product of x's dimensions but the last.
template <>
int64_t OpPluginOf<RMSNormOp>::rows(nvinfer1::Dims const* in) const;

METRALE_OP_PLUGIN_SPECIALIZATIONS(RMSNormOp);

} // namespace plugin
} // namespace metrale

#endif // METRALE_RMS_NORM_PLUGIN_H
