/*
 * W8A8Proj as a TensorRT IPluginV3 (namespace "metrale", version "1"): FP8 e4m3 weights with
 * per-channel or 128x128 block scales, fp8 (default) or bf16 activations (docs/ops.md).
 *
 * Inputs: x [M, K] (kFLOAT/kHALF/kBF16), weight kINT8 [N, K] (e4m3fn bit patterns), weight_scale
 * kFLOAT [N] (channel) or [ceil(N/128), ceil(K/128)] (block128), bias kFLOAT [N] (has_bias=1).
 * Output y [M, N], the type of x. Fields: the ONNX attributes n, k, weight_scale_granularity,
 * activation_format, activation_scale_granularity, has_bias, family, name.
 */
#ifndef METRALE_W8A8_PROJ_PLUGIN_H
#define METRALE_W8A8_PROJ_PLUGIN_H

#include "../common/projectionPlugin.h"

namespace metrale
{
namespace plugin
{

class W8A8ProjPlugin : public ProjectionPlugin
{
public:
    static constexpr char const* kOP_TYPE{"W8A8Proj"};
    static constexpr char const* kPLUGIN_VERSION{"1"};

    //! Parses and validates the fields (the same for kBUILD and kRUNTIME); throws PluginError.
    static W8A8ProjPlugin* create(std::string const& layerName, nvinfer1::PluginFieldCollection const* fc);
    static nvinfer1::PluginFieldCollection const* fieldNames() noexcept;

    char const* getPluginName() const noexcept override
    {
        return kOP_TYPE;
    }
    nvinfer1::IPluginV3* clone() noexcept override;

protected:
    std::vector<InputSpec> weightInputs() const override;
    size_t workspaceSize(int64_t m) const override;
    cudaError_t launch(int32_t xDType, void const* const* inputs, void* y, int64_t m, void* workspace,
        size_t workspaceBytes, cudaStream_t stream) const override;
    void writeFields(FieldWriter& writer) const override;
    std::string describeOpAttributes() const override;

private:
    static constexpr int32_t kWEIGHT_IDX{1};
    static constexpr int32_t kWEIGHT_SCALE_IDX{2};
    static constexpr int32_t kBIAS_IDX{3};
    //! Edge of a weight-scale block and of an activation-scale block (block128, row_block128).
    static constexpr int64_t kBLOCK{128};

    W8A8ProjPlugin(std::string layerName, CommonAttributes attrs, std::string weightScaleGranularity,
        std::string activationScaleGranularity);
    W8A8ProjPlugin(W8A8ProjPlugin const&) = default;

    std::string mWeightScaleGranularityName;
    std::string mActivationScaleGranularityName;
    int32_t mWeightScaleGranularity;
    int32_t mActivationScaleGranularity;
};

class W8A8ProjPluginCreator : public ProjectionPluginCreator<W8A8ProjPlugin>
{
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_W8A8_PROJ_PLUGIN_H
