/*
 * W8A8MoEProj as a TensorRT IPluginV3 (namespace "metrale", version "1"): the grouped-expert op of
 * W8A8Proj (docs/ops.md, "Grouped-expert ops"), from the same W8A8Format.
 *
 * Inputs: x, topk_ids kINT32 [M, top_k], weight kINT8 [E, N, K] (e4m3fn bit patterns),
 * weight_scale kFLOAT [E, N] (channel) or [E, ceil(N/128), ceil(K/128)] (block128), bias kFLOAT
 * [E, N] (has_bias=1), topk_weights (combine=1). Fields: the ONNX attributes n, k, num_experts,
 * top_k, combine, weight_scale_granularity, activation_format, activation_scale_granularity,
 * has_bias, family, name.
 */
#ifndef METRALE_W8A8_MOE_PROJ_PLUGIN_H
#define METRALE_W8A8_MOE_PROJ_PLUGIN_H

#include "../w8a8Proj/W8A8ProjPlugin.h"
#include "GroupedProjectionPlugin.h"

namespace metrale
{
namespace plugin
{

using W8A8MoEProjPlugin = GroupedProjPlugin<W8A8Format>;
using W8A8MoEProjPluginCreator = ProjectionPluginCreator<W8A8MoEProjPlugin>;

} // namespace plugin
} // namespace metrale

#endif // METRALE_W8A8_MOE_PROJ_PLUGIN_H
