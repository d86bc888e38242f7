/*
 * W4A4MoEProj as a TensorRT IPluginV3 (namespace, version and fields from
 * metrale/contract.h): the grouped-expert op of
 * W4A4Proj (docs/ops.md, "Grouped-expert ops"), from the same W4A4Format.
 *
 * Inputs: x, topk_ids kINT32 [M, top_k], weight kINT8 [E, N, K/2] (e2m1 codes), weight_scale kINT8
 * [E, N, K/16] (e4m3fn), weight_global_scale kFLOAT [E], input_scale kFLOAT [E]
 * (has_input_scale=1), bias kFLOAT [E, N] (has_bias=1), topk_weights (combine=1). Fields: the ONNX
 * attributes n, k, num_experts, top_k, combine, activation_format, has_input_scale, has_bias,
 * family, name.
 *
 * The plugin is GroupedProjPlugin<W4A4Format> (registered in common/pluginLibrary.cpp): its
 * fields, checks and inputs are W4A4Proj's (w4a4Proj/W4A4ProjPlugin.{h,cpp}); this file
 * holds the call into metrale_w4a4_moe_proj.
 */
#include "../w4a4Proj/W4A4ProjPlugin.h"
#include "GroupedProjectionPlugin.h"

namespace metrale
{
namespace plugin
{

template <>
size_t GroupedProjPlugin<W4A4Format>::workspaceSize(int64_t m, int32_t xDType) const
{
    return metrale_w4a4_moe_workspace_size(
        m, mRouting.topK, mRouting.numExperts, mAttrs.n, mAttrs.k, xDType, mAttrs.activationFormat);
}

template <>
cudaError_t GroupedProjPlugin<W4A4Format>::launchKernel(InputTensors const& in, LaunchArgs const& run) const
{
    return metrale_w4a4_moe_proj(run.x, run.xDType, run.topkIds, run.topkWeights, in.required<int8_t>("weight"),
        in.required<int8_t>("weight_scale"), in.required<float>("weight_global_scale"),
        in.optional<float>("input_scale", mFormat.hasInputScale), mAttrs.activationFormat,
        in.optional<float>("bias", mAttrs.hasBias), run.y, run.m, mRouting.topK, mRouting.numExperts, mAttrs.n,
        mAttrs.k, mRouting.combine, run.workspace, run.workspaceBytes, run.stream);
}

} // namespace plugin
} // namespace metrale
