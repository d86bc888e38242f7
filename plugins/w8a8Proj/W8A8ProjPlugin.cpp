/*
 * W8A8Proj plugin: the W8A8 format's field parsing and validation, input layout, and the call into
 * metrale_w8a8_proj (see W8A8ProjPlugin.h).
 */
#include "W8A8ProjPlugin.h"

namespace metrale
{
namespace plugin
{

using nvinfer1::DataType;

W8A8Format W8A8Format::parse(FieldReader const& reader, CommonAttributes const& /*attrs*/)
{
    W8A8Format f;
    f.weightScaleGranularityName = reader.getString("weight_scale_granularity", "channel");
    f.activationScaleGranularityName = reader.getString("activation_scale_granularity", "row");
    f.weightScaleGranularity = parseChoice("weight_scale_granularity", f.weightScaleGranularityName,
        {{"channel", kMETRALE_WSCALE_CHANNEL}, {"block128", kMETRALE_WSCALE_BLOCK128}});
    f.activationScaleGranularity = parseChoice("activation_scale_granularity", f.activationScaleGranularityName,
        {{"row", kMETRALE_ASCALE_ROW}, {"row_block128", kMETRALE_ASCALE_ROW_BLOCK128}});
    return f;
}

std::vector<InputSpec> W8A8Format::weightInputs(CommonAttributes const& attrs) const
{
    int64_t const n = attrs.n;
    int64_t const k = attrs.k;
    std::vector<int64_t> scaleDims{n};
    if (weightScaleGranularity == kMETRALE_WSCALE_BLOCK128)
    {
        scaleDims = {(n + kBLOCK - 1) / kBLOCK, (k + kBLOCK - 1) / kBLOCK};
    }
    std::vector<InputSpec> specs{{"weight", DataType::kINT8, {n, k}}, {"weight_scale", DataType::kFLOAT, scaleDims}};
    if (attrs.hasBias)
    {
        specs.push_back({"bias", DataType::kFLOAT, {n}});
    }
    return specs;
}

std::string W8A8Format::describe() const
{
    return cat("weight_scale_granularity=", weightScaleGranularityName,
        ";activation_scale_granularity=", activationScaleGranularityName);
}

size_t W8A8Format::workspaceSize(CommonAttributes const& attrs, int64_t m) const
{
    return metrale_w8a8_workspace_size(m, attrs.n, attrs.k, attrs.activationFormat, activationScaleGranularity);
}

cudaError_t W8A8Format::launch(CommonAttributes const& attrs, InputTensors const& in, LaunchArgs const& run) const
{
    return metrale_w8a8_proj(run.x, run.xDType, in.required<int8_t>("weight"), in.required<float>("weight_scale"),
        weightScaleGranularity, attrs.activationFormat, activationScaleGranularity,
        in.optional<float>("bias", attrs.hasBias), run.y, run.m, attrs.n, attrs.k, run.workspace,
        run.workspaceBytes, run.stream);
}

} // namespace plugin
} // namespace metrale
