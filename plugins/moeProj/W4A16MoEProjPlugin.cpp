/*
 * W4A16MoEProj plugin: field parsing and validation, input layout, and the call into
 * metrale_w4a16_moe_proj (see W4A16MoEProjPlugin.h).
 */
#include "W4A16MoEProjPlugin.h"

namespace metrale
{
namespace plugin
{

using nvinfer1::DataType;
using nvinfer1::PluginFieldType;

W4A16MoEProjPlugin::W4A16MoEProjPlugin(std::string layerName, CommonAttributes attrs, RoutingAttributes routing,
    int32_t groupSize, int32_t hasZeroPoint)
    : GroupedProjectionPlugin(std::move(layerName), std::move(attrs), routing)
    , mGroupSize(groupSize)
    , mHasZeroPoint(hasZeroPoint)
{
}

nvinfer1::PluginFieldCollection const* W4A16MoEProjPlugin::fieldNames() noexcept
{
    static FieldNames const kFIELDS{{"n", PluginFieldType::kINT32}, {"k", PluginFieldType::kINT32},
        {"num_experts", PluginFieldType::kINT32}, {"top_k", PluginFieldType::kINT32},
        {"combine", PluginFieldType::kINT32}, {"group_size", PluginFieldType::kINT32},
        {"has_zero_point", PluginFieldType::kINT32}, {"activation_format", PluginFieldType::kCHAR},
        {"has_bias", PluginFieldType::kINT32}, {"family", PluginFieldType::kCHAR}, {"name", PluginFieldType::kCHAR}};
    return kFIELDS.collection();
}

W4A16MoEProjPlugin* W4A16MoEProjPlugin::create(std::string const& layerName, nvinfer1::PluginFieldCollection const* fc)
{
    FieldReader const reader(fc,
        {"n", "k", "num_experts", "top_k", "combine", "group_size", "has_zero_point", "activation_format", "has_bias",
            "family", "name"});
    CommonAttributes attrs = parseCommonAttributes(reader, {"bf16"}, "bf16");
    RoutingAttributes const routing = parseRoutingAttributes(reader);
    int32_t const groupSize = reader.getInt("group_size");
    METRALE_REQUIRE(groupSize == 32 || groupSize == 64 || groupSize == 128,
        "field 'group_size': expected 32, 64 or 128, found ", groupSize);
    METRALE_REQUIRE(attrs.k % 2 == 0, "field 'k': K=", attrs.k, " is odd (two 4-bit codes a byte)");
    int32_t const hasZeroPoint = parseFlag(reader, "has_zero_point") ? 1 : 0;
    return new W4A16MoEProjPlugin(layerName, std::move(attrs), routing, groupSize, hasZeroPoint);
}

nvinfer1::IPluginV3* W4A16MoEProjPlugin::clone() noexcept
{
    METRALE_GUARDED("clone", nullptr, { return new W4A16MoEProjPlugin(*this); })
}

std::vector<InputSpec> W4A16MoEProjPlugin::expertInputs() const
{
    int64_t const e = mRouting.numExperts;
    int64_t const n = mAttrs.n;
    int64_t const groups = (mAttrs.k + mGroupSize - 1) / mGroupSize;
    std::vector<InputSpec> specs{{"weight", DataType::kINT8, {e, n, mAttrs.k / 2}},
        {"weight_scale", DataType::kBF16, {e, n, groups}}};
    if (mHasZeroPoint)
    {
        specs.push_back({"zero_point", DataType::kINT8, {e, n, groups}});
    }
    if (mAttrs.hasBias)
    {
        specs.push_back({"bias", DataType::kFLOAT, {e, n}});
    }
    return specs;
}

size_t W4A16MoEProjPlugin::workspaceSize(int64_t m, int32_t xDType) const
{
    return metrale_w4a16_moe_workspace_size(m, mRouting.topK, mRouting.numExperts, mAttrs.n, mAttrs.k, xDType);
}

cudaError_t W4A16MoEProjPlugin::launch(int32_t xDType, void const* const* inputs, void const* topkWeights, void* y,
    int64_t m, void* workspace, size_t workspaceBytes, cudaStream_t stream) const
{
    int32_t const zp = zeroPointIdx();
    int32_t const bias = biasIdx();
    return metrale_w4a16_moe_proj(inputs[kGROUPED_X_IDX], xDType,
        static_cast<int32_t const*>(inputs[kGROUPED_IDS_IDX]), topkWeights,
        static_cast<int8_t const*>(inputs[kWEIGHT_IDX]), inputs[kWEIGHT_SCALE_IDX],
        zp < 0 ? nullptr : static_cast<int8_t const*>(inputs[zp]),
        bias < 0 ? nullptr : static_cast<float const*>(inputs[bias]), y, m, mRouting.topK, mRouting.numExperts,
        mAttrs.n, mAttrs.k, mGroupSize, mRouting.combine, workspace, workspaceBytes, stream);
}

void W4A16MoEProjPlugin::writeFields(FieldWriter& writer) const
{
    writer.addInt("n", &mAttrs.n);
    writer.addInt("k", &mAttrs.k);
    writer.addInt("num_experts", &mRouting.numExperts);
    writer.addInt("top_k", &mRouting.topK);
    writer.addInt("combine", &mRouting.combine);
    writer.addInt("group_size", &mGroupSize);
    writer.addInt("has_zero_point", &mHasZeroPoint);
    writer.addString("activation_format", mAttrs.activationFormatName);
    writer.addInt("has_bias", &mAttrs.hasBias);
    writer.addString("family", mAttrs.family);
    writer.addString("name", mAttrs.name);
}

std::string W4A16MoEProjPlugin::describeOpAttributes() const
{
    return cat("group_size=", mGroupSize, ";has_zero_point=", mHasZeroPoint);
}

} // namespace plugin
} // namespace metrale
