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

//! What W8A8Proj and W8A8MoEProj share: the policy of DenseProjPlugin and GroupedProjPlugin.
struct W8A8Format : ProjFormat<contract::W8A8Proj, contract::W8A8MoEProj>
{
    std::string weightScaleGranularityName;
    std::string activationScaleGranularityName;
    int32_t weightScaleGranularity{kMETRALE_WSCALE_CHANNEL};
    int32_t activationScaleGranularity{kMETRALE_ASCALE_ROW};

    bool staticScale() const
    {
        return activationScaleGranularity == kMETRALE_ASCALE_TENSOR;
    }

    //! The fields after n and k and before has_bias, family and name, bound to this format's
    //! members, in contract order (checked against Op::kFIELDS at creation).
    template <typename Visitor>
    void visitFields(CommonAttributes const& attrs, Visitor& v) const
    {
        v.stringField("weight_scale_granularity", weightScaleGranularityName);
        v.stringField("activation_format", attrs.activationFormatName);
        v.stringField("activation_scale_granularity", activationScaleGranularityName);
    }
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_W8A8_PROJ_PLUGIN_H
