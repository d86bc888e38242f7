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

struct CausalConv1dOp
{
    using Op = contract::CausalConv1d;

    int32_t channels{0};
    int32_t kernelSize{0};
    NodeNames names;

    template <typename Visitor>
    void visitFields(Visitor& v) const
    {
        v.intField("channels", channels);
        v.intField("kernel_size", kernelSize);
        names.visit(v);
    }

    static CausalConv1dOp parse(FieldReader const& reader);
    bool isDynamic(int32_t input, int32_t dim, int32_t rank) const;
    void checkDims(nvinfer1::Dims const* dims, int32_t nbInputs, bool allowWildcards) const;
    void outputShapes(nvinfer1::DimsExprs const* in, nvinfer1::DimsExprs* out, nvinfer1::IExprBuilder& b) const;
    std::vector<nvinfer1::Dims> outputDims(nvinfer1::Dims const* in) const;
    size_t workspaceSize(nvinfer1::Dims const* /*in*/, int32_t /*xDType*/) const
    {
        return 0;
    }
    cudaError_t launch(OpTensors const& t) const;
    std::string describe() const;
    int64_t rows(nvinfer1::Dims const* in) const
    {
        return in[kX_IDX].d[0];
    }
};

struct GatedDeltaRuleOp
{
    using Op = contract::GatedDeltaRule;

    int32_t numKHeads{0};
    int32_t numVHeads{0};
    int32_t headKDim{0};
    int32_t headVDim{0};
    NodeNames names;

    template <typename Visitor>
    void visitFields(Visitor& v) const
    {
        v.intField("num_k_heads", numKHeads);
        v.intField("num_v_heads", numVHeads);
        v.intField("head_k_dim", headKDim);
        v.intField("head_v_dim", headVDim);
        names.visit(v);
    }

    static GatedDeltaRuleOp parse(FieldReader const& reader);
    bool isDynamic(int32_t input, int32_t dim, int32_t rank) const;
    void checkDims(nvinfer1::Dims const* dims, int32_t nbInputs, bool allowWildcards) const;
    void outputShapes(nvinfer1::DimsExprs const* in, nvinfer1::DimsExprs* out, nvinfer1::IExprBuilder& b) const;
    std::vector<nvinfer1::Dims> outputDims(nvinfer1::Dims const* in) const;
    size_t workspaceSize(nvinfer1::Dims const* /*in*/, int32_t /*xDType*/) const
    {
        return 0;
    }
    cudaError_t launch(OpTensors const& t) const;
    std::string describe() const;
    int64_t rows(nvinfer1::Dims const* in) const
    {
        return in[kX_IDX].d[0];
    }
    //! x's last dimension: 2 Hk dk + Hv dv.
    int64_t width() const
    {
        return 2LL * numKHeads * headKDim + static_cast<int64_t>(numVHeads) * headVDim;
    }
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_GATED_DELTA_NET_PLUGIN_H
