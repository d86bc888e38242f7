/*
 * The shared IPluginV3 methods of the grouped-expert plugins (see GroupedProjectionPlugin.h).
 */
#include "GroupedProjectionPlugin.h"

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
//! The kernels' limit on top_k (moeProjKernel.cuh, kMOE_MAX_TOP_K).
constexpr int32_t kGROUPED_MAX_TOP_K{32};

std::string groupedDims(std::vector<int64_t> const& dims)
{
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i)
    {
        s += cat(i == 0 ? "" : ", ", dims[i] < 0 ? std::string("M") : std::to_string(dims[i]));
    }
    return s + "]";
}

//! dims against want (a -1 in want is M: it must equal m where both are known).
bool matches(Dims const& dims, std::vector<int64_t> const& want, int64_t m, bool allowWildcards)
{
    if (dims.nbDims != static_cast<int32_t>(want.size()))
    {
        return false;
    }
    for (int32_t j = 0; j < dims.nbDims; ++j)
    {
        int64_t const d = dims.d[j];
        if (allowWildcards && d == -1)
        {
            continue;
        }
        if (want[j] < 0 ? (d < 0 || (m >= 0 && d != m)) : d != want[j])
        {
            return false;
        }
    }
    return true;
}
} // namespace

RoutingAttributes parseRoutingAttributes(FieldReader const& reader)
{
    RoutingAttributes r;
    r.numExperts = reader.getInt("num_experts");
    r.topK = reader.getInt("top_k");
    METRALE_REQUIRE(r.numExperts > 0, "field 'num_experts': expected a positive expert count, found ", r.numExperts);
    METRALE_REQUIRE(r.topK > 0 && r.topK <= r.numExperts, "field 'top_k': expected 1..num_experts (",
        r.numExperts, "), found ", r.topK);
    METRALE_REQUIRE(r.topK <= kGROUPED_MAX_TOP_K, "field 'top_k': the grouped kernels serve top_k <= ",
        kGROUPED_MAX_TOP_K, ", found ", r.topK);
    r.combine = parseFlag(reader, "combine") ? 1 : 0;
    return r;
}

GroupedProjectionPlugin::GroupedProjectionPlugin(std::string layerName, CommonAttributes attrs, RoutingAttributes routing)
    : PluginBase(std::move(layerName), std::move(attrs))
    , mRouting(routing)
{
}

void GroupedProjectionPlugin::checkCounts(int32_t nbInputs, int32_t nbOutputs) const
{
    int32_t const expected = expectedNbInputs();
    if (nbInputs != expected)
    {
        std::string names = "x, topk_ids";
        for (InputSpec const& s : expertInputs())
        {
            names += cat(", ", s.name);
        }
        if (mRouting.combine)
        {
            names += ", topk_weights";
        }
        throw PluginError(cat("expected ", expected, " inputs (", names, ") for combine=", mRouting.combine,
            ", has_bias=", mAttrs.hasBias, " and the op's other has_* fields, found ", nbInputs));
    }
    METRALE_REQUIRE(nbOutputs == 1, "expected 1 output (y), found ", nbOutputs);
}

void GroupedProjectionPlugin::checkTypes(DataType const* types, int32_t nbInputs) const
{
    METRALE_REQUIRE(isActivationType(types[kGROUPED_X_IDX]), "x: expected kFLOAT, kHALF or kBF16, found ",
        dataTypeName(types[kGROUPED_X_IDX]));
    METRALE_REQUIRE(types[kGROUPED_IDS_IDX] == DataType::kINT32, "topk_ids (input 1): expected kINT32, found ",
        dataTypeName(types[kGROUPED_IDS_IDX]));
    std::vector<InputSpec> const specs = expertInputs();
    for (int32_t i = kGROUPED_FIRST_WEIGHT_IDX; i < nbInputs && i - kGROUPED_FIRST_WEIGHT_IDX < static_cast<int32_t>(specs.size()); ++i)
    {
        InputSpec const& s = specs[i - kGROUPED_FIRST_WEIGHT_IDX];
        METRALE_REQUIRE(types[i] == s.type, s.name, " (input ", i, "): expected ", dataTypeName(s.type), ", found ",
            dataTypeName(types[i]));
    }
    int32_t const tw = topkWeightsIdx();
    if (tw >= 0 && tw < nbInputs)
    {
        METRALE_REQUIRE(types[tw] == types[kGROUPED_X_IDX], "topk_weights (input ", tw,
            "): expected the type of x (", dataTypeName(types[kGROUPED_X_IDX]), "), found ", dataTypeName(types[tw]));
    }
}

void GroupedProjectionPlugin::checkDims(Dims const* dims, int32_t nbInputs, bool allowWildcards) const
{
    Dims const& x = dims[kGROUPED_X_IDX];
    std::vector<int64_t> const xWant = mRouting.combine ? std::vector<int64_t>{-1, mRouting.topK, mAttrs.k}
                                                         : std::vector<int64_t>{-1, mAttrs.k};
    METRALE_REQUIRE(matches(x, xWant, -1, allowWildcards), "x: expected ", groupedDims(xWant), " for k=", mAttrs.k,
        ", top_k=", mRouting.topK, ", combine=", mRouting.combine, ", found ", dimsToString(x));
    int64_t const m = x.d[0];
    std::vector<int64_t> const routingWant{-1, mRouting.topK};
    METRALE_REQUIRE(matches(dims[kGROUPED_IDS_IDX], routingWant, m, allowWildcards), "topk_ids (input 1): expected ",
        groupedDims(routingWant), " with M = x's rows (", m, ") and top_k=", mRouting.topK, ", found ",
        dimsToString(dims[kGROUPED_IDS_IDX]));
    std::vector<InputSpec> const specs = expertInputs();
    for (size_t j = 0; j < specs.size() && kGROUPED_FIRST_WEIGHT_IDX + static_cast<int32_t>(j) < nbInputs; ++j)
    {
        int32_t const i = kGROUPED_FIRST_WEIGHT_IDX + static_cast<int32_t>(j);
        METRALE_REQUIRE(matches(dims[i], specs[j].dims, m, allowWildcards), specs[j].name, " (input ", i,
            "): expected shape ", groupedDims(specs[j].dims), " for num_experts=", mRouting.numExperts, ", n=",
            mAttrs.n, ", k=", mAttrs.k, ", found ", dimsToString(dims[i]));
    }
    int32_t const tw = topkWeightsIdx();
    if (tw >= 0 && tw < nbInputs)
    {
        METRALE_REQUIRE(matches(dims[tw], routingWant, m, allowWildcards), "topk_weights (input ", tw,
            "): expected ", groupedDims(routingWant), " with M = x's rows (", m, "), found ", dimsToString(dims[tw]));
    }
}

Dims GroupedProjectionPlugin::outputDims(int64_t m) const
{
    Dims y{};
    y.nbDims = mRouting.combine ? 2 : 3;
    y.d[0] = m;
    y.d[1] = mRouting.combine ? mAttrs.n : mRouting.topK;
    if (!mRouting.combine)
    {
        y.d[2] = mAttrs.n;
    }
    return y;
}

int32_t GroupedProjectionPlugin::configurePlugin(
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
        METRALE_REQUIRE(out[kY_IDX].desc.type == in[kGROUPED_X_IDX].desc.type, "y: expected the type of x (",
            dataTypeName(in[kGROUPED_X_IDX].desc.type), "), found ", dataTypeName(out[kY_IDX].desc.type));
        return 0;
    })
}

int32_t GroupedProjectionPlugin::getOutputDataTypes(
    DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes, int32_t nbInputs) const noexcept
{
    METRALE_GUARDED("getOutputDataTypes", -1, {
        checkCounts(nbInputs, nbOutputs);
        METRALE_REQUIRE(outputTypes != nullptr && inputTypes != nullptr, "null type arrays");
        checkTypes(inputTypes, nbInputs);
        outputTypes[kY_IDX] = inputTypes[kGROUPED_X_IDX];
        return 0;
    })
}

int32_t GroupedProjectionPlugin::getOutputShapes(DimsExprs const* inputs, int32_t nbInputs,
    DimsExprs const* /*shapeInputs*/, int32_t nbShapeInputs, DimsExprs* outputs, int32_t nbOutputs,
    nvinfer1::IExprBuilder& exprBuilder) noexcept
{
    METRALE_GUARDED("getOutputShapes", -1, {
        checkCounts(nbInputs, nbOutputs);
        METRALE_REQUIRE(nbShapeInputs == 0, "expected no shape inputs, found ", nbShapeInputs);
        METRALE_REQUIRE(inputs != nullptr && outputs != nullptr, "null shape arrays");
        int32_t const tw = topkWeightsIdx();
        // M (dimension 0 of x, topk_ids and topk_weights) is the only dynamic dimension.
        std::vector<Dims> const dims = staticDims(inputs, nbInputs,
            [tw](int32_t i) { return i == kGROUPED_X_IDX || i == kGROUPED_IDS_IDX || i == tw; },
            "only M, the rows of x, topk_ids and topk_weights, is dynamic");
        checkDims(dims.data(), nbInputs, true);
        Dims const want = outputDims(0);
        outputs[kY_IDX].nbDims = want.nbDims;
        outputs[kY_IDX].d[0] = inputs[kGROUPED_X_IDX].d[0];
        for (int32_t j = 1; j < want.nbDims; ++j)
        {
            outputs[kY_IDX].d[j] = exprBuilder.constant(want.d[j]);
            METRALE_REQUIRE(outputs[kY_IDX].d[j] != nullptr, "the expression builder returned no constant");
        }
        return 0;
    })
}

bool GroupedProjectionPlugin::supportsFormatCombination(
    int32_t pos, DynamicPluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    METRALE_GUARDED("supportsFormatCombination", false, {
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
        if (pos == kGROUPED_X_IDX)
        {
            return isActivationType(d.type);
        }
        if (pos == kGROUPED_IDS_IDX)
        {
            return d.type == DataType::kINT32;
        }
        if (pos == nbInputs + kY_IDX || pos == topkWeightsIdx())
        {
            return d.type == inOut[kGROUPED_X_IDX].desc.type;
        }
        return d.type == expertInputs()[pos - kGROUPED_FIRST_WEIGHT_IDX].type;
    })
}

size_t GroupedProjectionPlugin::getWorkspaceSize(DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
    DynamicPluginTensorDesc const* /*outputs*/, int32_t nbOutputs) const noexcept
{
    METRALE_GUARDED("getWorkspaceSize", 0, {
        checkCounts(nbInputs, nbOutputs);
        METRALE_REQUIRE(inputs != nullptr, "null tensor descriptions");
        Dims const& maxX = inputs[kGROUPED_X_IDX].max;
        METRALE_REQUIRE(maxX.nbDims == (mRouting.combine ? 3 : 2) && maxX.d[0] >= 0,
            "x: expected the profile's max shape, found ", dimsToString(maxX));
        // float32 x needs the most (its raw rows are gathered); the workspace grows with m, so the
        // profile's largest M covers every smaller one.
        return workspaceSize(maxX.d[0], activationDType(inputs[kGROUPED_X_IDX].desc.type));
    })
}

char const* GroupedProjectionPlugin::getTimingCacheID() noexcept
{
    METRALE_GUARDED("getTimingCacheID", nullptr, {
        mTimingCacheId = cat(getPluginName(), ";n=", mAttrs.n, ";k=", mAttrs.k, ";num_experts=", mRouting.numExperts,
            ";top_k=", mRouting.topK, ";combine=", mRouting.combine, ";activation_format=",
            mAttrs.activationFormatName, ";", describeOpAttributes(), ";has_bias=", mAttrs.hasBias);
        return mTimingCacheId.c_str();
    })
}

char const* GroupedProjectionPlugin::getMetadataString() noexcept
{
    METRALE_GUARDED("getMetadataString", nullptr, {
        mMetadata = cat(getPluginName(), " name=", mAttrs.name, " family=", mAttrs.family, " n=", mAttrs.n,
            " k=", mAttrs.k, " num_experts=", mRouting.numExperts, " top_k=", mRouting.topK, " combine=",
            mRouting.combine, " activation_format=", mAttrs.activationFormatName, " ", describeOpAttributes(),
            " has_bias=", mAttrs.hasBias);
        return mMetadata.c_str();
    })
}

int32_t GroupedProjectionPlugin::onShapeChange(
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
        Dims const want = outputDims(in[kGROUPED_X_IDX].dims.d[0]);
        Dims const& y = out[kY_IDX].dims;
        bool same = y.nbDims == want.nbDims;
        for (int32_t j = 0; same && j < y.nbDims; ++j)
        {
            same = y.d[j] == want.d[j];
        }
        METRALE_REQUIRE(same, "y: expected ", dimsToString(want), ", found ", dimsToString(y));
        METRALE_REQUIRE(out[kY_IDX].type == in[kGROUPED_X_IDX].type, "y: expected the type of x");
        return 0;
    })
}

int32_t GroupedProjectionPlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* outputDesc,
    void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept
{
    METRALE_GUARDED("enqueue", -1, {
        METRALE_REQUIRE(inputDesc != nullptr && outputDesc != nullptr && inputs != nullptr && outputs != nullptr,
            "null tensor descriptions or pointers");
        Dims const& x = inputDesc[kGROUPED_X_IDX].dims;
        METRALE_REQUIRE(x.nbDims == (mRouting.combine ? 3 : 2) && x.d[x.nbDims - 1] == mAttrs.k && x.d[0] >= 0,
            "x: expected [M, ", mRouting.combine ? "top_k, " : "", "K=", mAttrs.k, "], found ", dimsToString(x));
        int64_t const m = x.d[0];
        if (m == 0)
        {
            return 0;
        }
        int32_t const xDType = activationDType(inputDesc[kGROUPED_X_IDX].type);
        METRALE_REQUIRE(outputDesc[kY_IDX].type == inputDesc[kGROUPED_X_IDX].type, "y: expected the type of x");
        size_t const workspaceBytes = workspaceSize(m, xDType);
        METRALE_REQUIRE(workspaceBytes == 0 || workspace != nullptr, "no workspace given; ", workspaceBytes,
            " bytes are needed for M=", m);
        int32_t const tw = topkWeightsIdx();
        cudaError_t const status = launch(xDType, inputs, tw < 0 ? nullptr : inputs[tw], outputs[kY_IDX], m,
            workspace, workspaceBytes, stream);
        checkLaunch(status, m);
        return 0;
    })
}

} // namespace plugin
} // namespace metrale
