/*
 * The Gated DeltaNet ops as TensorRT IPluginV3 plugins (namespace, version and fields from
 * metrale/contract.h; docs/ops.md, "Gated DeltaNet"): each sequence's tokens in order, one at a time
 * (the recurrent form), so a sequence's bits depend neither on its batch nor on how it is split into
 * calls.
 *
 * CausalConv1d. Inputs: x [B, S, C] (kFLOAT/kHALF/kBF16; B and S may be dynamic), weight
 * [C, 1, K] and conv_state [B, C, K - 1], x's type. Outputs: y [B, S, C] and conv_state_out
 * [B, C, K - 1], x's type. Fields: the ONNX attributes channels, kernel_size, family, name.
 *
 * GatedDeltaRule. Inputs: x [B, S, 2 Hk dk + Hv dv] ([q | k | v], the conv's output; B and S may be
 * dynamic), ba [B, S, 2 Hv], A_log [Hv] and dt_bias [Hv], x's type, state [B, Hv, dk, dv] kFLOAT.
 * Outputs: y [B, S, Hv, dv], x's type, and state_out [B, Hv, dk, dv] kFLOAT. Fields: the ONNX
 * attributes num_k_heads, num_v_heads, head_k_dim, head_v_dim, family, name.
 *
 * Both call the launchers the torch CUDA op calls (metrale_causal_conv1d, metrale_gated_delta_rule);
 * neither needs a workspace. What the kernels serve beyond the contract (kernel_size up to
 * contract::kGDN_MAX_CONV_KERNEL, head_k_dim in contract::kGDN_HEAD_K_DIMS, head_v_dim a multiple of
 * contract::kGDN_HEAD_V_BLOCK) is refused when the plugin is created, not at enqueue.
 */
#ifndef METRALE_GATED_DELTA_NET_PLUGIN_H
#define METRALE_GATED_DELTA_NET_PLUGIN_H

#include "../common/opPlugin.h"

namespace metrale
{
namespace plugin
{

struct CausalConv1dOp : OpFields<contract::CausalConv1d>
{
    int32_t channels{0}, kernelSize{0};
    static constexpr auto kMEMBERS = std::make_tuple(&CausalConv1dOp::channels, &CausalConv1dOp::kernelSize);

    static CausalConv1dOp parse(FieldReader const& reader);
};

struct GatedDeltaRuleOp : OpFields<contract::GatedDeltaRule>
{
    int32_t numKHeads{0}, numVHeads{0}, headKDim{0}, headVDim{0};
    static constexpr auto kMEMBERS = std::make_tuple(&GatedDeltaRuleOp::numKHeads, &GatedDeltaRuleOp::numVHeads,
        &GatedDeltaRuleOp::headKDim, &GatedDeltaRuleOp::headVDim);

    static GatedDeltaRuleOp parse(FieldReader const& reader);
    //! x's last dimension: 2 Hk dk + Hv dv.
    int64_t width() const
    {
        return 2LL * numKHeads * headKDim + static_cast<int64_t>(numVHeads) * headVDim;
    }
};

METRALE_OP_PLUGIN_SPECIALIZATIONS(CausalConv1dOp);
METRALE_OP_PLUGIN_SPECIALIZATIONS(GatedDeltaRuleOp);

} // namespace plugin
} // namespace metrale

#endif // METRALE_GATED_DELTA_NET_PLUGIN_H
