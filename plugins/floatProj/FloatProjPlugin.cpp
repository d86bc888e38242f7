/*
 * FloatProj plugin: the float format's inputs and the call into metrale_float_proj (see
 * FloatProjPlugin.h).
 */
#include "FloatProjPlugin.h"

namespace metrale
{
namespace plugin
{

FloatFormat FloatFormat::parse(FieldReader const& /*reader*/, CommonAttributes const& /*attrs*/)
{
    // n, k, has_bias, family and name are the common fields; FloatProj has no others.
    return FloatFormat{};
}

std::vector<InputSpec> FloatFormat::weightInputs(CommonAttributes const& attrs) const
{
    // Op::kINPUTS: weight, bias (has_bias).
    return contractInputs(Op::kINPUTS, {{attrs.n, attrs.k}, {attrs.n}},
        [&](FieldValues& gates) { visitFields(attrs, gates); });
}

size_t FloatFormat::workspaceSize(CommonAttributes const& attrs, int64_t m) const
{
    return metrale_float_proj_workspace_size(m, attrs.n, attrs.k);
}

cudaError_t FloatFormat::launch(CommonAttributes const& attrs, InputTensors const& in, LaunchArgs const& run) const
{
    return metrale_float_proj(run.x, run.xDType, in.required("weight"), in.optional<float>("bias", attrs.hasBias),
        run.y, run.m, attrs.n, attrs.k, run.workspace, run.workspaceBytes, run.stream);
}

} // namespace plugin
} // namespace metrale
