/*
 * The grouped-expert plugins' layout: x, topk_ids, the stacked weights, topk_weights, y (see
 * GroupedProjectionPlugin.h; what every plugin shares is pluginBase.cpp).
 */
#include "GroupedProjectionPlugin.h"

namespace metrale
{
namespace plugin
{

using nvinfer1::DataType;
using nvinfer1::Dims;

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

std::vector<InputSpec> stackedInputs(std::vector<InputSpec> dense, int64_t numExperts)
{
    for (InputSpec& s : dense)
    {
        if (s.dims == std::vector<int64_t>{1})
        {
            s.dims = {numExperts};
        }
        else
        {
            s.dims.insert(s.dims.begin(), numExperts);
        }
    }
    return dense;
}

GroupedProjectionPlugin::GroupedProjectionPlugin(OpIdentity op, std::string layerName, CommonAttributes attrs,
    RoutingAttributes routing, std::vector<InputSpec> experts)
    : PluginBase(op, std::move(layerName), std::move(attrs), std::move(experts))
    , mRouting(routing)
{
}

LaunchArgs GroupedProjectionPlugin::withRouting(LaunchArgs args, void const* const* inputs) const
{
    int32_t const tw = topkWeightsIdx();
    args.topkIds = static_cast<int32_t const*>(inputs[kGROUPED_IDS_IDX]);
    args.topkWeights = tw < 0 ? nullptr : inputs[tw];
    return args;
}

void GroupedProjectionPlugin::checkCounts(int32_t nbInputs, int32_t nbOutputs) const
{
    requireCounts(nbInputs, nbOutputs, "x, topk_ids", mRouting.combine ? ", topk_weights" : "",
        cat("combine=", mRouting.combine, ", "));
}

void GroupedProjectionPlugin::checkTypes(DataType const* types, int32_t nbInputs) const
{
    METRALE_REQUIRE(isActivationType(types[kX_IDX]), "x: expected kFLOAT, kHALF or kBF16, found ",
        dataTypeName(types[kX_IDX]));
    METRALE_REQUIRE(types[kGROUPED_IDS_IDX] == DataType::kINT32, "topk_ids (input 1): expected kINT32, found ",
        dataTypeName(types[kGROUPED_IDS_IDX]));
    for (int32_t i = kGROUPED_FIRST_WEIGHT_IDX; i < nbInputs && i - kGROUPED_FIRST_WEIGHT_IDX < static_cast<int32_t>(mInputs.size()); ++i)
    {
        InputSpec const& s = mInputs[i - kGROUPED_FIRST_WEIGHT_IDX];
        METRALE_REQUIRE(types[i] == s.type, s.name, " (input ", i, "): expected ", dataTypeName(s.type), ", found ",
            dataTypeName(types[i]));
    }
    int32_t const tw = topkWeightsIdx();
    if (tw >= 0 && tw < nbInputs)
    {
        METRALE_REQUIRE(types[tw] == types[kX_IDX], "topk_weights (input ", tw,
            "): expected the type of x (", dataTypeName(types[kX_IDX]), "), found ", dataTypeName(types[tw]));
    }
}

void GroupedProjectionPlugin::checkDims(Dims const* dims, int32_t nbInputs, bool allowWildcards) const
{
    Dims const& x = dims[kX_IDX];
    std::vector<int64_t> const xWant = mRouting.combine ? std::vector<int64_t>{-1, mRouting.topK, mAttrs.k}
                                                         : std::vector<int64_t>{-1, mAttrs.k};
    METRALE_REQUIRE(matches(x, xWant, -1, allowWildcards), "x: expected ", groupedDims(xWant), " for k=", mAttrs.k,
        ", top_k=", mRouting.topK, ", combine=", mRouting.combine, ", found ", dimsToString(x));
    int64_t const m = x.d[0];
    std::vector<int64_t> const routingWant{-1, mRouting.topK};
    METRALE_REQUIRE(matches(dims[kGROUPED_IDS_IDX], routingWant, m, allowWildcards), "topk_ids (input 1): expected ",
        groupedDims(routingWant), " with M = x's rows (", m, ") and top_k=", mRouting.topK, ", found ",
        dimsToString(dims[kGROUPED_IDS_IDX]));
    for (size_t j = 0; j < mInputs.size() && kGROUPED_FIRST_WEIGHT_IDX + static_cast<int32_t>(j) < nbInputs; ++j)
    {
        int32_t const i = kGROUPED_FIRST_WEIGHT_IDX + static_cast<int32_t>(j);
        METRALE_REQUIRE(matches(dims[i], mInputs[j].dims, m, allowWildcards), mInputs[j].name, " (input ", i,
            "): expected shape ", groupedDims(mInputs[j].dims), " for num_experts=", mRouting.numExperts, ", n=",
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

bool GroupedProjectionPlugin::supportsInputType(int32_t pos, DataType type, DataType xType) const
{
    if (pos == kGROUPED_IDS_IDX)
    {
        return type == DataType::kINT32;
    }
    if (pos == topkWeightsIdx())
    {
        return type == xType;
    }
    return type == mInputs[pos - kGROUPED_FIRST_WEIGHT_IDX].type;
}

std::string GroupedProjectionPlugin::describeLayout(char const* sep) const
{
    return cat(sep, "num_experts=", mRouting.numExperts, sep, "top_k=", mRouting.topK, sep, "combine=",
        mRouting.combine);
}

} // namespace plugin
} // namespace metrale
