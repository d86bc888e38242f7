/*
 * W4A4Proj plugin: the W4A4 format's field parsing and validation, input layout, and the call into
 * metrale_w4a4_proj (see W4A4ProjPlugin.h).
 */
#include "W4A4ProjPlugin.h"

namespace metrale
{
namespace plugin
{

W4A4Format W4A4Format::parse(FieldReader const& reader, CommonAttributes const& attrs)
{
    METRALE_REQUIRE(attrs.k % kBLOCK == 0, "field 'k': NVFP4 needs K to be a multiple of ", kBLOCK,
        ", found K=", attrs.k);
    W4A4Format f;
    f.hasInputScale = parseFlag(reader, "has_input_scale") ? 1 : 0;
    return f;
}

std::vector<InputSpec> W4A4Format::weightInputs(CommonAttributes const& attrs) const
{
    int64_t const n = attrs.n;
    int64_t const k = attrs.k;
    // Op::kINPUTS: weight, weight_scale, weight_global_scale, input_scale (has_input_scale), bias
    // (has_bias). weight_global_scale and input_scale are per tensor: [1] here, [E] in the grouped op.
    return contractInputs(Op::kINPUTS, {{n, k / 2}, {n, k / kBLOCK}, {1}, {1}, {n}},
        [&](FieldValues& gates) { visitFields(attrs, gates); });
}

std::string W4A4Format::describe() const
{
    return cat("has_input_scale=", hasInputScale);
}

size_t W4A4Format::workspaceSize(CommonAttributes const& attrs, int64_t m) const
{
    return metrale_w4a4_workspace_size(m, attrs.n, attrs.k, attrs.activationFormat);
}

cudaError_t W4A4Format::launch(CommonAttributes const& attrs, InputTensors const& in, LaunchArgs const& run) const
{
    return metrale_w4a4_proj(run.x, run.xDType, in.required<int8_t>("weight"), in.required<int8_t>("weight_scale"),
        in.required<float>("weight_global_scale"), in.optional<float>("input_scale", hasInputScale),
        attrs.activationFormat, in.optional<float>("bias", attrs.hasBias), run.y, run.m, attrs.n, attrs.k,
        run.workspace, run.workspaceBytes, run.stream);
}

} // namespace plugin
} // namespace metrale
