/*
 * W4A16MoEProj as a TensorRT IPluginV3 (namespace "metrale", version "2", as W4A16Proj): the
 * grouped-expert op of W4A16Proj (docs/ops.md, "Grouped-expert ops").
 *
 * Inputs: x, topk_ids kINT32 [M, top_k], weight kINT8 [E, N, K/2], weight_scale kBF16
 * [E, N, ceil(K/group_size)], zero_point kINT8 [E, N, ceil(K/group_size)] (has_zero_point=1),
 * bias kFLOAT [E, N] (has_bias=1), topk_weights (combine=1). Fields: the ONNX attributes n, k,
 * num_experts, top_k, combine, group_size, has_zero_point, activation_format, has_bias, family,
 * name. Version "1" (float32 group scales) is answered by W4A16MoEProjRetiredCreator.
 */
#ifndef METRALE_W4A16_MOE_PROJ_PLUGIN_H
#define METRALE_W4A16_MOE_PROJ_PLUGIN_H

#include "GroupedProjectionPlugin.h"

namespace metrale
{
namespace plugin
{

class W4A16MoEProjPlugin : public GroupedProjectionPlugin
{
public:
    static constexpr char const* kOP_TYPE{"W4A16MoEProj"};
    static constexpr char const* kPLUGIN_VERSION{"2"};

    static W4A16MoEProjPlugin* create(std::string const& layerName, nvinfer1::PluginFieldCollection const* fc);
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

    W4A16MoEProjPlugin(std::string layerName, CommonAttributes attrs, RoutingAttributes routing, int32_t groupSize,
        int32_t hasZeroPoint);
    W4A16MoEProjPlugin(W4A16MoEProjPlugin const&) = default;

    int32_t zeroPointIdx() const noexcept
    {
        return mHasZeroPoint ? kWEIGHT_SCALE_IDX + 1 : -1;
    }
    int32_t biasIdx() const noexcept
    {
        return mAttrs.hasBias ? kWEIGHT_SCALE_IDX + 1 + mHasZeroPoint : -1;
    }

    int32_t mGroupSize;
    int32_t mHasZeroPoint;
};

class W4A16MoEProjPluginCreator : public ProjectionPluginCreator<W4A16MoEProjPlugin>
{
};

class W4A16MoEProjRetiredCreator : public RetiredPluginCreator<W4A16MoEProjPlugin>
{
public:
    W4A16MoEProjRetiredCreator()
        : RetiredPluginCreator<W4A16MoEProjPlugin>("1", "float32 group scales; version 2 stores them as bfloat16")
    {
    }
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_W4A16_MOE_PROJ_PLUGIN_H
