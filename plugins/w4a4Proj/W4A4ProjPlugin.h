/*
 * W4A4Proj as a TensorRT IPluginV3 (namespace, version and fields from
 * metrale/contract.h): NVFP4 weights (e2m1 codes,
 * e4m3 per-16 scales, float32 global scale), nvfp4 (default) or bf16 activations (docs/ops.md).
 * W4A4Format is what W4A4Proj and its grouped-expert op W4A4MoEProj (moeProj/W4A4MoEProjPlugin.cpp)
 * share.
 *
 * Inputs: x [M, K] (kFLOAT/kHALF/kBF16), weight kINT8 [N, K/2] (e2m1 codes), weight_scale kINT8
 * [N, K/16] (e4m3fn bit patterns), weight_global_scale kFLOAT [1], input_scale kFLOAT [1]
 * (has_input_scale=1), bias kFLOAT [N] (has_bias=1). Output y [M, N], the type of x. Fields: the
 * ONNX attributes n, k, activation_format, has_input_scale, has_bias, family, name.
 */
#ifndef METRALE_W4A4_PROJ_PLUGIN_H
#define METRALE_W4A4_PROJ_PLUGIN_H

#include "../common/projectionPlugin.h"

namespace metrale
{
namespace plugin
{

//! What W4A4Proj and W4A4MoEProj share: the policy of DenseProjPlugin and GroupedProjPlugin.
struct W4A4Format : ProjFormat<contract::W4A4Proj, contract::W4A4MoEProj>
{
    int32_t hasInputScale{0};

    //! The fields after n and k and before has_bias, family and name, bound to this format's
    //! members, in contract order (checked against Op::kFIELDS at creation).
    template <typename Visitor>
    void visitFields(CommonAttributes const& attrs, Visitor& v) const
    {
        v.stringField("activation_format", attrs.activationFormatName);
        v.intField("has_input_scale", hasInputScale);
    }
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_W4A4_PROJ_PLUGIN_H
