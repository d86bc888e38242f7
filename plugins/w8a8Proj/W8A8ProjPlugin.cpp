/*
 * W8A8Proj plugin: field parsing and validation, input layout, and the call into
 * metrale_w8a8_proj (see W8A8ProjPlugin.h).
 */
#include "W8A8ProjPlugin.h"

namespace metrale
{
namespace plugin
{

using nvinfer1::DataType;
using nvinfer1::PluginFieldType;

namespace
{
int32_t parseWeightScaleGranularity(std::string const& value)
{
    if (value == "channel")
    {
        return kMETRALE_WSCALE_CHANNEL;
    }
    if (value == "block128")
    {
        return kMETRALE_WSCALE_BLOCK128;
    }
    throw PluginError(cat(
        "field 'weight_scale_granularity': expected channel or block128, found '", value, "'"));
}

int32_t parseActivationScaleGranularity(std::string const& value)
{
    if (value == "row")
    {
        return kMETRALE_ASCALE_ROW;
    }
    if (value == "row_block128")
    {
        return kMETRALE_ASCALE_ROW_BLOCK128;
    }
    throw PluginError(cat(
        "field 'activation_scale_granularity': expected row or row_block128, found '", value, "'"));
}
} // namespace

W8A8ProjPlugin::W8A8ProjPlugin(std::string layerName, CommonAttributes attrs, std::string weightScaleGranularity,
    std::string activationScaleGranularity)
    : ProjectionPlugin(std::move(layerName), std::move(attrs))
    , mWeightScaleGranularityName(std::move(weightScaleGranularity))
    , mActivationScaleGranularityName(std::move(activationScaleGranularity))
    , mWeightScaleGranularity(parseWeightScaleGranularity(mWeightScaleGranularityName))
    , mActivationScaleGranularity(parseActivationScaleGranularity(mActivationScaleGranularityName))
{
}

nvinfer1::PluginFieldCollection const* W8A8ProjPlugin::fieldNames() noexcept
{
    static FieldNames const kFIELDS{{"n", PluginFieldType::kINT32}, {"k", PluginFieldType::kINT32},
        {"weight_scale_granularity", PluginFieldType::kCHAR}, {"activation_format", PluginFieldType::kCHAR},
        {"activation_scale_granularity", PluginFieldType::kCHAR}, {"has_bias", PluginFieldType::kINT32},
        {"family", PluginFieldType::kCHAR}, {"name", PluginFieldType::kCHAR}};
    return kFIELDS.collection();
}

W8A8ProjPlugin* W8A8ProjPlugin::create(std::string const& layerName, nvinfer1::PluginFieldCollection const* fc)
{
    FieldReader const reader(fc,
        {"n", "k", "weight_scale_granularity", "activation_format", "activation_scale_granularity", "has_bias",
            "family", "name"});
    CommonAttributes attrs = parseCommonAttributes(reader, {"bf16", "fp8"}, "fp8");
    std::string weightScale = reader.getString("weight_scale_granularity", "channel");
    std::string activationScale = reader.getString("activation_scale_granularity", "row");
    return new W8A8ProjPlugin(layerName, std::move(attrs), std::move(weightScale), std::move(activationScale));
}

nvinfer1::IPluginV3* W8A8ProjPlugin::clone() noexcept
{
    METRALE_GUARDED("clone", nullptr, { return new W8A8ProjPlugin(*this); })
}

std::vector<InputSpec> W8A8ProjPlugin::weightInputs() const
{
    int64_t const n = mAttrs.n;
    int64_t const k = mAttrs.k;
    std::vector<int64_t> scaleDims{n};
    if (mWeightScaleGranularity == kMETRALE_WSCALE_BLOCK128)
    {
        scaleDims = {(n + kBLOCK - 1) / kBLOCK, (k + kBLOCK - 1) / kBLOCK};
    }
    std::vector<InputSpec> specs{{"weight", DataType::kINT8, {n, k}}, {"weight_scale", DataType::kFLOAT, scaleDims}};
    if (mAttrs.hasBias)
    {
        specs.push_back({"bias", DataType::kFLOAT, {n}});
    }
    return specs;
}

size_t W8A8ProjPlugin::workspaceSize(int64_t m) const
{
    return metrale_w8a8_workspace_size(m, mAttrs.n, mAttrs.k, mAttrs.activationFormat, mActivationScaleGranularity);
}

cudaError_t W8A8ProjPlugin::launch(int32_t xDType, void const* const* inputs, void* y, int64_t m, void* workspace,
    size_t workspaceBytes, cudaStream_t stream) const
{
    return metrale_w8a8_proj(inputs[kX_IDX], xDType, static_cast<int8_t const*>(inputs[kWEIGHT_IDX]),
        static_cast<float const*>(inputs[kWEIGHT_SCALE_IDX]), mWeightScaleGranularity, mAttrs.activationFormat,
        mActivationScaleGranularity, mAttrs.hasBias ? static_cast<float const*>(inputs[kBIAS_IDX]) : nullptr, y, m,
        mAttrs.n, mAttrs.k, workspace, workspaceBytes, stream);
}

void W8A8ProjPlugin::writeFields(FieldWriter& writer) const
{
    writer.addInt("n", &mAttrs.n);
    writer.addInt("k", &mAttrs.k);
    writer.addString("weight_scale_granularity", mWeightScaleGranularityName);
    writer.addString("activation_format", mAttrs.activationFormatName);
    writer.addString("activation_scale_granularity", mActivationScaleGranularityName);
    writer.addInt("has_bias", &mAttrs.hasBias);
    writer.addString("family", mAttrs.family);
    writer.addString("name", mAttrs.name);
}

std::string W8A8ProjPlugin::describeOpAttributes() const
{
    return cat("weight_scale_granularity=", mWeightScaleGranularityName,
        ";activation_scale_granularity=", mActivationScaleGranularityName);
}

} // namespace plugin
} // namespace metrale
