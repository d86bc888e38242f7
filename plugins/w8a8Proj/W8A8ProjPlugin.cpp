/*
 * W8A8Proj plugin: the W8A8 format's field parsing and validation, input layout, and the call into
 * metrale_w8a8_proj (see W8A8ProjPlugin.h).
 */
#include "W8A8ProjPlugin.h"

namespace metrale
{
namespace plugin
{

namespace
{
//! Edge of a weight-scale block and of an activation-scale block (block128, row_block128).
constexpr int64_t kBLOCK{contract::kFP8_BLOCK};
} // namespace

template <>
W8A8Format parseFormat<W8A8Format>(FieldReader const& reader, CommonAttributes const& /*attrs*/)
{
    W8A8Format f;
    f.weightScaleGranularityName = reader.getString("weight_scale_granularity");
    f.activationScaleGranularityName = reader.getString("activation_scale_granularity");
    // The codes are the values' positions in the contract: MetraleWeightScale, MetraleActScale.
    using Op = W8A8Format::Op;
    f.weightScaleGranularity
        = parseCode("weight_scale_granularity", f.weightScaleGranularityName, Op::kWEIGHT_SCALE_GRANULARITY_VALUES);
    f.activationScaleGranularity = parseCode(
        "activation_scale_granularity", f.activationScaleGranularityName, Op::kACTIVATION_SCALE_GRANULARITY_VALUES);
    return f;
}

template <>
std::vector<InputSpec> formatInputs<W8A8Format>(W8A8Format const& format, CommonAttributes const& attrs)
{
    int64_t const n = attrs.n;
    int64_t const k = attrs.k;
    std::vector<int64_t> scaleDims{n};
    if (format.weightScaleGranularity == kMETRALE_WSCALE_BLOCK128)
    {
        scaleDims = {(n + kBLOCK - 1) / kBLOCK, (k + kBLOCK - 1) / kBLOCK};
    }
    // Op::kINPUTS: weight, weight_scale, input_scale (activation_scale_granularity=tensor), bias (has_bias).
    return contractInputs(W8A8Format::Op::kINPUTS, {{n, k}, scaleDims, {1}, {n}}, formatGates(format, attrs));
}

template <>
size_t DenseProjPlugin<W8A8Format>::workspaceSize(int64_t m, int32_t /*xDType*/) const
{
    return metrale_w8a8_workspace_size(m, mAttrs.n, mAttrs.k, mAttrs.activationFormat,
        mFormat.activationScaleGranularity);
}

template <>
cudaError_t DenseProjPlugin<W8A8Format>::launchKernel(InputTensors const& in, LaunchArgs const& run) const
{
    return metrale_w8a8_proj(run.x, run.xDType, in.required<int8_t>("weight"), in.required<float>("weight_scale"),
        mFormat.weightScaleGranularity, mAttrs.activationFormat, mFormat.activationScaleGranularity,
        in.optional<float>("input_scale", mFormat.staticScale()), in.optional<float>("bias", mAttrs.hasBias), run.y,
        run.m, mAttrs.n, mAttrs.k, run.workspace, run.workspaceBytes, run.stream);
}

} // namespace plugin
} // namespace metrale
