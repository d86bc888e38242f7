/*
 * W4A4Proj as a TensorRT IPluginV3 (namespace "metrale", version "1"): NVFP4 weights (e2m1 codes,
 * e4m3 per-16 scales, float32 global scale), nvfp4 (default) or bf16 activations (docs/ops.md).
 *
 * Inputs: x [M, K] (kFLOAT/kHALF/kBF16), weight kINT8 [N, K/2] (e2m1 codes), weight_scale kINT8
 * [N, K/16] (e4m3fn bit patterns), weight_global_scale kFLOAT [1], input_scale kFLOAT [1]
 * (has_input_scale=1), bias kFLOAT [N] (has_bias=1). Output y [M, N], the type of x. Fields: the
 * ONNX attributes n, k, activation_format, has_input_scale, has_bias, family, name.
 */
#ifndef METRALE_W4A4_PROJ_PLUGIN_H
#define METRALE_W4A4_PROJ_PLUGIN_H

#include "../common/projectionPlugin.h"

namespace metrale
{
namespace plugin
{

class W4A4ProjPlugin : public ProjectionPlugin
{
public:
    static constexpr char const* kOP_TYPE{"W4A4Proj"};
    static constexpr char const* kPLUGIN_VERSION{"1"};

    //! Parses and validates the fields (the same for kBUILD and kRUNTIME); throws PluginError.
    static W4A4ProjPlugin* create(std::string const& layerName, nvinfer1::PluginFieldCollection const* fc);
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
    static constexpr int32_t kWEIGHT_GLOBAL_SCALE_IDX{3};
    //! Elements per e4m3 block scale.
    static constexpr int32_t kBLOCK{16};

    W4A4ProjPlugin(std::string layerName, CommonAttributes attrs, int32_t hasInputScale);
    W4A4ProjPlugin(W4A4ProjPlugin const&) = default;

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

class W4A4ProjPluginCreator : public ProjectionPluginCreator<W4A4ProjPlugin>
{
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_W4A4_PROJ_PLUGIN_H
