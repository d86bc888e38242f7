/*
 * The IPluginV3 methods every metrale plugin shares (see pluginBase.h).
 */
#include "pluginBase.h"

#include <cuda_runtime_api.h>

namespace metrale
{
namespace plugin
{

std::string dimsToString(nvinfer1::Dims const& dims)
{
    std::string s = "[";
    for (int32_t i = 0; i < dims.nbDims; ++i)
    {
        s += cat(i == 0 ? "" : ", ", dims.d[i]);
    }
    return s + "]";
}

void collectDescriptions(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
    std::vector<nvinfer1::Dims>& dims, std::vector<nvinfer1::DataType>& types)
{
    dims.resize(nbInputs);
    types.resize(nbInputs);
    for (int32_t i = 0; i < nbInputs; ++i)
    {
        dims[i] = in[i].desc.dims;
        types[i] = in[i].desc.type;
    }
}

void collectDescriptions(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, std::vector<nvinfer1::Dims>& dims,
    std::vector<nvinfer1::DataType>& types)
{
    dims.resize(nbInputs);
    types.resize(nbInputs);
    for (int32_t i = 0; i < nbInputs; ++i)
    {
        dims[i] = in[i].dims;
        types[i] = in[i].type;
        METRALE_REQUIRE(in[i].format == nvinfer1::TensorFormat::kLINEAR, "input ", i, ": expected a linear format");
    }
}

PluginBase::PluginBase(std::string layerName, CommonAttributes attrs)
    : mAttrs(std::move(attrs))
    , mLayerName(std::move(layerName))
{
}

std::string PluginBase::identity() const
{
    std::string const& shown = mAttrs.name.empty() ? mLayerName : mAttrs.name;
    return cat(kPLUGIN_NAMESPACE, "::", getPluginName(), " '", shown, "'");
}

void PluginBase::reportException(char const* method, std::exception const& e) const noexcept
{
    try
    {
        auto const* pe = dynamic_cast<PluginError const*>(&e);
        reportError(mRecorder, pe != nullptr ? pe->code() : nvinfer1::ErrorCode::kINTERNAL_ERROR,
            cat(identity(), " (", method, "): ", e.what()));
    }
    catch (...)
    {
        reportError(mRecorder, nvinfer1::ErrorCode::kINTERNAL_ERROR, e.what());
    }
}

void PluginBase::reportUnknownException(char const* method) const noexcept
{
    try
    {
        reportError(
            mRecorder, nvinfer1::ErrorCode::kINTERNAL_ERROR, cat(identity(), " (", method, "): unknown exception"));
    }
    catch (...)
    {
        reportError(mRecorder, nvinfer1::ErrorCode::kINTERNAL_ERROR, "metrale plugin: unknown exception");
    }
}

nvinfer1::IPluginCapability* PluginBase::getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept
{
    METRALE_GUARDED("getCapabilityInterface", nullptr, {
        switch (type)
        {
        case nvinfer1::PluginCapabilityType::kCORE: return static_cast<nvinfer1::IPluginV3OneCore*>(this);
        case nvinfer1::PluginCapabilityType::kBUILD: return static_cast<nvinfer1::IPluginV3OneBuild*>(this);
        case nvinfer1::PluginCapabilityType::kRUNTIME: return static_cast<nvinfer1::IPluginV3OneRuntime*>(this);
        }
        throw PluginError(cat("unknown capability type ", static_cast<int32_t>(type)));
    })
}

void PluginBase::checkLaunch(cudaError_t status, int64_t m)
{
    if (status != cudaSuccess)
    {
        throw PluginError(cat("the kernel launch failed for M=", m, ": ", cudaGetErrorName(status), " (",
                              cudaGetErrorString(status), ")"),
            status == cudaErrorInvalidValue || status == cudaErrorNotSupported
                ? nvinfer1::ErrorCode::kINVALID_ARGUMENT
                : nvinfer1::ErrorCode::kFAILED_EXECUTION);
    }
}

nvinfer1::IPluginV3* PluginBase::attachToContext(nvinfer1::IPluginResourceContext* context) noexcept
{
    METRALE_GUARDED("attachToContext", nullptr, {
        METRALE_REQUIRE(context != nullptr, "null resource context");
        nvinfer1::IPluginV3* copy = clone();
        METRALE_REQUIRE(copy != nullptr, "clone failed");
        // Every metrale plugin's clone() is a PluginBase; the copy reports to its context's recorder.
        static_cast<PluginBase*>(copy)->mRecorder = context->getErrorRecorder();
        return copy;
    })
}

nvinfer1::PluginFieldCollection const* PluginBase::getFieldsToSerialize() noexcept
{
    METRALE_GUARDED("getFieldsToSerialize", nullptr, {
        // Rebuilt on every call so the fields point into this object, also after a copy.
        mFieldWriter.clear();
        writeFields(mFieldWriter);
        return mFieldWriter.collection();
    })
}

} // namespace plugin
} // namespace metrale
