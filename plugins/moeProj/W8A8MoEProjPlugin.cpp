/*
 * W8A8MoEProj plugin: the call into metrale_w8a8_moe_proj (see W8A8MoEProjPlugin.h; its fields and
 * inputs are W8A8Proj's, w8a8Proj/W8A8ProjPlugin.cpp).
 */
#include "W8A8MoEProjPlugin.h"

namespace metrale
{
namespace plugin
{

size_t W8A8Format::groupedWorkspaceSize(
    CommonAttributes const& attrs, RoutingAttributes const& routing, int64_t m, int32_t xDType) const
{
    return metrale_w8a8_moe_workspace_size(m, routing.topK, routing.numExperts, attrs.n, attrs.k, xDType,
        attrs.activationFormat, activationScaleGranularity);
}

cudaError_t W8A8Format::groupedLaunch(
    CommonAttributes const& attrs, RoutingAttributes const& routing, InputTensors const& in, LaunchArgs const& run) const
{
    return metrale_w8a8_moe_proj(run.x, run.xDType, run.topkIds, run.topkWeights, in.required<int8_t>("weight"),
        in.required<float>("weight_scale"), weightScaleGranularity, attrs.activationFormat,
        activationScaleGranularity, in.optional<float>("bias", attrs.hasBias), run.y, run.m, routing.topK,
        routing.numExperts, attrs.n, attrs.k, routing.combine, run.workspace, run.workspaceBytes, run.stream);
}

} // namespace plugin
} // namespace metrale
