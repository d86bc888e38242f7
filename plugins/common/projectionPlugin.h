/*
 * The IPluginV3 machinery every metrale projection plugin shares: Y[M, N] = X[M, K] W^T with the
 * weights, scales and optional tensors as further inputs (docs/ops.md).
 *
 * A projection plugin (W4A16ProjPlugin, W8A8ProjPlugin, W4A4ProjPlugin) derives from
 * ProjectionPlugin and supplies only what differs per op: its name, the inputs after x (type and
 * static shape), its fields, the workspace size and the launch. Everything TensorRT asks of a
 * plugin (shapes, types, formats, serialization, cloning, context attachment) lives here once.
 *
 * Invariants:
 * - M (rows of x) is the only dynamic dimension; K, N and every weight shape are static and
 *   checked against the fields at build (getOutputShapes, configurePlugin) and run time
 *   (onShapeChange, enqueue).
 * - y has the data type of x; every tensor is linear (row-major, contiguous).
 * - The serialized fields are exactly the ONNX attributes, so kBUILD and kRUNTIME creation go
 *   through one parser and a round trip reproduces the plugin.
 * - Every TensorRT-facing method is noexcept: failures are reported (pluginCommon.h) and turned
 *   into a non-zero status, a nullptr, 0 or false, never an exception or an abort.
 */
#ifndef METRALE_PROJECTION_PLUGIN_H
#define METRALE_PROJECTION_PLUGIN_H

#include "pluginBase.h"

#include <string>
#include <vector>

namespace metrale
{
namespace plugin
{

//! Position of x in TensorRT's numbering (the output y is kY_IDX, pluginBase.h).
constexpr int32_t kX_IDX{0};

//! Parses n, k, activation_format, has_bias, family and name; defaultFormat is used when
//! activation_format is absent.
CommonAttributes parseCommonAttributes(
    FieldReader const& reader, std::initializer_list<char const*> allowedFormats, char const* defaultFormat);

class ProjectionPlugin : public PluginBase
{
public:
    ~ProjectionPlugin() override = default;

    // IPluginV3OneCore
    char const* getPluginVersion() const noexcept override
    {
        return kPLUGIN_VERSION;
    }

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
    ProjectionPlugin(std::string layerName, CommonAttributes attrs);
    ProjectionPlugin(ProjectionPlugin const&) = default;
    ProjectionPlugin& operator=(ProjectionPlugin const&) = delete;

    //! The inputs after x, in contract order (optional ones only when present).
    virtual std::vector<InputSpec> weightInputs() const = 0;
    //! Workspace bytes for m rows (the op's *_workspace_size launcher).
    virtual size_t workspaceSize(int64_t m) const = 0;
    //! Runs the op's launcher; inputs are TensorRT's, in contract order.
    virtual cudaError_t launch(int32_t xDType, void const* const* inputs, void* y, int64_t m, void* workspace,
        size_t workspaceBytes, cudaStream_t stream) const = 0;
    //! The op-specific attributes as "key=value;..." (timing cache ID and metadata).
    virtual std::string describeOpAttributes() const = 0;

private:
    int32_t expectedNbInputs() const
    {
        return 1 + static_cast<int32_t>(weightInputs().size());
    }
    void checkCounts(int32_t nbInputs, int32_t nbOutputs) const;
    //! Checks static dims against the contract; dims of -1 (unknown at build time) are skipped.
    void checkDims(nvinfer1::Dims const* dims, int32_t nbInputs, bool allowWildcards) const;
    void checkTypes(nvinfer1::DataType const* types, int32_t nbInputs) const;
};

//! The creator of a projection plugin: Plugin supplies kOP_TYPE, kPLUGIN_VERSION, fieldNames() and
//! create(layerName, fc). kBUILD and kRUNTIME creation parse the same fields.
template <typename Plugin>
class ProjectionPluginCreator : public nvinfer1::IPluginCreatorV3One
{
public:
    nvinfer1::IPluginV3* createPlugin(
        char const* name, nvinfer1::PluginFieldCollection const* fc, nvinfer1::TensorRTPhase phase) noexcept override
    {
        try
        {
            return Plugin::create(name == nullptr ? "" : name, fc);
        }
        catch (PluginError const& e)
        {
            reportError(nullptr, e.code(),
                cat(kPLUGIN_NAMESPACE, "::", Plugin::kOP_TYPE, " '", name == nullptr ? "" : name, "' (createPlugin, ",
                    phase == nvinfer1::TensorRTPhase::kBUILD ? "build" : "runtime", " phase): ", e.what()));
        }
        catch (std::exception const& e)
        {
            reportError(nullptr, nvinfer1::ErrorCode::kINTERNAL_ERROR,
                cat(kPLUGIN_NAMESPACE, "::", Plugin::kOP_TYPE, " (createPlugin): ", e.what()));
        }
        catch (...)
        {
            reportError(nullptr, nvinfer1::ErrorCode::kINTERNAL_ERROR,
                cat(kPLUGIN_NAMESPACE, "::", Plugin::kOP_TYPE, " (createPlugin): unknown exception"));
        }
        return nullptr;
    }

    nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override
    {
        return Plugin::fieldNames();
    }
    char const* getPluginName() const noexcept override
    {
        return Plugin::kOP_TYPE;
    }
    char const* getPluginVersion() const noexcept override
    {
        return Plugin::kPLUGIN_VERSION;
    }
    char const* getPluginNamespace() const noexcept override
    {
        return kPLUGIN_NAMESPACE;
    }
};

//! The creator registered under an op's older plugin version: it refuses every plugin, saying
//! that the graph follows an older op contract and must be re-exported (docs/ops.md, "Older
//! exports"), so an old graph is never read with the new layout.
template <typename Plugin>
class RetiredPluginCreator : public nvinfer1::IPluginCreatorV3One
{
public:
    RetiredPluginCreator(char const* version, char const* change)
        : mVersion(version)
        , mChange(change)
    {
    }
    nvinfer1::IPluginV3* createPlugin(
        char const* name, nvinfer1::PluginFieldCollection const*, nvinfer1::TensorRTPhase) noexcept override
    {
        reportError(nullptr, nvinfer1::ErrorCode::kINVALID_ARGUMENT,
            cat(kPLUGIN_NAMESPACE, "::", Plugin::kOP_TYPE, " '", name == nullptr ? "" : name, "': plugin version ",
                mVersion, " (", mChange, ") is an older metrale op contract; this library implements version ",
                Plugin::kPLUGIN_VERSION, ": re-export the model with metrale-export"));
        return nullptr;
    }
    nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override
    {
        return Plugin::fieldNames();
    }
    char const* getPluginName() const noexcept override
    {
        return Plugin::kOP_TYPE;
    }
    char const* getPluginVersion() const noexcept override
    {
        return mVersion;
    }
    char const* getPluginNamespace() const noexcept override
    {
        return kPLUGIN_NAMESPACE;
    }

private:
    char const* mVersion;
    char const* mChange;
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_PROJECTION_PLUGIN_H
