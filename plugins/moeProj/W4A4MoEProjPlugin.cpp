/*
 * W4A4MoEProj plugin: field parsing and validation, input layout, and the call into
 * metrale_w4a4_moe_proj (see W4A4MoEProjPlugin.h).
 */
#include "W4A4MoEProjPlugin.h"

namespace metrale
{
namespace plugin
{

using nvinfer1::DataType;
using nvinfer1::PluginFieldType;

W4A4MoEProjPlugin::W4A4MoEProjPlugin(
    std::string layerName, CommonAttributes attrs, RoutingAttributes routing, int32_t hasInputScale)
    : GroupedProjectionPlugin(std::move(layerName), std::move(attrs), routing)
    , mHasInputScale(hasInputScale)
{
}

nvinfer1::PluginFieldCollection const* W4A4MoEProjPlugin::fieldNames() noexcept
{
    static FieldNames const kFIELDS{{"n", PluginFieldType::kINT32}, {"k", PluginFieldType::kINT32},
        {"num_experts", PluginFieldType::kINT32}, {"top_k", PluginFieldType::kINT32},
        {"combine", PluginFieldType::kINT32}, {"activation_format", PluginFieldType::kCHAR},
        {"has_input_scale", PluginFieldType::kINT32}, {"has_bias", PluginFieldType::kINT32},
        {"family", PluginFieldType::kCHAR}, {"name", PluginFieldType::kCHAR}};
    return kFIELDS.collection();
}

W4A4MoEProjPlugin* W4A4MoEProjPlugin::create(std::string const& layerName, nvinfer1::PluginFieldCollection const* fc)
{
    FieldReader const reader(fc,
        {"n", "k", "num_experts", "top_k", "combine", "activation_format", "has_input_scale", "has_bias", "family",
            "name"});
    CommonAttributes attrs = parseCommonAttributes(reader, {"bf16", "nvfp4"}, "nvfp4");
    RoutingAttributes const routing = parseRoutingAttributes(reader);
    METRALE_REQUIRE(attrs.k % kBLOCK == 0, "field 'k': NVFP4 needs K to be a multiple of ", kBLOCK,
        ", found K=", attrs.k);
    int32_t const hasInputScale = parseFlag(reader, "has_input_scale") ? 1 : 0;
    return new W4A4MoEProjPlugin(layerName, std::move(attrs), routing, hasInputScale);
}

nvinfer1::IPluginV3* W4A4MoEProjPlugin::clone() noexcept
{
    METRALE_GUARDED("clone", nullptr, { return new W4A4MoEProjPlugin(*this); })
}

std::vector<InputSpec> W4A4MoEProjPlugin::expertInputs() const
{
    int64_t const e = mRouting.numExperts;
    int64_t const n = mAttrs.n;
    int64_t const k = mAttrs.k;
    std::vector<InputSpec> specs{{"weight", DataType::kINT8, {e, n, k / 2}},
        {"weight_scale", DataType::kINT8, {e, n, k / kBLOCK}}, {"weight_global_scale", DataType::kFLOAT, {e}}};
    if (mHasInputScale)
    {
        specs.push_back({"input_scale", DataType::kFLOAT, {e}});
    }
    if (mAttrs.hasBias)
    {
        specs.push_back({"bias", DataType::kFLOAT, {e, n}});
    }
    return specs;
}

size_t W4A4MoEProjPlugin::workspaceSize(int64_t m, int32_t xDType) const
{
    return metrale_w4a4_moe_workspace_size(m, mRouting.topK, mRouting.numExperts, mAttrs.n, mAttrs.k, xDType,
        mAttrs.activationFormat);
}

cudaError_t W4A4MoEProjPlugin::launch(int32_t xDType, void const* const* inputs, void const* topkWeights, void* y,
    int64_t m, void* workspace, size_t workspaceBytes, cudaStream_t stream) const
{
    int32_t const inputScale = inputScaleIdx();
    int32_t const bias = biasIdx();
    return metrale_w4a4_moe_proj(inputs[kGROUPED_X_IDX], xDType, static_cast<int32_t const*>(inputs[kGROUPED_IDS_IDX]),
        topkWeights, static_cast<int8_t const*>(inputs[kWEIGHT_IDX]),
        static_cast<int8_t const*>(inputs[kWEIGHT_SCALE_IDX]),
        static_cast<float const*>(inputs[kWEIGHT_GLOBAL_SCALE_IDX]),
        inputScale < 0 ? nullptr : static_cast<float const*>(inputs[inputScale]), mAttrs.activationFormat,
        bias < 0 ? nullptr : static_cast<float const*>(inputs[bias]), y, m, mRouting.topK, mRouting.numExperts,
        mAttrs.n, mAttrs.k, mRouting.combine, workspace, workspaceBytes, stream);
}

void W4A4MoEProjPlugin::writeFields(FieldWriter& writer) const
{
    writer.addInt("n", &mAttrs.n);
    writer.addInt("k", &mAttrs.k);
    writer.addInt("num_experts", &mRouting.numExperts);
    writer.addInt("top_k", &mRouting.topK);
    writer.addInt("combine", &mRouting.combine);
    writer.addString("activation_format", mAttrs.activationFormatName);
    writer.addInt("has_input_scale", &mHasInputScale);
    writer.addInt("has_bias", &mAttrs.hasBias);
    writer.addString("family", mAttrs.family);
    writer.addString("name", mAttrs.name);
}

std::string W4A4MoEProjPlugin::describeOpAttributes() const
{
    return cat("has_input_scale=", mHasInputScale);
}

} // namespace plugin
} // namespace metrale
