/*
 * The IPluginV3 machinery the three grouped-expert plugins share (docs/ops.md, "Grouped-expert
 * ops"). GroupedProjectionPlugin is their layout; GroupedProjPlugin<Format> is the plugin of one
 * op, W4A16MoEProj, W8A8MoEProj or W4A4MoEProj, from the format its dense op uses (W4A16Format,
 * ...): the same fields with the routing fields after n and k, the dense op's weight inputs each
 * with a leading expert axis, and the format's grouped launcher call. What every plugin shares
 * (the IPluginV3 methods, reporting, serialization) is PluginBase (pluginBase.h).
 *
 * Inputs (positional, as the ONNX node): x [M, K] (combine=0) or [M, top_k, K] (combine=1);
 * topk_ids kINT32 [M, top_k]; the dense op's tensors with a leading expert axis [E, ...]; and, for
 * combine=1 only, topk_weights [M, top_k] of x's type (last). Output y: [M, top_k, N] (combine=0)
 * or [M, N] (combine=1), x's type.
 *
 * Invariants:
 * - M is the only dynamic dimension and the same in x, topk_ids and topk_weights; every other
 *   dimension is static and checked against the fields at network construction (getOutputShapes),
 *   build (configurePlugin) and run time (onShapeChange, enqueue).
 * - The serialized fields are exactly the ONNX attributes; kBUILD and kRUNTIME creation parse them
 *   the same way (the dense plugins' rule, projectionPlugin.h).
 * - Every TensorRT-facing method is noexcept and reports failures (pluginCommon.h).
 * - enqueue calls the grouped C launchers of include/metrale/kernels.h, the functions the torch
 *   CUDA op calls, so the plugin and the PyTorch GPU path compute the same bits; routing and
 *   sorting stay on the device (no host synchronization inside an engine).
 */
#ifndef METRALE_GROUPED_PROJ_PLUGIN_H
#define METRALE_GROUPED_PROJ_PLUGIN_H

#include "../common/projectionPlugin.h"

#include <string>
#include <vector>

namespace metrale
{
namespace plugin
{

//! Positions every grouped plugin shares (TensorRT's numbering; x is kX_IDX).
constexpr int32_t kGROUPED_IDS_IDX{1};
constexpr int32_t kGROUPED_FIRST_WEIGHT_IDX{2};

//! The routing attributes of a grouped op (docs/ops.md): after n and k in the field order.
struct RoutingAttributes
{
    int32_t numExperts{0};
    int32_t topK{0};
    int32_t combine{0};
};

//! Parses num_experts, top_k and combine and checks them against each other (top_k <= E, the
//! kernels' top_k <= 32).
RoutingAttributes parseRoutingAttributes(FieldReader const& reader);

//! The routing fields, in contract order (after n and k).
template <typename Visitor>
void visitRoutingFields(RoutingAttributes const& r, Visitor& v)
{
    v.intField("num_experts", r.numExperts);
    v.intField("top_k", r.topK);
    v.intField("combine", r.combine);
}

//! The dense op's inputs, each with a leading expert axis: [d0, ...] -> [E, d0, ...], and a
//! per-tensor scalar [1] -> [E] (W4A4's weight_global_scale and input_scale).
std::vector<InputSpec> stackedInputs(std::vector<InputSpec> dense, int64_t numExperts);

class GroupedProjectionPlugin : public PluginBase
{
public:
    ~GroupedProjectionPlugin() override = default;

protected:
    //! experts: the stacked inputs after topk_ids, in contract order (optional ones only when
    //! present), each with its leading expert axis.
    GroupedProjectionPlugin(OpIdentity op, std::string layerName, CommonAttributes attrs, RoutingAttributes routing,
        std::vector<InputSpec> experts);
    GroupedProjectionPlugin(GroupedProjectionPlugin const&) = default;
    GroupedProjectionPlugin& operator=(GroupedProjectionPlugin const&) = delete;

    int32_t expectedNbInputs() const override
    {
        return kGROUPED_FIRST_WEIGHT_IDX + static_cast<int32_t>(mInputs.size()) + mRouting.combine;
    }
    void checkCounts(int32_t nbInputs, int32_t nbOutputs) const override;
    void checkDims(nvinfer1::Dims const* dims, int32_t nbInputs, bool allowWildcards) const override;
    void checkTypes(nvinfer1::DataType const* types, int32_t nbInputs) const override;
    bool supportsInputType(int32_t pos, nvinfer1::DataType type, nvinfer1::DataType xType) const override;
    bool isRowInput(int32_t i) const override
    {
        return i == kX_IDX || i == kGROUPED_IDS_IDX || i == topkWeightsIdx();
    }
    char const* rowInputsNote() const override
    {
        return "only M, the rows of x, topk_ids and topk_weights, is dynamic";
    }
    int32_t xRank() const override
    {
        return mRouting.combine ? 3 : 2;
    }
    nvinfer1::Dims outputDims(int64_t m) const override;
    std::string describeLayout(char const* sep) const override;

    //! The position of topk_weights, or -1 (combine=0).
    int32_t topkWeightsIdx() const
    {
        return mRouting.combine ? expectedNbInputs() - 1 : -1;
    }
    //! args with the routing tensors of TensorRT's inputs filled in.
    LaunchArgs withRouting(LaunchArgs args, void const* const* inputs) const;

    RoutingAttributes mRouting;
};

//! The plugin of a grouped-expert op: Format is its dense op's (see DenseProjPlugin) and supplies
//! besides GroupedOp (the contract's grouped op); moeProj/<format>MoEProjPlugin.cpp defines
//! workspaceSize and launchKernel of GroupedProjPlugin<Format>, the grouped launcher calls.
template <typename FormatT>
class GroupedProjPlugin final : public GroupedProjectionPlugin
{
public:
    using Format = FormatT;
    using Op = typename Format::GroupedOp;
    static_assert(Op::kGROUPED_OF != nullptr && sameText(Op::kGROUPED_OF, Format::Op::kOP_TYPE),
        "GroupedOp must be the grouped-expert op of the format's dense Op (metrale/contract.h)");

    //! Parses and validates the fields (the same for kBUILD and kRUNTIME); throws PluginError.
    static GroupedProjPlugin* create(std::string const& layerName, nvinfer1::PluginFieldCollection const* fc)
    {
        FieldReader const reader(fc, Op::kFIELDS);
        CommonAttributes attrs = parseCommonAttributes(reader, Op::kACTIVATION_FORMATS);
        RoutingAttributes const routing = parseRoutingAttributes(reader);
        Format format = parseFormat<Format>(reader, attrs);
        FieldListCheck check(Op::kOP_TYPE, Op::kFIELDS, contract::count(Op::kFIELDS));
        visitProjectionFields(attrs, format, check, routing);
        check.finish();
        return new GroupedProjPlugin(layerName, std::move(attrs), routing, std::move(format));
    }

    nvinfer1::IPluginV3* clone() noexcept override
    {
        METRALE_GUARDED("clone", nullptr, { return new GroupedProjPlugin(*this); })
    }

private:
    GroupedProjPlugin(std::string layerName, CommonAttributes attrs, RoutingAttributes routing, Format format)
        : GroupedProjectionPlugin({Op::kOP_TYPE, Op::kVERSION}, std::move(layerName), attrs, routing,
            stackedInputs(formatInputs(format, attrs), routing.numExperts))
        , mFormat(std::move(format))
    {
    }
    GroupedProjPlugin(GroupedProjPlugin const&) = default;

    cudaError_t launch(LaunchArgs args, void const* const* inputs) const override
    {
        return launchKernel(InputTensors(mInputs, inputs + kGROUPED_FIRST_WEIGHT_IDX), withRouting(args, inputs));
    }
    // The format's grouped launcher calls (moeProj/<format>MoEProjPlugin.cpp: explicit specializations).
    size_t workspaceSize(int64_t m, int32_t xDType) const override;
    cudaError_t launchKernel(InputTensors const& in, LaunchArgs const& run) const;
    std::string describeOpAttributes() const override
    {
        return formatAttributes(mFormat, mAttrs);
    }
    void writeFields(FieldWriter& writer) const override
    {
        visitProjectionFields(mAttrs, mFormat, writer, mRouting);
    }

    Format mFormat;
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_GROUPED_PROJ_PLUGIN_H
