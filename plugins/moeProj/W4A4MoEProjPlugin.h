/*
 * W4A4MoEProj as a TensorRT IPluginV3 (namespace "metrale", version "1"): the grouped-expert op of
 * W4A4Proj (docs/ops.md, "Grouped-expert ops").
 *
 * Inputs: x, topk_ids kINT32 [M, top_k], weight kINT8 [E, N, K/2] (e2m1 codes), weight_scale kINT8
 * [E, N, K/16] (e4m3fn), weight_global_scale kFLOAT [E], input_scale kFLOAT [E]
 * (has_input_scale=1), bias kFLOAT [E, N] (has_bias=1), topk_weights (combine=1). Fields: the ONNX
 * attributes n, k, num_experts, top_k, combine, activation_format, has_input_scale, has_bias,
 * family, name.
 */
#ifndef METRALE_W4A4_MOE_PROJ_PLUGIN_H
#define METRALE_W4A4_MOE_PROJ_PLUGIN_H

#include "GroupedProjectionPlugin.h"

namespace metrale
{
namespace plugin
{

class W4A4MoEProjPlugin : public GroupedProjectionPlugin
{
public:
    static constexpr char const* kOP_TYPE{"W4A4MoEProj"};
    static constexpr char const* kPLUGIN_VERSION{"1"};

    static W4A4MoEProjPlugin* create(std::string const& layerName, nvinfer1::PluginFieldCollection const* fc);
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
    static constexpr int32_t kWEIGHT_GLOBAL_SCALE_IDX{kGROUPED_FIRST_WEIGHT_IDX + 2};
    static constexpr int32_t kBLOCK{16};

    W4A4MoEProjPlugin(std::string layerName, CommonAttributes attrs, RoutingAttributes routing, int32_t hasInputScale);
    W4A4MoEProjPlugin(W4A4MoEProjPlugin const&) = default;

    int32_t inputScaleIdx() const noexcept
    {
        return mHasInputScale ? kWEIGHT_GLOBAL_SCALE_IDX + 1 : -1;
    }
    int32_t biasIdx() const noexcept
    {
        return mAttrs.hasBias ? kWEIGHT_GLOBAL_SCALE_IDX + 1 + mHasInputScale : -1;
    }

    int32_t mHasInputScale;
};

class W4A4MoEProjPluginCreator : public ProjectionPluginCreator<W4A4MoEProjPlugin>
{
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_W4A4_MOE_PROJ_PLUGIN_H
