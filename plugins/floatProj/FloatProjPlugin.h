/*
 * FloatProj as a TensorRT IPluginV3 (namespace, version and fields from metrale/contract.h): the
 * float weights that stay float (lm_head, the router gate, the GDN's small projections), W4A16's
 * bf16 arithmetic without the dequantization (docs/ops.md). A dense projection: the layout and
 * every TensorRT method are ProjectionPlugin's; FloatFormat supplies only its fields, inputs and
 * the call into metrale_float_proj, the launcher the torch CUDA op calls.
 *
 * Inputs: x [M, K] (kFLOAT/kHALF/kBF16), weight kBF16 [N, K], bias kFLOAT [N] (has_bias=1).
 * Output y [M, N], the type of x. Fields: the ONNX attributes n, k, has_bias, family, name (no
 * activation_format: the arithmetic is bf16).
 */
#ifndef METRALE_FLOAT_PROJ_PLUGIN_H
#define METRALE_FLOAT_PROJ_PLUGIN_H

#include "../common/projectionPlugin.h"

namespace metrale
{
namespace plugin
{

struct FloatFormat : ProjFormat<contract::FloatProj>
{
    //! The fields after n and k and before has_bias, family and name: none.
    template <typename Visitor>
    void visitFields(CommonAttributes const& /*attrs*/, Visitor& /*v*/) const
    {
    }
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_FLOAT_PROJ_PLUGIN_H
