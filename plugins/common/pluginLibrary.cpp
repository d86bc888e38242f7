/*
 * The entry points of libmetrale_plugins.so for TensorRT's dynamic plugin loading
 * (IPluginRegistry::loadLibrary, `trtexec --dynamicPlugins`, Polygraphy `--plugins` / LoadPlugins).
 *
 * Invariants:
 * - The library registers nothing at load time and does not link against libnvinfer: TensorRT
 *   finds the creators through getCreators() and gives a logger through setLoggerFinder().
 * - The creators live as long as the library; getCreators() returns the same array every call.
 */
#include "../attention/AttentionPlugin.h"
#include "../floatProj/FloatProjPlugin.h"
#include "../gatedDeltaNet/GatedDeltaNetPlugin.h"
#include "../moeProj/GroupedProjectionPlugin.h"
#include "../rmsNorm/RMSNormPlugin.h"
#include "../router/RouterPlugin.h"
#include "../w4a16Proj/W4A16ProjPlugin.h"
#include "../w4a4Proj/W4A4ProjPlugin.h"
#include "../w8a8Proj/W8A8ProjPlugin.h"

namespace metrale
{
namespace plugin
{
// What the formats' .cpp files define as explicit specializations, declared before the creators
// below instantiate the plugins (the non-projection ops declare theirs in their headers).
METRALE_PROJ_FORMAT_SPECIALIZATIONS(W4A16Format);
METRALE_PROJ_FORMAT_SPECIALIZATIONS(W8A8Format);
METRALE_PROJ_FORMAT_SPECIALIZATIONS(W4A4Format);
METRALE_PROJ_FORMAT_SPECIALIZATIONS(FloatFormat);
METRALE_LAUNCH_SPECIALIZATIONS(DenseProjPlugin, W4A16Format);
METRALE_LAUNCH_SPECIALIZATIONS(DenseProjPlugin, W8A8Format);
METRALE_LAUNCH_SPECIALIZATIONS(DenseProjPlugin, W4A4Format);
METRALE_LAUNCH_SPECIALIZATIONS(DenseProjPlugin, FloatFormat);
METRALE_LAUNCH_SPECIALIZATIONS(GroupedProjPlugin, W4A16Format);
METRALE_LAUNCH_SPECIALIZATIONS(GroupedProjPlugin, W8A8Format);
METRALE_LAUNCH_SPECIALIZATIONS(GroupedProjPlugin, W4A4Format);
} // namespace plugin
} // namespace metrale

#define METRALE_PLUGIN_API extern "C" __attribute__((visibility("default")))

METRALE_PLUGIN_API void setLoggerFinder(nvinfer1::ILoggerFinder* finder)
{
    metrale::plugin::setPluginLoggerFinder(finder);
}

METRALE_PLUGIN_API nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators)
{
    using namespace metrale::plugin;
    // Each op is its format's dense or grouped plugin; the creators parse the fields that plugin lists.
    static ProjectionPluginCreator<DenseProjPlugin<W4A16Format>> sW4A16Creator;
    static ProjectionPluginCreator<DenseProjPlugin<W8A8Format>> sW8A8Creator;
    static ProjectionPluginCreator<DenseProjPlugin<W4A4Format>> sW4A4Creator;
    static ProjectionPluginCreator<DenseProjPlugin<FloatFormat>> sFloatCreator;
    static RetiredPluginCreator<DenseProjPlugin<W4A16Format>> sW4A16V1Creator;  // refuses version-1 graphs
    // W8A8Proj version 3 multiplies on the FP8 tensor core: versions 1 and 2 (exact f16 products) are refused.
    static RetiredPluginCreator<DenseProjPlugin<W8A8Format>, 0> sW8A8V1Creator;
    static RetiredPluginCreator<DenseProjPlugin<W8A8Format>, 1> sW8A8V2Creator;
    // The grouped-expert ops (plugins/moeProj/).
    static ProjectionPluginCreator<GroupedProjPlugin<W4A16Format>> sW4A16MoECreator;
    static ProjectionPluginCreator<GroupedProjPlugin<W8A8Format>> sW8A8MoECreator;
    static ProjectionPluginCreator<GroupedProjPlugin<W4A4Format>> sW4A4MoECreator;
    static RetiredPluginCreator<GroupedProjPlugin<W4A16Format>> sW4A16MoEV1Creator;  // refuses version-1 graphs
    static CompatiblePluginCreator<GroupedProjPlugin<W8A8Format>> sW8A8MoEV1Creator;  // version-1 nodes
    // The non-projection ops (common/opPlugin.h).
    static ProjectionPluginCreator<OpPluginOf<RMSNormOp>> sRMSNormCreator;
    static ProjectionPluginCreator<OpPluginOf<RouterOp>> sRouterCreator;
    static ProjectionPluginCreator<OpPluginOf<AttentionOp>> sAttentionCreator;
    static ProjectionPluginCreator<OpPluginOf<CausalConv1dOp>> sCausalConv1dCreator;
    static ProjectionPluginCreator<OpPluginOf<GatedDeltaRuleOp>> sGatedDeltaRuleCreator;
    static nvinfer1::IPluginCreatorInterface* const kCREATORS[] = {&sW4A16Creator, &sW8A8Creator, &sW4A4Creator, &sFloatCreator,
        &sW4A16V1Creator, &sW8A8V1Creator, &sW8A8V2Creator, &sW4A16MoECreator, &sW8A8MoECreator, &sW4A4MoECreator,
        &sW4A16MoEV1Creator, &sW8A8MoEV1Creator, &sRMSNormCreator, &sRouterCreator, &sAttentionCreator,
        &sCausalConv1dCreator, &sGatedDeltaRuleCreator};
    nbCreators = static_cast<int32_t>(sizeof(kCREATORS) / sizeof(kCREATORS[0]));
    return kCREATORS;
}
