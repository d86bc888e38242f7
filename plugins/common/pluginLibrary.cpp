/*
 * The entry points of libmetrale_plugins.so for TensorRT's dynamic plugin loading
 * (IPluginRegistry::loadLibrary, `trtexec --dynamicPlugins`, Polygraphy `--plugins` / LoadPlugins).
 *
 * Invariants:
 * - The library registers nothing at load time and does not link against libnvinfer: TensorRT
 *   finds the creators through getCreators() and gives a logger through setLoggerFinder().
 * - The creators live as long as the library; getCreators() returns the same array every call.
 */
#include "../w4a16Proj/W4A16ProjPlugin.h"
#include "../w4a4Proj/W4A4ProjPlugin.h"
#include "../w8a8Proj/W8A8ProjPlugin.h"
#include "../moeProj/W4A16MoEProjPlugin.h"
#include "../moeProj/W4A4MoEProjPlugin.h"
#include "../moeProj/W8A8MoEProjPlugin.h"

#define METRALE_PLUGIN_API extern "C" __attribute__((visibility("default")))

METRALE_PLUGIN_API void setLoggerFinder(nvinfer1::ILoggerFinder* finder)
{
    metrale::plugin::setPluginLoggerFinder(finder);
}

METRALE_PLUGIN_API nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators)
{
    static metrale::plugin::W4A16ProjPluginCreator sW4A16Creator;
    static metrale::plugin::W8A8ProjPluginCreator sW8A8Creator;
    static metrale::plugin::W4A4ProjPluginCreator sW4A4Creator;
    static metrale::plugin::W4A16ProjRetiredCreator sW4A16V1Creator;  // refuses version-1 graphs
    // The grouped-expert ops (plugins/moeProj/).
    static metrale::plugin::W4A16MoEProjPluginCreator sW4A16MoECreator;
    static metrale::plugin::W8A8MoEProjPluginCreator sW8A8MoECreator;
    static metrale::plugin::W4A4MoEProjPluginCreator sW4A4MoECreator;
    static metrale::plugin::W4A16MoEProjRetiredCreator sW4A16MoEV1Creator;  // refuses version-1 graphs
    static nvinfer1::IPluginCreatorInterface* const kCREATORS[] = {&sW4A16Creator, &sW8A8Creator, &sW4A4Creator,
        &sW4A16V1Creator, &sW4A16MoECreator, &sW8A8MoECreator, &sW4A4MoECreator, &sW4A16MoEV1Creator};
    nbCreators = static_cast<int32_t>(sizeof(kCREATORS) / sizeof(kCREATORS[0]));
    return kCREATORS;
}
