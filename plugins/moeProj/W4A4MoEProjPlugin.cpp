/*
 * W4A4MoEProj plugin: the call into metrale_w4a4_moe_proj (see W4A4MoEProjPlugin.h; its fields and
 * inputs are W4A4Proj's, w4a4Proj/W4A4ProjPlugin.cpp).
 */
#include "W4A4MoEProjPlugin.h"

namespace metrale
{
namespace plugin
{

size_t W4A4Format::groupedWorkspaceSize(
    CommonAttributes const& attrs, RoutingAttributes const& routing, int64_t m, int32_t xDType) const
{
    return metrale_w4a4_moe_workspace_size(
        m, routing.topK, routing.numExperts, attrs.n, attrs.k, xDType, attrs.activationFormat);
}

cudaError_t W4A4Format::groupedLaunch(
    CommonAttributes const& attrs, RoutingAttributes const& routing, InputTensors const& in, LaunchArgs const& run) const
{
    return metrale_w4a4_moe_proj(run.x, run.xDType, run.topkIds, run.topkWeights, in.required<int8_t>("weight"),
        in.required<int8_t>("weight_scale"), in.required<float>("weight_global_scale"),
        in.optional<float>("input_scale", hasInputScale), attrs.activationFormat,
        in.optional<float>("bias", attrs.hasBias), run.y, run.m, routing.topK, routing.numExperts, attrs.n, attrs.k,
        routing.combine, run.workspace, run.workspaceBytes, run.stream);
}

} // namespace plugin
} // namespace metrale
