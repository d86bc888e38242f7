/*
 * W8A8Proj as a TensorRT IPluginV3 (namespace, version and fields from
 * metrale/contract.h; also registered under the contract's compatible version, Op::kCOMPATIBLE_VERSION):
 * FP8 e4m3 weights with per-channel or 128x128 block scales, fp8 (default) or bf16 activations
 * (docs/ops.md). Version 2 added activation_scale_granularity=tensor (a static scale, input_scale);
 * a node without it is a version-1 node, which the compatible creator builds as it is. W8A8Format is
 * what W8A8Proj and its grouped-expert op W8A8MoEProj (moeProj/W8A8MoEProjPlugin.cpp) share.
 *
 * Inputs: x [M, K] (kFLOAT/kHALF/kBF16), weight kINT8 [N, K] (e4m3fn bit patterns), weight_scale
 * kFLOAT [N] (channel) or [ceil(N/128), ceil(K/128)] (block128), input_scale kFLOAT [1]
 * (activation_scale_granularity=tensor), bias kFLOAT [N] (has_bias=1).
 * Output y [M, N], the type of x. Fields: the ONNX attributes n, k, weight_scale_granularity,
 * activation_format, activation_scale_granularity, has_bias, family, name.
 */
#ifndef METRALE_W8A8_PROJ_PLUGIN_H
#define METRALE_W8A8_PROJ_PLUGIN_H

#include "../common/projectionPlugin.h"

namespace metrale
{
namespace plugin
{

struct RoutingAttributes;

//! What W8A8Proj and W8A8MoEProj share: the policy of DenseProjPlugin and GroupedProjPlugin.
struct W8A8Format
{
    //! The ops' contract (metrale/contract.h): type, version, activation formats, fields, inputs.
    using Op = contract::W8A8Proj;
    using GroupedOp = contract::W8A8MoEProj;
    //! Edge of a weight-scale block and of an activation-scale block (block128, row_block128).
    static constexpr int64_t kBLOCK{contract::kFP8_BLOCK};

    std::string weightScaleGranularityName;
    std::string activationScaleGranularityName;
    int32_t weightScaleGranularity{kMETRALE_WSCALE_CHANNEL};
    int32_t activationScaleGranularity{kMETRALE_ASCALE_ROW};

    bool staticScale() const
    {
        return activationScaleGranularity == kMETRALE_ASCALE_TENSOR;
    }

    //! The fields after n and k bound to this format's members, in contract order (checked
    //! against Op::kFIELDS at creation).
    template <typename Visitor>
    void visitFields(CommonAttributes const& attrs, Visitor& v) const
    {
        v.stringField("weight_scale_granularity", weightScaleGranularityName);
        v.stringField("activation_format", attrs.activationFormatName);
        v.stringField("activation_scale_granularity", activationScaleGranularityName);
        visitTailFields(attrs, v);
    }

    static W8A8Format parse(FieldReader const& reader, CommonAttributes const& attrs);
    std::vector<InputSpec> weightInputs(CommonAttributes const& attrs) const;
    std::string describe() const;
    size_t workspaceSize(CommonAttributes const& attrs, int64_t m) const;
    cudaError_t launch(CommonAttributes const& attrs, InputTensors const& in, LaunchArgs const& run) const;
    // The grouped op's (moeProj/W8A8MoEProjPlugin.cpp).
    size_t groupedWorkspaceSize(
        CommonAttributes const& attrs, RoutingAttributes const& routing, int64_t m, int32_t xDType) const;
    cudaError_t groupedLaunch(CommonAttributes const& attrs, RoutingAttributes const& routing,
        InputTensors const& in, LaunchArgs const& run) const;
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_W8A8_PROJ_PLUGIN_H
