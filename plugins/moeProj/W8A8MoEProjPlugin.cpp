/*
 * W8A8MoEProj as a TensorRT IPluginV3 (namespace, version and fields from
 * metrale/contract.h; also registered under the contract's compatible version): the grouped-expert
 * op of W8A8Proj (docs/ops.md, "Grouped-expert ops"), from the same W8A8Format.
 * The grouped kernels have no static activation scale yet: activation_scale_granularity=tensor is
 * refused at launch (cudaErrorNotSupported; the export calibrates dense projections only).
 *
 * Inputs: x, topk_ids kINT32 [M, top_k], weight kINT8 [E, N, K] (e4m3fn bit patterns),
 * weight_scale kFLOAT [E, N] (channel) or [E, ceil(N/128), ceil(K/128)] (block128), bias kFLOAT
 * [E, N] (has_bias=1), topk_weights (combine=1). Fields: the ONNX attributes n, k, num_experts,
 * top_k, combine, weight_scale_granularity, activation_format, activation_scale_granularity,
 * has_bias, family, name.
 *
 * The plugin is GroupedProjPlugin<W8A8Format> (registered in common/pluginLibrary.cpp): its
 * fields, checks and inputs are W8A8Proj's (w8a8Proj/W8A8ProjPlugin.{h,cpp}); this file
 * holds the call into metrale_w8a8_moe_proj.
 */
#include "../w8a8Proj/W8A8ProjPlugin.h"
#include "GroupedProjectionPlugin.h"

namespace metrale
{
namespace plugin
{

template <>
size_t GroupedProjPlugin<W8A8Format>::workspaceSize(int64_t m, int32_t xDType) const
{
    return metrale_w8a8_moe_workspace_size(m, mRouting.topK, mRouting.numExperts, mAttrs.n, mAttrs.k, xDType,
        mAttrs.activationFormat, mFormat.activationScaleGranularity);
}

template <>
cudaError_t GroupedProjPlugin<W8A8Format>::launchKernel(InputTensors const& in, LaunchArgs const& run) const
{
    if (mFormat.staticScale())
    {
        return cudaErrorNotSupported;  // no static-scale grouped kernel (see above)
    }
    return metrale_w8a8_moe_proj(run.x, run.xDType, run.topkIds, run.topkWeights, in.required<int8_t>("weight"),
        in.required<float>("weight_scale"), mFormat.weightScaleGranularity, mAttrs.activationFormat,
        mFormat.activationScaleGranularity, in.optional<float>("bias", mAttrs.hasBias), run.y, run.m, mRouting.topK,
        mRouting.numExperts, mAttrs.n, mAttrs.k, mRouting.combine, run.workspace, run.workspaceBytes, run.stream);
}

} // namespace plugin
} // namespace metrale
