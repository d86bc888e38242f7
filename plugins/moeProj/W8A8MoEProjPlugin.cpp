/*
 * W8A8MoEProj plugin: field parsing and validation, input layout, and the call into
 * metrale_w8a8_moe_proj (see W8A8MoEProjPlugin.h).
 */
#include "W8A8MoEProjPlugin.h"

namespace metrale
{
namespace plugin
{

using nvinfer1::DataType;
using nvinfer1::PluginFieldType;

namespace
{
int32_t moeWeightScaleGranularity(std::string const& value)
{
    if (value == "channel")
    {
        return kMETRALE_WSCALE_CHANNEL;
    }
    if (value == "block128")
    {
        return kMETRALE_WSCALE_BLOCK128;
    }
    throw PluginError(cat("field 'weight_scale_granularity': expected channel or block128, found '", value, "'"));
}

int32_t moeActivationScaleGranularity(std::string const& value)
{
    if (value == "row")
    {
        return kMETRALE_ASCALE_ROW;
    }
    if (value == "row_block128")
    {
        return kMETRALE_ASCALE_ROW_BLOCK128;
    }
    throw PluginError(cat("field 'activation_scale_granularity': expected row or row_block128, found '", value, "'"));
}
} // namespace

W8A8MoEProjPlugin::W8A8MoEProjPlugin(std::string layerName, CommonAttributes attrs, RoutingAttributes routing,
    std::string weightScaleGranularity, std::string activationScaleGranularity)
    : GroupedProjectionPlugin(std::move(layerName), std::move(attrs), routing)
    , mWeightScaleGranularityName(std::move(weightScaleGranularity))
    , mActivationScaleGranularityName(std::move(activationScaleGranularity))
    , mWeightScaleGranularity(moeWeightScaleGranularity(mWeightScaleGranularityName))
    , mActivationScaleGranularity(moeActivationScaleGranularity(mActivationScaleGranularityName))
{
}

nvinfer1::PluginFieldCollection const* W8A8MoEProjPlugin::fieldNames() noexcept
{
    static FieldNames const kFIELDS{{"n", PluginFieldType::kINT32}, {"k", PluginFieldType::kINT32},
        {"num_experts", PluginFieldType::kINT32}, {"top_k", PluginFieldType::kINT32},
        {"combine", PluginFieldType::kINT32}, {"weight_scale_granularity", PluginFieldType::kCHAR},
        {"activation_format", PluginFieldType::kCHAR}, {"activation_scale_granularity", PluginFieldType::kCHAR},
        {"has_bias", PluginFieldType::kINT32}, {"family", PluginFieldType::kCHAR}, {"name", PluginFieldType::kCHAR}};
    return kFIELDS.collection();
}

W8A8MoEProjPlugin* W8A8MoEProjPlugin::create(std::string const& layerName, nvinfer1::PluginFieldCollection const* fc)
{
    FieldReader const reader(fc,
        {"n", "k", "num_experts", "top_k", "combine", "weight_scale_granularity", "activation_format",
            "activation_scale_granularity", "has_bias", "family", "name"});
    CommonAttributes attrs = parseCommonAttributes(reader, {"bf16", "fp8"}, "fp8");
    RoutingAttributes const routing = parseRoutingAttributes(reader);
    std::string weightScale = reader.getString("weight_scale_granularity", "channel");
    std::string activationScale = reader.getString("activation_scale_granularity", "row");
    return new W8A8MoEProjPlugin(
        layerName, std::move(attrs), routing, std::move(weightScale), std::move(activationScale));
}

nvinfer1::IPluginV3* W8A8MoEProjPlugin::clone() noexcept
{
    METRALE_GUARDED("clone", nullptr, { return new W8A8MoEProjPlugin(*this); })
}

std::vector<InputSpec> W8A8MoEProjPlugin::expertInputs() const
{
    int64_t const e = mRouting.numExperts;
    int64_t const n = mAttrs.n;
    int64_t const k = mAttrs.k;
    std::vector<int64_t> scaleDims{e, n};
    if (mWeightScaleGranularity == kMETRALE_WSCALE_BLOCK128)
    {
        scaleDims = {e, (n + kBLOCK - 1) / kBLOCK, (k + kBLOCK - 1) / kBLOCK};
    }
    std::vector<InputSpec> specs{
        {"weight", DataType::kINT8, {e, n, k}}, {"weight_scale", DataType::kFLOAT, scaleDims}};
    if (mAttrs.hasBias)
    {
        specs.push_back({"bias", DataType::kFLOAT, {e, n}});
    }
    return specs;
}

size_t W8A8MoEProjPlugin::workspaceSize(int64_t m, int32_t xDType) const
{
    return metrale_w8a8_moe_workspace_size(m, mRouting.topK, mRouting.numExperts, mAttrs.n, mAttrs.k, xDType,
        mAttrs.activationFormat, mActivationScaleGranularity);
}

cudaError_t W8A8MoEProjPlugin::launch(int32_t xDType, void const* const* inputs, void const* topkWeights, void* y,
    int64_t m, void* workspace, size_t workspaceBytes, cudaStream_t stream) const
{
    return metrale_w8a8_moe_proj(inputs[kGROUPED_X_IDX], xDType, static_cast<int32_t const*>(inputs[kGROUPED_IDS_IDX]),
        topkWeights, static_cast<int8_t const*>(inputs[kWEIGHT_IDX]),
        static_cast<float const*>(inputs[kWEIGHT_SCALE_IDX]), mWeightScaleGranularity, mAttrs.activationFormat,
        mActivationScaleGranularity, mAttrs.hasBias ? static_cast<float const*>(inputs[kBIAS_IDX]) : nullptr, y, m,
        mRouting.topK, mRouting.numExperts, mAttrs.n, mAttrs.k, mRouting.combine, workspace, workspaceBytes, stream);
}

void W8A8MoEProjPlugin::writeFields(FieldWriter& writer) const
{
    writer.addInt("n", &mAttrs.n);
    writer.addInt("k", &mAttrs.k);
    writer.addInt("num_experts", &mRouting.numExperts);
    writer.addInt("top_k", &mRouting.topK);
    writer.addInt("combine", &mRouting.combine);
    writer.addString("weight_scale_granularity", mWeightScaleGranularityName);
    writer.addString("activation_format", mAttrs.activationFormatName);
    writer.addString("activation_scale_granularity", mActivationScaleGranularityName);
    writer.addInt("has_bias", &mAttrs.hasBias);
    writer.addString("family", mAttrs.family);
    writer.addString("name", mAttrs.name);
}

std::string W8A8MoEProjPlugin::describeOpAttributes() const
{
    return cat("weight_scale_granularity=", mWeightScaleGranularityName, ";activation_scale_granularity=",
        mActivationScaleGranularityName);
}

} // namespace plugin
} // namespace metrale
