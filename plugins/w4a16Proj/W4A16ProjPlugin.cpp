/*
 * W4A16Proj plugin: the W4A16 format's field parsing and validation, input layout, and the call
 * into metrale_w4a16_proj (see W4A16ProjPlugin.h).
 */
#include "W4A16ProjPlugin.h"

namespace metrale
{
namespace plugin
{

W4A16Format W4A16Format::parse(FieldReader const& reader, CommonAttributes const& attrs)
{
    W4A16Format f;
    f.groupSize = reader.getInt("group_size");
    requireValue("group_size", f.groupSize, Op::kGROUP_SIZE_VALUES);
    METRALE_REQUIRE(attrs.k % 2 == 0, "field 'k': K=", attrs.k, " is odd (two 4-bit codes a byte)");
    f.hasZeroPoint = parseFlag(reader, "has_zero_point") ? 1 : 0;
    return f;
}

std::vector<InputSpec> W4A16Format::weightInputs(CommonAttributes const& attrs) const
{
    int64_t const n = attrs.n;
    int64_t const groups = (attrs.k + groupSize - 1) / groupSize;  // a partial last group
    // Op::kINPUTS: weight, weight_scale, zero_point (has_zero_point), bias (has_bias).
    return contractInputs(Op::kINPUTS, {{n, attrs.k / 2}, {n, groups}, {n, groups}, {n}},
        [&](FieldValues& gates) { visitFields(attrs, gates); });
}

std::string W4A16Format::describe() const
{
    return cat("group_size=", groupSize, ";has_zero_point=", hasZeroPoint);
}

size_t W4A16Format::workspaceSize(CommonAttributes const& attrs, int64_t m) const
{
    return metrale_w4a16_workspace_size(m, attrs.n, attrs.k, groupSize);
}

cudaError_t W4A16Format::launch(CommonAttributes const& attrs, InputTensors const& in, LaunchArgs const& run) const
{
    return metrale_w4a16_proj(run.x, run.xDType, in.required<int8_t>("weight"), in.required("weight_scale"),
        in.optional<int8_t>("zero_point", hasZeroPoint), in.optional<float>("bias", attrs.hasBias), run.y, run.m,
        attrs.n, attrs.k, groupSize, run.workspace, run.workspaceBytes, run.stream);
}

} // namespace plugin
} // namespace metrale
