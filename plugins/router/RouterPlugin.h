/*
 * Router as a TensorRT IPluginV3 (namespace, version and fields from metrale/contract.h): softmax
 * over the experts and top-k a row, ties to the lower expert id, optionally renormalized
 * (docs/ops.md). Input: logits [M, E] (kFLOAT/kHALF/kBF16, M dynamic). Outputs: topk_ids kINT32
 * [M, top_k], topk_weights [M, top_k] of the logits' type. Fields: the ONNX attributes
 * num_experts, top_k, normalize, family, name.
 */
#ifndef METRALE_ROUTER_PLUGIN_H
#define METRALE_ROUTER_PLUGIN_H

#include "../common/opPlugin.h"

namespace metrale
{
namespace plugin
{

struct RouterOp : OpFields<contract::Router>
{
    int32_t numExperts{0}, topK{0};
    int32_t normalize{0};  // a flag
    static constexpr auto kMEMBERS = std::make_tuple(&RouterOp::numExperts, &RouterOp::topK, &RouterOp::normalize);

    static RouterOp parse(FieldReader const& reader);
};

METRALE_OP_PLUGIN_SPECIALIZATIONS(RouterOp);

} // namespace plugin
} // namespace metrale

#endif // METRALE_ROUTER_PLUGIN_H
