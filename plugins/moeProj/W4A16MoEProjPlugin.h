/*
 * W4A16MoEProj as a TensorRT IPluginV3 (namespace "metrale", version "2", as W4A16Proj): the
 * grouped-expert op of W4A16Proj (docs/ops.md, "Grouped-expert ops"), from the same W4A16Format.
 *
 * Inputs: x, topk_ids kINT32 [M, top_k], weight kINT8 [E, N, K/2], weight_scale kBF16
 * [E, N, ceil(K/group_size)], zero_point kINT8 [E, N, ceil(K/group_size)] (has_zero_point=1),
 * bias kFLOAT [E, N] (has_bias=1), topk_weights (combine=1). Fields: the ONNX attributes n, k,
 * num_experts, top_k, combine, group_size, has_zero_point, activation_format, has_bias, family,
 * name. Version "1" (float32 group scales) is answered by W4A16MoEProjRetiredCreator.
 */
#ifndef METRALE_W4A16_MOE_PROJ_PLUGIN_H
#define METRALE_W4A16_MOE_PROJ_PLUGIN_H

#include "../w4a16Proj/W4A16ProjPlugin.h"
#include "GroupedProjectionPlugin.h"

namespace metrale
{
namespace plugin
{

using W4A16MoEProjPlugin = GroupedProjPlugin<W4A16Format>;
using W4A16MoEProjPluginCreator = ProjectionPluginCreator<W4A16MoEProjPlugin>;
using W4A16MoEProjRetiredCreator = RetiredPluginCreator<W4A16MoEProjPlugin>;

} // namespace plugin
} // namespace metrale

#endif // METRALE_W4A16_MOE_PROJ_PLUGIN_H
