/*
 * W4A16MoEProj plugin: the call into metrale_w4a16_moe_proj (see W4A16MoEProjPlugin.h; its fields
 * and inputs are W4A16Proj's, w4a16Proj/W4A16ProjPlugin.cpp).
 */
#include "W4A16MoEProjPlugin.h"

namespace metrale
{
namespace plugin
{

size_t W4A16Format::groupedWorkspaceSize(
    CommonAttributes const& attrs, RoutingAttributes const& routing, int64_t m, int32_t xDType) const
{
    return metrale_w4a16_moe_workspace_size(m, routing.topK, routing.numExperts, attrs.n, attrs.k, xDType);
}

cudaError_t W4A16Format::groupedLaunch(
    CommonAttributes const& attrs, RoutingAttributes const& routing, InputTensors const& in, LaunchArgs const& run) const
{
    return metrale_w4a16_moe_proj(run.x, run.xDType, run.topkIds, run.topkWeights, in.required<int8_t>("weight"),
        in.required("weight_scale"), in.optional<int8_t>("zero_point", hasZeroPoint),
        in.optional<float>("bias", attrs.hasBias), run.y, run.m, routing.topK, routing.numExperts, attrs.n, attrs.k,
        groupSize, routing.combine, run.workspace, run.workspaceBytes, run.stream);
}

} // namespace plugin
} // namespace metrale
