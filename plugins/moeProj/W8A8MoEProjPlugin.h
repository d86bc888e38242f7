/*
 * W8A8MoEProj as a TensorRT IPluginV3 (namespace "metrale", version "1"): the grouped-expert op of
 * W8A8Proj (docs/ops.md, "Grouped-expert ops").
 *
 * Inputs: x, topk_ids kINT32 [M, top_k], weight kINT8 [E, N, K] (e4m3fn bit patterns),
 * weight_scale kFLOAT [E, N] (channel) or [E, ceil(N/128), ceil(K/128)] (block128), bias kFLOAT
 * [E, N] (has_bias=1), topk_weights (combine=1). Fields: the ONNX attributes n, k, num_experts,
 * top_k, combine, weight_scale_granularity, activation_format, activation_scale_granularity,
 * has_bias, family, name.
 */
#ifndef METRALE_W8A8_MOE_PROJ_PLUGIN_H
#define METRALE_W8A8_MOE_PROJ_PLUGIN_H

#include "GroupedProjectionPlugin.h"

namespace metrale
{
namespace plugin
{

class W8A8MoEProjPlugin : public GroupedProjectionPlugin
{
public:
    static constexpr char const* kOP_TYPE{"W8A8MoEProj"};
    static constexpr char const* kPLUGIN_VERSION{"1"};

    static W8A8MoEProjPlugin* create(std::string const& layerName, nvinfer1::PluginFieldCollection const* fc);
    static nvinfer1::PluginFieldCollection const* fieldNames() noexcept;

    char const* getPluginName() const noexcept override
    {
        return kOP_TYPE;
    }
    char const* getPluginVersion() const noexcept override
    {
        return kPLUGIN_VERSION;
    }
    nvinfer1::IPluginV3* clone() noexcept override;

protected:
    std::vector<InputSpec> expertInputs() const override;
    size_t workspaceSize(int64_t m, int32_t xDType) const override;
    cudaError_t launch(int32_t xDType, void const* const* inputs, void const* topkWeights, void* y, int64_t m,
        void* workspace, size_t workspaceBytes, cudaStream_t stream) const override;
    void writeFields(FieldWriter& writer) const override;
    std::string describeOpAttributes() const override;

private:
    static constexpr int32_t kWEIGHT_IDX{kGROUPED_FIRST_WEIGHT_IDX};
    static constexpr int32_t kWEIGHT_SCALE_IDX{kGROUPED_FIRST_WEIGHT_IDX + 1};
    static constexpr int32_t kBIAS_IDX{kGROUPED_FIRST_WEIGHT_IDX + 2};
    static constexpr int64_t kBLOCK{128};

    W8A8MoEProjPlugin(std::string layerName, CommonAttributes attrs, RoutingAttributes routing,
        std::string weightScaleGranularity, std::string activationScaleGranularity);
    W8A8MoEProjPlugin(W8A8MoEProjPlugin const&) = default;

    std::string mWeightScaleGranularityName;
    std::string mActivationScaleGranularityName;
    int32_t mWeightScaleGranularity;
    int32_t mActivationScaleGranularity;
};

class W8A8MoEProjPluginCreator : public ProjectionPluginCreator<W8A8MoEProjPlugin>
{
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_W8A8_MOE_PROJ_PLUGIN_H
