/*
 * The IPluginV3 machinery the three grouped-expert plugins share (docs/ops.md, "Grouped-expert
 * ops"): W4A16MoEProjPlugin, W8A8MoEProjPlugin and W4A4MoEProjPlugin derive from
 * GroupedProjectionPlugin and supply only their stacked weight inputs, fields and launch. What every
 * plugin shares (capabilities, reporting, serialization, attachToContext) is PluginBase (pluginBase.h).
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

//! Positions every grouped plugin shares (TensorRT's numbering).
constexpr int32_t kGROUPED_X_IDX{0};
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

class GroupedProjectionPlugin : public PluginBase
{
public:
    ~GroupedProjectionPlugin() override = default;

    // IPluginV3OneBuild
    int32_t configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept override;
    int32_t getOutputDataTypes(nvinfer1::DataType* outputTypes, int32_t nbOutputs,
        nvinfer1::DataType const* inputTypes, int32_t nbInputs) const noexcept override;
    int32_t getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs,
        nvinfer1::DimsExprs const* shapeInputs, int32_t nbShapeInputs, nvinfer1::DimsExprs* outputs,
        int32_t nbOutputs, nvinfer1::IExprBuilder& exprBuilder) noexcept override;
    bool supportsFormatCombination(int32_t pos, nvinfer1::DynamicPluginTensorDesc const* inOut, int32_t nbInputs,
        int32_t nbOutputs) noexcept override;
    size_t getWorkspaceSize(nvinfer1::DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* outputs, int32_t nbOutputs) const noexcept override;
    char const* getTimingCacheID() noexcept override;
    char const* getMetadataString() noexcept override;

    // IPluginV3OneRuntime
    int32_t onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs,
        nvinfer1::PluginTensorDesc const* out, int32_t nbOutputs) noexcept override;
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
        void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept override;

protected:
    GroupedProjectionPlugin(std::string layerName, CommonAttributes attrs, RoutingAttributes routing);
    GroupedProjectionPlugin(GroupedProjectionPlugin const&) = default;
    GroupedProjectionPlugin& operator=(GroupedProjectionPlugin const&) = delete;

    //! The stacked inputs after topk_ids, in contract order (optional ones only when present),
    //! each with its leading expert axis.
    virtual std::vector<InputSpec> expertInputs() const = 0;
    //! Workspace bytes for m rows (the op's *_moe_workspace_size launcher; x's dtype code).
    virtual size_t workspaceSize(int64_t m, int32_t xDType) const = 0;
    //! Runs the op's launcher; inputs are TensorRT's, in contract order (x, topk_ids, weights...,
    //! topk_weights or nullptr).
    virtual cudaError_t launch(int32_t xDType, void const* const* inputs, void const* topkWeights, void* y,
        int64_t m, void* workspace, size_t workspaceBytes, cudaStream_t stream) const = 0;
    //! The op-specific attributes as "key=value;..." (timing cache ID and metadata).
    virtual std::string describeOpAttributes() const = 0;

    RoutingAttributes mRouting;

private:
    int32_t expectedNbInputs() const
    {
        return 2 + static_cast<int32_t>(expertInputs().size()) + mRouting.combine;
    }
    int32_t topkWeightsIdx() const
    {
        return mRouting.combine ? expectedNbInputs() - 1 : -1;
    }
    void checkCounts(int32_t nbInputs, int32_t nbOutputs) const;
    //! Checks every dimension but M against the contract, and that M agrees where it is known;
    //! with allowWildcards, -1 (unknown at build time) passes.
    void checkDims(nvinfer1::Dims const* dims, int32_t nbInputs, bool allowWildcards) const;
    void checkTypes(nvinfer1::DataType const* types, int32_t nbInputs) const;
    nvinfer1::Dims outputDims(int64_t m) const;
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_GROUPED_PROJ_PLUGIN_H
