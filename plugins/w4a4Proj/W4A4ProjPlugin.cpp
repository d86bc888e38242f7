/*
 * W4A4Proj plugin: the W4A4 format's field parsing and validation, input layout, and the call into
 * metrale_w4a4_proj (see W4A4ProjPlugin.h).
 */
#include "W4A4ProjPlugin.h"

namespace metrale
{
namespace plugin
{

template <>
W4A4Format parseFormat<W4A4Format>(FieldReader const& reader, CommonAttributes const& attrs)
{
    METRALE_REQUIRE(attrs.k % contract::kNVFP4_BLOCK == 0, "field 'k': NVFP4 needs K to be a multiple of ",
        contract::kNVFP4_BLOCK, ", found K=", attrs.k);
    W4A4Format f;
    f.hasInputScale = parseFlag(reader, "has_input_scale") ? 1 : 0;
    return f;
}

template <>
std::vector<InputSpec> formatInputs<W4A4Format>(W4A4Format const& format, CommonAttributes const& attrs)
{
    int64_t const n = attrs.n;
    int64_t const k = attrs.k;
    // Op::kINPUTS: weight, weight_scale, weight_global_scale, input_scale (has_input_scale), bias
    // (has_bias). weight_global_scale and input_scale are per tensor: [1] here, [E] in the grouped op.
    int64_t const blocks = k / contract::kNVFP4_BLOCK;  // e4m3 scales a row
    return contractInputs(
        W4A4Format::Op::kINPUTS, {{n, k / 2}, {n, blocks}, {1}, {1}, {n}}, formatGates(format, attrs));
}

template <>
size_t DenseProjPlugin<W4A4Format>::workspaceSize(int64_t m, int32_t /*xDType*/) const
{
    return metrale_w4a4_workspace_size(m, mAttrs.n, mAttrs.k, mAttrs.activationFormat);
}

template <>
cudaError_t DenseProjPlugin<W4A4Format>::launchKernel(InputTensors const& in, LaunchArgs const& run) const
{
    return metrale_w4a4_proj(run.x, run.xDType, in.required<int8_t>("weight"), in.required<int8_t>("weight_scale"),
        in.required<float>("weight_global_scale"), in.optional<float>("input_scale", mFormat.hasInputScale),
        mAttrs.activationFormat, in.optional<float>("bias", mAttrs.hasBias), run.y, run.m, mAttrs.n, mAttrs.k,
        run.workspace, run.workspaceBytes, run.stream);
}

} // namespace plugin
} // namespace metrale
