/*
 * W4A16Proj as a TensorRT IPluginV3 (namespace "metrale", version "1"): int4 weights with float32
 * group scales and optional zero points, bf16 activations (docs/ops.md).
 *
 * Inputs: x [M, K] (kFLOAT/kHALF/kBF16), weight kINT8 [N, K/2], weight_scale kFLOAT
 * [N, K/group_size], zero_point kINT8 [N, K/group_size] (has_zero_point=1), bias kFLOAT [N]
 * (has_bias=1). Output y [M, N], the type of x. Fields: the ONNX attributes n, k, group_size,
 * has_zero_point, activation_format, has_bias, family, name.
 */
#ifndef METRALE_W4A16_PROJ_PLUGIN_H
#define METRALE_W4A16_PROJ_PLUGIN_H

#include "../common/projectionPlugin.h"

namespace metrale
{
namespace plugin
{

class W4A16ProjPlugin : public ProjectionPlugin
{
public:
    static constexpr char const* kOP_TYPE{"W4A16Proj"};
    //! Op version 2: bfloat16 group scales, a partial last group (docs/ops.md). Version "1" (float32
    //! scales) is answered by W4A16ProjRetiredCreator.
    static constexpr char const* kPLUGIN_VERSION{"2"};

    //! Parses and validates the fields (the same for kBUILD and kRUNTIME); throws PluginError.
    static W4A16ProjPlugin* create(std::string const& layerName, nvinfer1::PluginFieldCollection const* fc);
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
    std::vector<InputSpec> weightInputs() const override;
    size_t workspaceSize(int64_t m) const override;
    cudaError_t launch(int32_t xDType, void const* const* inputs, void* y, int64_t m, void* workspace,
        size_t workspaceBytes, cudaStream_t stream) const override;
    void writeFields(FieldWriter& writer) const override;
    std::string describeOpAttributes() const override;

private:
    // Input positions; the optional ones follow the present ones.
    static constexpr int32_t kWEIGHT_IDX{1};
    static constexpr int32_t kWEIGHT_SCALE_IDX{2};

    W4A16ProjPlugin(std::string layerName, CommonAttributes attrs, int32_t groupSize, int32_t hasZeroPoint);
    W4A16ProjPlugin(W4A16ProjPlugin const&) = default;

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

class W4A16ProjPluginCreator : public ProjectionPluginCreator<W4A16ProjPlugin>
{
};

class W4A16ProjRetiredCreator : public RetiredPluginCreator<W4A16ProjPlugin>
{
public:
    W4A16ProjRetiredCreator()
        : RetiredPluginCreator<W4A16ProjPlugin>("1", "float32 group scales; version 2 stores them as bfloat16")
    {
    }
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_W4A16_PROJ_PLUGIN_H
