/*
 * The IPluginV3 methods every metrale plugin shares (see pluginBase.h): the layouts
 * (projectionPlugin.cpp, GroupedProjectionPlugin.cpp) answer what differs.
 */
#include "pluginBase.h"

#include <cstring>
#include <cuda_runtime_api.h>

namespace metrale
{
namespace plugin
{

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::DimsExprs;
using nvinfer1::DynamicPluginTensorDesc;
using nvinfer1::PluginTensorDesc;
using nvinfer1::TensorFormat;

namespace
{
//! "[M, " or "[M, top_k, " for x's rank, in messages.
char const* xRowsText(int32_t rank)
{
    return rank == 3 ? "[M, top_k, " : "[M, ";
}
} // namespace

NodeNames NodeNames::parse(FieldReader const& reader)
{
    NodeNames n;
    n.family = reader.getString("family");
    if (!n.family.empty())
    {
        parseCode("family", n.family, contract::kFAMILIES);
    }
    n.name = reader.getString("name");
    return n;
}

CommonAttributes parseCommonAttributes(FieldReader const& reader, char const* const* allowedFormats, int32_t nbFormats)
{
    CommonAttributes a;
    a.n = reader.getInt("n");
    a.k = reader.getInt("k");
    METRALE_REQUIRE(a.n > 0, "field 'n': expected a positive N, found ", a.n);
    METRALE_REQUIRE(a.k > 0, "field 'k': expected a positive K, found ", a.k);
    if (nbFormats > 0)  // FloatProj has no activation format: bf16 arithmetic, no field
    {
        a.activationFormatName = reader.getString("activation_format");
        a.activationFormat = parseActivationFormat(a.activationFormatName, allowedFormats, nbFormats);
    }
    a.hasBias = parseFlag(reader, "has_bias") ? 1 : 0;
    NodeNames names = NodeNames::parse(reader);
    a.family = std::move(names.family);
    a.name = std::move(names.name);
    return a;
}

void const* InputTensors::find(char const* name) const
{
    for (size_t i = 0; i < mSpecs.size(); ++i)
    {
        if (std::strcmp(mSpecs[i].name, name) == 0)
        {
            return mPointers[i];
        }
    }
    throw PluginError(cat("internal: the launcher asks for input '", name, "', which this op does not have"),
        nvinfer1::ErrorCode::kINTERNAL_ERROR);
}

std::string dimsToString(Dims const& dims)
{
    std::string s = "[";
    for (int32_t i = 0; i < dims.nbDims; ++i)
    {
        s += cat(i == 0 ? "" : ", ", dims.d[i]);
    }
    return s + "]";
}

void collectDescriptions(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, std::vector<Dims>& dims, std::vector<DataType>& types)
{
    dims.resize(nbInputs);
    types.resize(nbInputs);
    for (int32_t i = 0; i < nbInputs; ++i)
    {
        dims[i] = in[i].desc.dims;
        types[i] = in[i].desc.type;
    }
}

void collectDescriptions(
    PluginTensorDesc const* in, int32_t nbInputs, std::vector<Dims>& dims, std::vector<DataType>& types)
{
    dims.resize(nbInputs);
    types.resize(nbInputs);
    for (int32_t i = 0; i < nbInputs; ++i)
    {
        dims[i] = in[i].dims;
        types[i] = in[i].type;
        METRALE_REQUIRE(in[i].format == TensorFormat::kLINEAR, "input ", i, ": expected a linear format");
    }
}

PluginBase::PluginBase(OpIdentity op, std::string layerName, CommonAttributes attrs, std::vector<InputSpec> inputs)
    : PluginCore(op, std::move(layerName))
    , mAttrs(std::move(attrs))
    , mInputs(std::move(inputs))
{
}

std::string PluginCore::identity() const
{
    std::string const& shown = nodeName().empty() ? mLayerName : nodeName();
    return cat(kPLUGIN_NAMESPACE, "::", getPluginName(), " '", shown, "'");
}

void PluginCore::reportException(char const* method, std::exception const& e) const noexcept
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

void PluginCore::reportUnknownException(char const* method) const noexcept
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

nvinfer1::IPluginCapability* PluginCore::getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept
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

void PluginBase::requireCounts(
    int32_t nbInputs, int32_t nbOutputs, char const* rowNames, char const* tailNames, std::string const& gates) const
{
    int32_t const expected = expectedNbInputs();
    if (nbInputs != expected)
    {
        std::string names = rowNames;
        for (InputSpec const& s : mInputs)
        {
            names += cat(", ", s.name);
        }
        throw PluginError(cat("expected ", expected, " inputs (", names, tailNames, ") for ", gates, "has_bias=",
            mAttrs.hasBias, " and the op's other has_* fields, found ", nbInputs));
    }
    METRALE_REQUIRE(nbOutputs == 1, "expected 1 output (y), found ", nbOutputs);
}

void PluginCore::checkLaunch(cudaError_t status, int64_t m)
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

int32_t PluginBase::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept
{
    METRALE_GUARDED("configurePlugin", -1, {
        checkDescriptions(in, nbInputs, out, nbOutputs, true);
        METRALE_REQUIRE(out[kY_IDX].desc.type == in[kX_IDX].desc.type, "y: expected the type of x (",
            dataTypeName(in[kX_IDX].desc.type), "), found ", dataTypeName(out[kY_IDX].desc.type));
        return 0;
    })
}

int32_t PluginBase::getOutputDataTypes(
    DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes, int32_t nbInputs) const noexcept
{
    METRALE_GUARDED("getOutputDataTypes", -1, {
        checkCounts(nbInputs, nbOutputs);
        METRALE_REQUIRE(outputTypes != nullptr && inputTypes != nullptr, "null type arrays");
        checkTypes(inputTypes, nbInputs);
        outputTypes[kY_IDX] = inputTypes[kX_IDX];
        return 0;
    })
}

int32_t PluginBase::getOutputShapes(DimsExprs const* inputs, int32_t nbInputs, DimsExprs const* /*shapeInputs*/,
    int32_t nbShapeInputs, DimsExprs* outputs, int32_t nbOutputs, nvinfer1::IExprBuilder& exprBuilder) noexcept
{
    METRALE_GUARDED("getOutputShapes", -1, {
        checkCounts(nbInputs, nbOutputs);
        METRALE_REQUIRE(nbShapeInputs == 0, "expected no shape inputs, found ", nbShapeInputs);
        METRALE_REQUIRE(inputs != nullptr && outputs != nullptr, "null shape arrays");
        // Static dimensions are checked here, at network construction, so a mismatched weight
        // fails where the layer is added rather than at the first enqueue.
        std::vector<Dims> const dims = staticDims(
            inputs, nbInputs, [this](int32_t i) { return isRowInput(i); }, rowInputsNote());
        checkDims(dims.data(), nbInputs, true);
        Dims const want = outputDims(0);
        outputs[kY_IDX].nbDims = want.nbDims;
        outputs[kY_IDX].d[0] = inputs[kX_IDX].d[0];
        for (int32_t j = 1; j < want.nbDims; ++j)
        {
            outputs[kY_IDX].d[j] = exprBuilder.constant(want.d[j]);
            METRALE_REQUIRE(outputs[kY_IDX].d[j] != nullptr, "the expression builder returned no constant for y's ",
                "dimension ", j);
        }
        return 0;
    })
}

bool PluginBase::supportsFormatCombination(
    int32_t pos, DynamicPluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    METRALE_GUARDED("supportsFormatCombination", false, {
        // A wrong input count is reported by configurePlugin and getOutputShapes; here it only
        // means "nothing is supported".
        if (nbInputs != expectedNbInputs() || nbOutputs != 1 || pos < 0 || pos >= nbInputs + nbOutputs
            || inOut == nullptr)
        {
            return false;
        }
        PluginTensorDesc const& d = inOut[pos].desc;
        if (d.format != TensorFormat::kLINEAR)
        {
            return false;
        }
        if (pos == kX_IDX)
        {
            return isActivationType(d.type);
        }
        if (pos == nbInputs + kY_IDX)
        {
            return d.type == inOut[kX_IDX].desc.type;
        }
        return supportsInputType(pos, d.type, inOut[kX_IDX].desc.type);
    })
}

size_t PluginBase::getWorkspaceSize(DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
    DynamicPluginTensorDesc const* /*outputs*/, int32_t nbOutputs) const noexcept
{
    METRALE_GUARDED("getWorkspaceSize", 0, {
        checkCounts(nbInputs, nbOutputs);
        METRALE_REQUIRE(inputs != nullptr, "null tensor descriptions");
        Dims const& maxX = inputs[kX_IDX].max;
        METRALE_REQUIRE(maxX.nbDims == xRank() && maxX.d[0] >= 0, "x: expected the profile's max shape ",
            xRowsText(xRank()), "K], found ", dimsToString(maxX));
        // The launchers' workspace grows with m (float32 x needs the most in the grouped ops: its
        // raw rows are gathered), so the profile's largest M covers every smaller one.
        return workspaceSize(maxX.d[0], activationDType(inputs[kX_IDX].desc.type));
    })
}

std::string PluginBase::formatText(char const* sep) const
{
    std::string text;
    if (!mAttrs.activationFormatName.empty())
    {
        text = cat(sep, "activation_format=", mAttrs.activationFormatName);
    }
    std::string const own = describeOpAttributes();
    return own.empty() ? text : cat(text, sep, own);
}

char const* PluginBase::getTimingCacheID() noexcept
{
    METRALE_GUARDED("getTimingCacheID", nullptr, {
        // The checkpoint name is left out: projections of equal shape and format share timings.
        mTimingCacheId = cat(getPluginName(), ";n=", mAttrs.n, ";k=", mAttrs.k, describeLayout(";"),
            formatText(";"), ";has_bias=", mAttrs.hasBias);
        return mTimingCacheId.c_str();
    })
}

char const* PluginBase::getMetadataString() noexcept
{
    METRALE_GUARDED("getMetadataString", nullptr, {
        mMetadata = cat(getPluginName(), " name=", mAttrs.name, " family=", mAttrs.family, " n=", mAttrs.n,
            " k=", mAttrs.k, describeLayout(" "), formatText(" "), " has_bias=", mAttrs.hasBias);
        return mMetadata.c_str();
    })
}

int32_t PluginBase::onShapeChange(
    PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* out, int32_t nbOutputs) noexcept
{
    METRALE_GUARDED("onShapeChange", -1, {
        checkDescriptions(in, nbInputs, out, nbOutputs, false);
        Dims const want = outputDims(in[kX_IDX].dims.d[0]);
        Dims const& y = out[kY_IDX].dims;
        bool same = y.nbDims == want.nbDims;
        for (int32_t j = 0; same && j < y.nbDims; ++j)
        {
            same = y.d[j] == want.d[j];
        }
        METRALE_REQUIRE(same, "y: expected ", dimsToString(want), ", found ", dimsToString(y));
        METRALE_REQUIRE(out[kY_IDX].type == in[kX_IDX].type, "y: expected the type of x");
        return 0;
    })
}

int32_t PluginBase::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* outputDesc,
    void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept
{
    METRALE_GUARDED("enqueue", -1, {
        METRALE_REQUIRE(inputDesc != nullptr && outputDesc != nullptr && inputs != nullptr && outputs != nullptr,
            "null tensor descriptions or pointers");
        Dims const& x = inputDesc[kX_IDX].dims;
        int32_t const rank = xRank();
        METRALE_REQUIRE(x.nbDims == rank && x.d[rank - 1] == mAttrs.k && x.d[0] >= 0, "x: expected ",
            xRowsText(rank), "K=", mAttrs.k, "], found ", dimsToString(x));
        int64_t const m = x.d[0];
        if (m == 0)
        {
            return 0;
        }
        LaunchArgs args;
        args.x = inputs[kX_IDX];
        args.xDType = activationDType(inputDesc[kX_IDX].type);
        METRALE_REQUIRE(outputDesc[kY_IDX].type == inputDesc[kX_IDX].type, "y: expected the type of x");
        args.y = outputs[kY_IDX];
        args.m = m;
        args.workspace = workspace;
        args.workspaceBytes = workspaceSize(m, args.xDType);
        args.stream = stream;
        METRALE_REQUIRE(args.workspaceBytes == 0 || workspace != nullptr, "no workspace given; ",
            args.workspaceBytes, " bytes are needed for M=", m);
        checkLaunch(launch(args, inputs), m);
        return 0;
    })
}

nvinfer1::IPluginV3* PluginCore::attachToContext(nvinfer1::IPluginResourceContext* context) noexcept
{
    METRALE_GUARDED("attachToContext", nullptr, {
        METRALE_REQUIRE(context != nullptr, "null resource context");
        nvinfer1::IPluginV3* copy = clone();
        METRALE_REQUIRE(copy != nullptr, "clone failed");
        // Every metrale plugin's clone() is a PluginCore; the copy reports to its context's recorder.
        static_cast<PluginCore*>(copy)->mRecorder = context->getErrorRecorder();
        return copy;
    })
}

nvinfer1::PluginFieldCollection const* PluginCore::getFieldsToSerialize() noexcept
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
