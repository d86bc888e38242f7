/*
 * W4A4MoEProj as a TensorRT IPluginV3 (namespace "metrale", version "1"): the grouped-expert op of
 * W4A4Proj (docs/ops.md, "Grouped-expert ops"), from the same W4A4Format.
 *
 * Inputs: x, topk_ids kINT32 [M, top_k], weight kINT8 [E, N, K/2] (e2m1 codes), weight_scale kINT8
 * [E, N, K/16] (e4m3fn), weight_global_scale kFLOAT [E], input_scale kFLOAT [E]
 * (has_input_scale=1), bias kFLOAT [E, N] (has_bias=1), topk_weights (combine=1). Fields: the ONNX
 * attributes n, k, num_experts, top_k, combine, activation_format, has_input_scale, has_bias,
 * family, name.
 */
#ifndef METRALE_W4A4_MOE_PROJ_PLUGIN_H
#define METRALE_W4A4_MOE_PROJ_PLUGIN_H

#include "../w4a4Proj/W4A4ProjPlugin.h"
#include "GroupedProjectionPlugin.h"

namespace metrale
{
namespace plugin
{

using W4A4MoEProjPlugin = GroupedProjPlugin<W4A4Format>;
using W4A4MoEProjPluginCreator = ProjectionPluginCreator<W4A4MoEProjPlugin>;

} // namespace plugin
} // namespace metrale

#endif // METRALE_W4A4_MOE_PROJ_PLUGIN_H
