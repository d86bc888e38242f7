/*
 * W4A16MoEProj as a TensorRT IPluginV3 (namespace, version and fields from metrale/contract.h,
 * as W4A16Proj): the grouped-expert op of W4A16Proj (docs/ops.md, "Grouped-expert ops"), from the same W4A16Format.
 *
 * Inputs: x, topk_ids kINT32 [M, top_k], weight kINT8 [E, N, K/2], weight_scale kBF16
 * [E, N, ceil(K/group_size)], zero_point kINT8 [E, N, ceil(K/group_size)] (has_zero_point=1),
 * bias kFLOAT [E, N] (has_bias=1), topk_weights (combine=1). Fields: the ONNX attributes n, k,
 * num_experts, top_k, combine, group_size, has_zero_point, activation_format, has_bias, family,
 * name. Version "1" (float32 group scales) is refused by its RetiredPluginCreator.
 *
 * The plugin is GroupedProjPlugin<W4A16Format> (registered in common/pluginLibrary.cpp): its
 * fields, checks and inputs are W4A16Proj's (w4a16Proj/W4A16ProjPlugin.{h,cpp}); this file
 * holds the call into metrale_w4a16_moe_proj.
 */
#include "../w4a16Proj/W4A16ProjPlugin.h"
#include "GroupedProjectionPlugin.h"

namespace metrale
{
namespace plugin
{

template <>
size_t GroupedProjPlugin<W4A16Format>::workspaceSize(int64_t m, int32_t xDType) const
{
    return metrale_w4a16_moe_workspace_size(m, mRouting.topK, mRouting.numExperts, mAttrs.n, mAttrs.k, xDType);
}

template <>
cudaError_t GroupedProjPlugin<W4A16Format>::launchKernel(InputTensors const& in, LaunchArgs const& run) const
{
    return metrale_w4a16_moe_proj(run.x, run.xDType, run.topkIds, run.topkWeights, in.required<int8_t>("weight"),
        in.required("weight_scale"), in.optional<int8_t>("zero_point", mFormat.hasZeroPoint),
        in.optional<float>("bias", mAttrs.hasBias), run.y, run.m, mRouting.topK, mRouting.numExperts, mAttrs.n,
        mAttrs.k, mFormat.groupSize, mRouting.combine, run.workspace, run.workspaceBytes, run.stream);
}

} // namespace plugin
} // namespace metrale
