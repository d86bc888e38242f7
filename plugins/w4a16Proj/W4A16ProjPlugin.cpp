/*
 * W4A16Proj plugin: field parsing and validation, input layout, and the call into
 * metrale_w4a16_proj (see W4A16ProjPlugin.h).
 */
#include "W4A16ProjPlugin.h"

namespace metrale
{
namespace plugin
{

using nvinfer1::DataType;
using nvinfer1::PluginFieldType;

W4A16ProjPlugin::W4A16ProjPlugin(
    std::string layerName, CommonAttributes attrs, int32_t groupSize, int32_t hasZeroPoint)
    : ProjectionPlugin(std::move(layerName), std::move(attrs))
    , mGroupSize(groupSize)
    , mHasZeroPoint(hasZeroPoint)
{
}

nvinfer1::PluginFieldCollection const* W4A16ProjPlugin::fieldNames() noexcept
{
    static FieldNames const kFIELDS{{"n", PluginFieldType::kINT32}, {"k", PluginFieldType::kINT32},
        {"group_size", PluginFieldType::kINT32}, {"has_zero_point", PluginFieldType::kINT32},
        {"activation_format", PluginFieldType::kCHAR}, {"has_bias", PluginFieldType::kINT32},
        {"family", PluginFieldType::kCHAR}, {"name", PluginFieldType::kCHAR}};
    return kFIELDS.collection();
}

W4A16ProjPlugin* W4A16ProjPlugin::create(std::string const& layerName, nvinfer1::PluginFieldCollection const* fc)
{
    // plugin_version is the node attribute TensorRT's parser finds this creator by (version "2");
    // the parser passes only the fields fieldNames() lists, so it never arrives here.
    FieldReader const reader(
        fc, {"n", "k", "group_size", "has_zero_point", "activation_format", "has_bias", "family", "name"});
    CommonAttributes attrs = parseCommonAttributes(reader, {"bf16"}, "bf16");
    int32_t const groupSize = reader.getInt("group_size");
    METRALE_REQUIRE(groupSize == 32 || groupSize == 64 || groupSize == 128,
        "field 'group_size': expected 32, 64 or 128, found ", groupSize);
    METRALE_REQUIRE(attrs.k % 2 == 0, "field 'k': K=", attrs.k, " is odd (two 4-bit codes a byte)");
    int32_t const hasZeroPoint = parseFlag(reader, "has_zero_point") ? 1 : 0;
    return new W4A16ProjPlugin(layerName, std::move(attrs), groupSize, hasZeroPoint);
}

nvinfer1::IPluginV3* W4A16ProjPlugin::clone() noexcept
{
    METRALE_GUARDED("clone", nullptr, { return new W4A16ProjPlugin(*this); })
}

std::vector<InputSpec> W4A16ProjPlugin::weightInputs() const
{
    int64_t const n = mAttrs.n;
    int64_t const groups = (mAttrs.k + mGroupSize - 1) / mGroupSize;  // a partial last group
    std::vector<InputSpec> specs{{"weight", DataType::kINT8, {n, mAttrs.k / 2}},
        {"weight_scale", DataType::kBF16, {n, groups}}};
    if (mHasZeroPoint)
    {
        specs.push_back({"zero_point", DataType::kINT8, {n, groups}});
    }
    if (mAttrs.hasBias)
    {
        specs.push_back({"bias", DataType::kFLOAT, {n}});
    }
    return specs;
}

size_t W4A16ProjPlugin::workspaceSize(int64_t m) const
{
    return metrale_w4a16_workspace_size(m, mAttrs.n, mAttrs.k, mGroupSize);
}

cudaError_t W4A16ProjPlugin::launch(int32_t xDType, void const* const* inputs, void* y, int64_t m, void* workspace,
    size_t workspaceBytes, cudaStream_t stream) const
{
    int32_t const zp = zeroPointIdx();
    int32_t const bias = biasIdx();
    return metrale_w4a16_proj(inputs[kX_IDX], xDType, static_cast<int8_t const*>(inputs[kWEIGHT_IDX]),
        inputs[kWEIGHT_SCALE_IDX],
        zp < 0 ? nullptr : static_cast<int8_t const*>(inputs[zp]),
        bias < 0 ? nullptr : static_cast<float const*>(inputs[bias]), y, m, mAttrs.n, mAttrs.k, mGroupSize,
        workspace, workspaceBytes, stream);
}

void W4A16ProjPlugin::writeFields(FieldWriter& writer) const
{
    writer.addInt("n", &mAttrs.n);
    writer.addInt("k", &mAttrs.k);
    writer.addInt("group_size", &mGroupSize);
    writer.addInt("has_zero_point", &mHasZeroPoint);
    writer.addString("activation_format", mAttrs.activationFormatName);
    writer.addInt("has_bias", &mAttrs.hasBias);
    writer.addString("family", mAttrs.family);
    writer.addString("name", mAttrs.name);
}

std::string W4A16ProjPlugin::describeOpAttributes() const
{
    return cat("group_size=", mGroupSize, ";has_zero_point=", mHasZeroPoint);
}

} // namespace plugin
} // namespace metrale
