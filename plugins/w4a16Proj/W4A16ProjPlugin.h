/*
 * W4A16Proj as a TensorRT IPluginV3 (namespace, version and fields from
 * metrale/contract.h): int4 weights with bfloat16
 * group scales and optional zero points, bf16 activations (docs/ops.md). W4A16Format is what
 * W4A16Proj and its grouped-expert op W4A16MoEProj (moeProj/W4A16MoEProjPlugin.cpp) share.
 *
 * Inputs: x [M, K] (kFLOAT/kHALF/kBF16), weight kINT8 [N, K/2], weight_scale kBF16
 * [N, ceil(K/group_size)], zero_point kINT8 [N, ceil(K/group_size)] (has_zero_point=1), bias
 * kFLOAT [N] (has_bias=1). Output y [M, N], the type of x. Fields: the ONNX attributes n, k,
 * group_size, has_zero_point, activation_format, has_bias, family, name.
 */
#ifndef METRALE_W4A16_PROJ_PLUGIN_H
#define METRALE_W4A16_PROJ_PLUGIN_H

#include "../common/projectionPlugin.h"

namespace metrale
{
namespace plugin
{

//! What W4A16Proj and W4A16MoEProj share: the policy of DenseProjPlugin and GroupedProjPlugin.
//! Version 2 of both ops: bfloat16 group scales, a partial last group (graphs of the retired
//! version are refused by a RetiredPluginCreator, which says why).
struct W4A16Format : ProjFormat<contract::W4A16Proj, contract::W4A16MoEProj>
{
    int32_t groupSize{0};
    int32_t hasZeroPoint{0};

    //! The fields after n and k and before has_bias, family and name, bound to this format's
    //! members, in contract order (checked against Op::kFIELDS at creation).
    template <typename Visitor>
    void visitFields(CommonAttributes const& attrs, Visitor& v) const
    {
        v.intField("group_size", groupSize);
        v.intField("has_zero_point", hasZeroPoint);
        v.stringField("activation_format", attrs.activationFormatName);
    }
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_W4A16_PROJ_PLUGIN_H
