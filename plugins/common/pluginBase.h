/*
 * The IPluginV3 plumbing every metrale plugin shares, dense (ProjectionPlugin) and grouped-expert
 * (GroupedProjectionPlugin) alike: the capability interfaces, the namespace, one output, error
 * reporting with the plugin's identity, context attachment, field serialization and the
 * launch-status check (an op's clone() is METRALE_GUARDED("clone", nullptr, { return new Op(*this); }). The two bases above it keep only what differs: their inputs, shapes and
 * launcher signature.
 *
 * Invariants:
 * - Every TensorRT-facing method is noexcept: failures are reported (pluginCommon.h) and turned
 *   into a non-zero status, a nullptr, 0 or false, never an exception or an abort.
 * - getFieldsToSerialize rebuilds the fields on every call, so they point into this object, also
 *   after a copy.
 * - A plugin attached to a context reports to that context's error recorder.
 */
#ifndef METRALE_PLUGIN_BASE_H
#define METRALE_PLUGIN_BASE_H

#include "pluginCommon.h"

#include <string>
#include <vector>

namespace metrale
{
namespace plugin
{

//! Position of the only output in TensorRT's numbering.
constexpr int32_t kY_IDX{0};

//! One input of the op: its contract name, TensorRT type and static shape (-1: M, grouped ops).
struct InputSpec
{
    char const* name;
    nvinfer1::DataType type;
    std::vector<int64_t> dims;
};

//! The attributes every projection op has (docs/ops.md, Attributes).
struct CommonAttributes
{
    int32_t n{0};
    int32_t k{0};
    int32_t activationFormat{kMETRALE_ACT_BF16};
    int32_t hasBias{0};
    std::string activationFormatName;
    std::string family;
    std::string name;
};

//! "[d0, d1, ...]" for messages.
std::string dimsToString(nvinfer1::Dims const& dims);

//! The dims and types of TensorRT's build-time tensor descriptions.
void collectDescriptions(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
    std::vector<nvinfer1::Dims>& dims, std::vector<nvinfer1::DataType>& types);
//! The same at run time; throws unless every input is linear.
void collectDescriptions(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, std::vector<nvinfer1::Dims>& dims,
    std::vector<nvinfer1::DataType>& types);

//! The dims of symbolic input shapes, -1 where not constant. Only dimension 0 of an input for which
//! isRows(i) holds may be dynamic; any other throws "... must be static (<dynamicNote>)".
template <typename IsRows>
std::vector<nvinfer1::Dims> staticDims(
    nvinfer1::DimsExprs const* inputs, int32_t nbInputs, IsRows isRows, char const* dynamicNote)
{
    std::vector<nvinfer1::Dims> dims(nbInputs);
    for (int32_t i = 0; i < nbInputs; ++i)
    {
        dims[i].nbDims = inputs[i].nbDims;
        METRALE_REQUIRE(inputs[i].nbDims >= 0 && inputs[i].nbDims <= nvinfer1::Dims::MAX_DIMS, "input ", i,
            ": bad rank ", inputs[i].nbDims);
        for (int32_t j = 0; j < inputs[i].nbDims; ++j)
        {
            nvinfer1::IDimensionExpr const* e = inputs[i].d[j];
            METRALE_REQUIRE(e != nullptr, "input ", i, ": dimension ", j, " has no expression");
            METRALE_REQUIRE((j == 0 && isRows(i)) || e->isConstant(), "input ", i, ": dimension ", j,
                " must be static (", dynamicNote, ")");
            dims[i].d[j] = e->isConstant() ? e->getConstantValue() : -1;
        }
    }
    return dims;
}

//! Runs a TensorRT-facing method's body: an exception becomes a report (with the plugin's
//! identity and the method) and the method returns onError.
#define METRALE_GUARDED(method, onError, body)                                                         \
    try                                                                                                \
    {                                                                                                  \
        body                                                                                           \
    }                                                                                                  \
    catch (std::exception const& e)                                                                    \
    {                                                                                                  \
        reportException(method, e);                                                                    \
    }                                                                                                  \
    catch (...)                                                                                        \
    {                                                                                                  \
        reportUnknownException(method);                                                                \
    }                                                                                                  \
    return onError;

class PluginBase : public nvinfer1::IPluginV3,
                   public nvinfer1::IPluginV3OneCore,
                   public nvinfer1::IPluginV3OneBuild,
                   public nvinfer1::IPluginV3OneRuntime
{
public:
    ~PluginBase() override = default;

    // IPluginV3
    nvinfer1::IPluginCapability* getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept override;

    // IPluginV3OneCore
    char const* getPluginNamespace() const noexcept override
    {
        return kPLUGIN_NAMESPACE;
    }

    // IPluginV3OneBuild
    int32_t getNbOutputs() const noexcept override
    {
        return 1;
    }

    // IPluginV3OneRuntime
    nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* context) noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldsToSerialize() noexcept override;

    //! The attributes, for tests and messages.
    CommonAttributes const& attributes() const noexcept
    {
        return mAttrs;
    }

protected:
    PluginBase(std::string layerName, CommonAttributes attrs);
    PluginBase(PluginBase const&) = default;
    PluginBase& operator=(PluginBase const&) = delete;

    //! Appends every field, in contract order, pointing into this object's members.
    virtual void writeFields(FieldWriter& writer) const = 0;

    //! Throws the PluginError of a failed kernel launch for m rows (nothing on cudaSuccess).
    static void checkLaunch(cudaError_t status, int64_t m);

    //! Reports an exception caught in method, with the plugin's identity.
    void reportException(char const* method, std::exception const& e) const noexcept;
    void reportUnknownException(char const* method) const noexcept;

    CommonAttributes mAttrs;
    std::string mLayerName;
    std::string mTimingCacheId;
    std::string mMetadata;

private:
    std::string identity() const;

    nvinfer1::IErrorRecorder* mRecorder{nullptr};
    FieldWriter mFieldWriter;
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_PLUGIN_BASE_H
