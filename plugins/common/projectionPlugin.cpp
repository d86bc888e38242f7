/*
 * The dense projection plugins' shapes, types, formats, workspace and enqueue (see projectionPlugin.h;
 * the plumbing every plugin shares is pluginBase.cpp).
 */
#include "projectionPlugin.h"

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
constexpr char const* kFAMILIES[] = {"attn", "ffn", "gdn", "moe", "head"};

std::string dimsToString(std::vector<int64_t> const& dims)
{
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i)
    {
        s += cat(i == 0 ? "" : ", ", dims[i]);
    }
    return s + "]";
}
} // namespace

CommonAttributes parseCommonAttributes(
    FieldReader const& reader, std::initializer_list<char const*> allowedFormats, char const* defaultFormat)
{
    CommonAttributes a;
    a.n = reader.getInt("n");
    a.k = reader.getInt("k");
    METRALE_REQUIRE(a.n > 0, "field 'n': expected a positive N, found ", a.n);
    METRALE_REQUIRE(a.k > 0, "field 'k': expected a positive K, found ", a.k);
    a.activationFormatName = reader.getString("activation_format", defaultFormat);
    a.activationFormat = parseActivationFormat(a.activationFormatName, allowedFormats);
    a.hasBias = parseFlag(reader, "has_bias") ? 1 : 0;
    a.family = reader.getString("family", "");
    if (!a.family.empty())
    {
        bool known = false;
        for (char const* f : kFAMILIES)
        {
            known = known || a.family == f;
        }
        METRALE_REQUIRE(known, "field 'family': expected attn, ffn, gdn, moe or head, found '", a.family, "'");
    }
    a.name = reader.getString("name", "");
    return a;
}

ProjectionPlugin::ProjectionPlugin(std::string layerName, CommonAttributes attrs)
    : PluginBase(std::move(layerName), std::move(attrs))
{
}

void ProjectionPlugin::checkCounts(int32_t nbInputs, int32_t nbOutputs) const
{
    int32_t const expected = expectedNbInputs();
    if (nbInputs != expected)
    {
        std::string names = "x";
        for (InputSpec const& s : weightInputs())
        {
            names += cat(", ", s.name);
        }
        throw PluginError(cat("expected ", expected, " inputs (", names, ") for has_bias=", mAttrs.hasBias,
            " and the op's other has_* fields, found ", nbInputs));
    }
    METRALE_REQUIRE(nbOutputs == 1, "expected 1 output (y), found ", nbOutputs);
}

void ProjectionPlugin::checkTypes(DataType const* types, int32_t nbInputs) const
{
    METRALE_REQUIRE(isActivationType(types[kX_IDX]), "x: expected kFLOAT, kHALF or kBF16, found ",
        dataTypeName(types[kX_IDX]));
    std::vector<InputSpec> const specs = weightInputs();
    for (int32_t i = 1; i < nbInputs; ++i)
    {
        InputSpec const& s = specs[i - 1];
        METRALE_REQUIRE(types[i] == s.type, s.name, " (input ", i, "): expected ", dataTypeName(s.type), ", found ",
            dataTypeName(types[i]));
    }
}

void ProjectionPlugin::checkDims(Dims const* dims, int32_t nbInputs, bool allowWildcards) const
{
    Dims const& x = dims[kX_IDX];
    METRALE_REQUIRE(x.nbDims == 2, "x: expected rank 2 [M, K=", mAttrs.k, "], found rank ", x.nbDims, " ",
        dimsToString(x));
    METRALE_REQUIRE(x.d[1] == mAttrs.k || (allowWildcards && x.d[1] == -1), "x: expected [M, K=", mAttrs.k,
        "], found ", dimsToString(x));
    METRALE_REQUIRE(x.d[0] >= 0 || (allowWildcards && x.d[0] == -1), "x: bad row count in ", dimsToString(x));
    std::vector<InputSpec> const specs = weightInputs();
    for (int32_t i = 1; i < nbInputs; ++i)
    {
        InputSpec const& s = specs[i - 1];
        Dims const& d = dims[i];
        bool ok = d.nbDims == static_cast<int32_t>(s.dims.size());
        for (int32_t j = 0; ok && j < d.nbDims; ++j)
        {
            ok = d.d[j] == s.dims[j] || (allowWildcards && d.d[j] == -1);
        }
        METRALE_REQUIRE(ok, s.name, " (input ", i, "): expected shape ", dimsToString(s.dims), " for n=", mAttrs.n,
            ", k=", mAttrs.k, ", found ", dimsToString(d));
    }
}

int32_t ProjectionPlugin::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept
{
    METRALE_GUARDED("configurePlugin", -1, {
        checkCounts(nbInputs, nbOutputs);
        METRALE_REQUIRE(in != nullptr && out != nullptr, "null tensor descriptions");
        std::vector<Dims> dims;
        std::vector<DataType> types;
        collectDescriptions(in, nbInputs, dims, types);
        checkDims(dims.data(), nbInputs, true);
        checkTypes(types.data(), nbInputs);
        METRALE_REQUIRE(out[kY_IDX].desc.type == in[kX_IDX].desc.type, "y: expected the type of x (",
            dataTypeName(in[kX_IDX].desc.type), "), found ", dataTypeName(out[kY_IDX].desc.type));
        return 0;
    })
}

int32_t ProjectionPlugin::getOutputDataTypes(
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

int32_t ProjectionPlugin::getOutputShapes(DimsExprs const* inputs, int32_t nbInputs, DimsExprs const* /*shapeInputs*/,
    int32_t nbShapeInputs, DimsExprs* outputs, int32_t nbOutputs, nvinfer1::IExprBuilder& exprBuilder) noexcept
{
    METRALE_GUARDED("getOutputShapes", -1, {
        checkCounts(nbInputs, nbOutputs);
        METRALE_REQUIRE(nbShapeInputs == 0, "expected no shape inputs, found ", nbShapeInputs);
        METRALE_REQUIRE(inputs != nullptr && outputs != nullptr, "null shape arrays");
        // Static dimensions are checked here, at network construction, so a mismatched weight
        // fails where the layer is added rather than at the first enqueue.
        std::vector<Dims> const dims = staticDims(
            inputs, nbInputs, [](int32_t i) { return i == kX_IDX; }, "only M, the rows of x, is dynamic");
        checkDims(dims.data(), nbInputs, true);
        outputs[kY_IDX].nbDims = 2;
        outputs[kY_IDX].d[0] = inputs[kX_IDX].d[0];
        outputs[kY_IDX].d[1] = exprBuilder.constant(mAttrs.n);
        METRALE_REQUIRE(outputs[kY_IDX].d[1] != nullptr, "the expression builder returned no constant for N");
        return 0;
    })
}

bool ProjectionPlugin::supportsFormatCombination(
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
        nvinfer1::PluginTensorDesc const& d = inOut[pos].desc;
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
        return d.type == weightInputs()[pos - 1].type;
    })
}

size_t ProjectionPlugin::getWorkspaceSize(DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
    DynamicPluginTensorDesc const* /*outputs*/, int32_t nbOutputs) const noexcept
{
    METRALE_GUARDED("getWorkspaceSize", 0, {
        checkCounts(nbInputs, nbOutputs);
        METRALE_REQUIRE(inputs != nullptr, "null tensor descriptions");
        Dims const& maxX = inputs[kX_IDX].max;
        METRALE_REQUIRE(maxX.nbDims == 2 && maxX.d[0] >= 0, "x: expected the profile's max shape [M, K], found ",
            dimsToString(maxX));
        // The launchers' workspace grows with m, so the profile's largest M covers every smaller one.
        return workspaceSize(maxX.d[0]);
    })
}

char const* ProjectionPlugin::getTimingCacheID() noexcept
{
    METRALE_GUARDED("getTimingCacheID", nullptr, {
        // The checkpoint name is left out: projections of equal shape and format share timings.
        mTimingCacheId = cat(getPluginName(), ";n=", mAttrs.n, ";k=", mAttrs.k,
            ";activation_format=", mAttrs.activationFormatName, ";", describeOpAttributes(),
            ";has_bias=", mAttrs.hasBias);
        return mTimingCacheId.c_str();
    })
}

char const* ProjectionPlugin::getMetadataString() noexcept
{
    METRALE_GUARDED("getMetadataString", nullptr, {
        mMetadata = cat(getPluginName(), " name=", mAttrs.name, " family=", mAttrs.family, " n=", mAttrs.n,
            " k=", mAttrs.k, " activation_format=", mAttrs.activationFormatName, " ", describeOpAttributes(),
            " has_bias=", mAttrs.hasBias);
        return mMetadata.c_str();
    })
}

int32_t ProjectionPlugin::onShapeChange(
    PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* out, int32_t nbOutputs) noexcept
{
    METRALE_GUARDED("onShapeChange", -1, {
        checkCounts(nbInputs, nbOutputs);
        METRALE_REQUIRE(in != nullptr && out != nullptr, "null tensor descriptions");
        std::vector<Dims> dims;
        std::vector<DataType> types;
        collectDescriptions(in, nbInputs, dims, types);
        checkDims(dims.data(), nbInputs, false);
        checkTypes(types.data(), nbInputs);
        Dims const& y = out[kY_IDX].dims;
        METRALE_REQUIRE(y.nbDims == 2 && y.d[0] == in[kX_IDX].dims.d[0] && y.d[1] == mAttrs.n,
            "y: expected [", in[kX_IDX].dims.d[0], ", ", mAttrs.n, "], found ", dimsToString(y));
        METRALE_REQUIRE(out[kY_IDX].type == in[kX_IDX].type, "y: expected the type of x");
        return 0;
    })
}

int32_t ProjectionPlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* outputDesc,
    void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept
{
    METRALE_GUARDED("enqueue", -1, {
        METRALE_REQUIRE(inputDesc != nullptr && outputDesc != nullptr && inputs != nullptr && outputs != nullptr,
            "null tensor descriptions or pointers");
        Dims const& x = inputDesc[kX_IDX].dims;
        METRALE_REQUIRE(x.nbDims == 2 && x.d[1] == mAttrs.k && x.d[0] >= 0, "x: expected [M, K=", mAttrs.k,
            "], found ", dimsToString(x));
        int64_t const m = x.d[0];
        if (m == 0)
        {
            return 0;
        }
        int32_t const xDType = activationDType(inputDesc[kX_IDX].type);
        METRALE_REQUIRE(outputDesc[kY_IDX].type == inputDesc[kX_IDX].type, "y: expected the type of x");
        size_t const workspaceBytes = workspaceSize(m);
        METRALE_REQUIRE(workspaceBytes == 0 || workspace != nullptr, "no workspace given; ", workspaceBytes,
            " bytes are needed for M=", m);
        cudaError_t const status = launch(xDType, inputs, outputs[kY_IDX], m, workspace, workspaceBytes, stream);
        checkLaunch(status, m);
        return 0;
    })
}

} // namespace plugin
} // namespace metrale
