/*
 * FloatProj plugin: the float format's inputs and the call into metrale_float_proj (see
 * FloatProjPlugin.h).
 */
#include "FloatProjPlugin.h"

namespace metrale
{
namespace plugin
{

template <>
FloatFormat parseFormat<FloatFormat>(FieldReader const& /*reader*/, CommonAttributes const& /*attrs*/)
{
    // n, k, has_bias, family and name are the common fields; FloatProj has no others.
    return FloatFormat{};
}

template <>
std::vector<InputSpec> formatInputs<FloatFormat>(FloatFormat const& format, CommonAttributes const& attrs)
{
    // Op::kINPUTS: weight, bias (has_bias).
    return contractInputs(FloatFormat::Op::kINPUTS, {{attrs.n, attrs.k}, {attrs.n}}, formatGates(format, attrs));
}

template <>
size_t DenseProjPlugin<FloatFormat>::workspaceSize(int64_t m, int32_t /*xDType*/) const
{
    return metrale_float_proj_workspace_size(m, mAttrs.n, mAttrs.k);
}

template <>
cudaError_t DenseProjPlugin<FloatFormat>::launchKernel(InputTensors const& in, LaunchArgs const& run) const
{
    return metrale_float_proj(run.x, run.xDType, in.required("weight"), in.optional<float>("bias", mAttrs.hasBias),
        run.y, run.m, mAttrs.n, mAttrs.k, run.workspace, run.workspaceBytes, run.stream);
}

} // namespace plugin
} // namespace metrale
