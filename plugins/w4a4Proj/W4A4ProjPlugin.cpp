/*
 * W4A4Proj plugin: field parsing and validation, input layout, and the call into
 * metrale_w4a4_proj (see W4A4ProjPlugin.h).
 */
#include "W4A4ProjPlugin.h"

namespace metrale
{
namespace plugin
{

using nvinfer1::DataType;
using nvinfer1::PluginFieldType;

W4A4ProjPlugin::W4A4ProjPlugin(std::string layerName, CommonAttributes attrs, int32_t hasInputScale)
    : ProjectionPlugin(std::move(layerName), std::move(attrs))
    , mHasInputScale(hasInputScale)
{
}

nvinfer1::PluginFieldCollection const* W4A4ProjPlugin::fieldNames() noexcept
{
    static FieldNames const kFIELDS{{"n", PluginFieldType::kINT32}, {"k", PluginFieldType::kINT32},
        {"activation_format", PluginFieldType::kCHAR}, {"has_input_scale", PluginFieldType::kINT32},
        {"has_bias", PluginFieldType::kINT32}, {"family", PluginFieldType::kCHAR}, {"name", PluginFieldType::kCHAR}};
    return kFIELDS.collection();
}

W4A4ProjPlugin* W4A4ProjPlugin::create(std::string const& layerName, nvinfer1::PluginFieldCollection const* fc)
{
    FieldReader const reader(
        fc, {"n", "k", "activation_format", "has_input_scale", "has_bias", "family", "name"});
    CommonAttributes attrs = parseCommonAttributes(reader, {"bf16", "nvfp4"}, "nvfp4");
    METRALE_REQUIRE(attrs.k % kBLOCK == 0, "field 'k': NVFP4 needs K to be a multiple of ", kBLOCK,
        ", found K=", attrs.k);
    int32_t const hasInputScale = parseFlag(reader, "has_input_scale") ? 1 : 0;
    return new W4A4ProjPlugin(layerName, std::move(attrs), hasInputScale);
}

nvinfer1::IPluginV3* W4A4ProjPlugin::clone() noexcept
{
    METRALE_GUARDED("clone", nullptr, { return new W4A4ProjPlugin(*this); })
}

std::vector<InputSpec> W4A4ProjPlugin::weightInputs() const
{
    int64_t const n = mAttrs.n;
    int64_t const k = mAttrs.k;
    std::vector<InputSpec> specs{{"weight", DataType::kINT8, {n, k / 2}},
        {"weight_scale", DataType::kINT8, {n, k / kBLOCK}}, {"weight_global_scale", DataType::kFLOAT, {1}}};
    if (mHasInputScale)
    {
        specs.push_back({"input_scale", DataType::kFLOAT, {1}});
    }
    if (mAttrs.hasBias)
    {
        specs.push_back({"bias", DataType::kFLOAT, {n}});
    }
    return specs;
}

size_t W4A4ProjPlugin::workspaceSize(int64_t m) const
{
    return metrale_w4a4_workspace_size(m, mAttrs.n, mAttrs.k, mAttrs.activationFormat);
}

cudaError_t W4A4ProjPlugin::launch(int32_t xDType, void const* const* inputs, void* y, int64_t m, void* workspace,
    size_t workspaceBytes, cudaStream_t stream) const
{
    int32_t const inputScale = inputScaleIdx();
    int32_t const bias = biasIdx();
    return metrale_w4a4_proj(inputs[kX_IDX], xDType, static_cast<int8_t const*>(inputs[kWEIGHT_IDX]),
        static_cast<int8_t const*>(inputs[kWEIGHT_SCALE_IDX]),
        static_cast<float const*>(inputs[kWEIGHT_GLOBAL_SCALE_IDX]),
        inputScale < 0 ? nullptr : static_cast<float const*>(inputs[inputScale]), mAttrs.activationFormat,
        bias < 0 ? nullptr : static_cast<float const*>(inputs[bias]), y, m, mAttrs.n, mAttrs.k, workspace,
        workspaceBytes, stream);
}

void W4A4ProjPlugin::writeFields(FieldWriter& writer) const
{
    writer.addInt("n", &mAttrs.n);
    writer.addInt("k", &mAttrs.k);
    writer.addString("activation_format", mAttrs.activationFormatName);
    writer.addInt("has_input_scale", &mHasInputScale);
    writer.addInt("has_bias", &mAttrs.hasBias);
    writer.addString("family", mAttrs.family);
    writer.addString("name", mAttrs.name);
}

std::string W4A4ProjPlugin::describeOpAttributes() const
{
    return cat("has_input_scale=", mHasInputScale);
}

} // namespace plugin
} // namespace metrale
