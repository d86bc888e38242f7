/*
 * W4A16Proj plugin: the W4A16 format's field parsing and validation, input layout, and the call
 * into metrale_w4a16_proj (see W4A16ProjPlugin.h).
 */
#include "W4A16ProjPlugin.h"

namespace metrale
{
namespace plugin
{

template <>
W4A16Format parseFormat<W4A16Format>(FieldReader const& reader, CommonAttributes const& attrs)
{
    W4A16Format f;
    f.groupSize = reader.getInt("group_size");
    requireValue("group_size", f.groupSize, W4A16Format::Op::kGROUP_SIZE_VALUES);
    METRALE_REQUIRE(attrs.k % 2 == 0, "field 'k': K=", attrs.k, " is odd (two 4-bit codes a byte)");
    f.hasZeroPoint = parseFlag(reader, "has_zero_point") ? 1 : 0;
    return f;
}

template <>
std::vector<InputSpec> formatInputs<W4A16Format>(W4A16Format const& format, CommonAttributes const& attrs)
{
    int64_t const n = attrs.n;
    int64_t const groups = (attrs.k + format.groupSize - 1) / format.groupSize;  // a partial last group
    // Op::kINPUTS: weight, weight_scale, zero_point (has_zero_point), bias (has_bias).
    using Op = W4A16Format::Op;
    return contractInputs(Op::kINPUTS, {{n, attrs.k / 2}, {n, groups}, {n, groups}, {n}}, formatGates(format, attrs));
}

template <>
size_t DenseProjPlugin<W4A16Format>::workspaceSize(int64_t m, int32_t /*xDType*/) const
{
    return metrale_w4a16_workspace_size(m, mAttrs.n, mAttrs.k, mFormat.groupSize);
}

template <>
cudaError_t DenseProjPlugin<W4A16Format>::launchKernel(InputTensors const& in, LaunchArgs const& run) const
{
    return metrale_w4a16_proj(run.x, run.xDType, in.required<int8_t>("weight"), in.required("weight_scale"),
        in.optional<int8_t>("zero_point", mFormat.hasZeroPoint), in.optional<float>("bias", mAttrs.hasBias), run.y,
        run.m, mAttrs.n, mAttrs.k, mFormat.groupSize, run.workspace, run.workspaceBytes, run.stream);
}

} // namespace plugin
} // namespace metrale
