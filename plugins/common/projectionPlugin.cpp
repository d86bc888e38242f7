/*
 * The dense projection plugins' layout: x [M, K], the weight inputs, y [M, N] (see
 * projectionPlugin.h; what every plugin shares is pluginBase.cpp).
 */
#include "projectionPlugin.h"

namespace metrale
{
namespace plugin
{

using nvinfer1::DataType;
using nvinfer1::Dims;

namespace
{
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

ProjectionPlugin::ProjectionPlugin(
    OpIdentity op, std::string layerName, CommonAttributes attrs, std::vector<InputSpec> weights)
    : PluginBase(op, std::move(layerName), std::move(attrs), std::move(weights))
{
}

void ProjectionPlugin::checkCounts(int32_t nbInputs, int32_t nbOutputs) const
{
    requireCounts(nbInputs, nbOutputs, "x", "", "");
}

void ProjectionPlugin::checkTypes(DataType const* types, int32_t nbInputs) const
{
    METRALE_REQUIRE(isActivationType(types[kX_IDX]), "x: expected kFLOAT, kHALF or kBF16, found ",
        dataTypeName(types[kX_IDX]));
    for (int32_t i = kFIRST_WEIGHT_IDX; i < nbInputs; ++i)
    {
        InputSpec const& s = mInputs[i - kFIRST_WEIGHT_IDX];
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
    for (int32_t i = kFIRST_WEIGHT_IDX; i < nbInputs; ++i)
    {
        InputSpec const& s = mInputs[i - kFIRST_WEIGHT_IDX];
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

bool ProjectionPlugin::supportsInputType(int32_t pos, DataType type, DataType /*xType*/) const
{
    return type == mInputs[pos - kFIRST_WEIGHT_IDX].type;
}

Dims ProjectionPlugin::outputDims(int64_t m) const
{
    Dims y{};
    y.nbDims = 2;
    y.d[0] = m;
    y.d[1] = mAttrs.n;
    return y;
}

} // namespace plugin
} // namespace metrale
