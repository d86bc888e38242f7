/*
 * RMSNorm plugin: fields, shapes and the call into metrale_rms_norm (see RMSNormPlugin.h).
 */
#include "RMSNormPlugin.h"

#include <iomanip>

namespace metrale
{
namespace plugin
{

using nvinfer1::Dims;

namespace
{
//! Positions of the inputs after x: weight always, then residual and gate when present.
constexpr int32_t kWEIGHT_IDX{1};
constexpr int32_t kFIRST_OPTIONAL_IDX{2};
} // namespace

RMSNormOp RMSNormOp::parse(FieldReader const& reader)
{
    RMSNormOp op;
    op.k = parsePositive(reader, "k", "K");
    op.epsilon = reader.getFloat("epsilon");
    METRALE_REQUIRE(op.epsilon >= 0.0F, "field 'epsilon': expected a non-negative float, found ", op.epsilon);
    op.weightOffset = parseFlag(reader, "weight_offset") ? 1 : 0;
    op.hasResidual = parseFlag(reader, "has_residual") ? 1 : 0;
    op.hasGate = parseFlag(reader, "has_gate") ? 1 : 0;
    op.names = NodeNames::parse(reader);
    return op;
}

template <>
bool OpPluginOf<RMSNormOp>::isDynamic(int32_t input, int32_t dim, int32_t rank) const
{
    // The rows: every dimension of x, residual and gate but the last.
    return input != kWEIGHT_IDX && dim < rank - 1;
}

template <>
void OpPluginOf<RMSNormOp>::checkDims(Dims const* dims, int32_t nbInputs, bool allowWildcards) const
{
    Dims const& x = dims[kX_IDX];
    METRALE_REQUIRE(x.nbDims >= 1 && (x.d[x.nbDims - 1] == k || (allowWildcards && x.d[x.nbDims - 1] == -1)),
        "x: expected [..., K=", k, "], found ", dimsToString(x));
    for (int32_t j = 0; j + 1 < x.nbDims; ++j)
    {
        METRALE_REQUIRE(x.d[j] >= 0 || (allowWildcards && x.d[j] == -1), "x: bad dimension in ", dimsToString(x));
    }
    Dims const& w = dims[kWEIGHT_IDX];
    METRALE_REQUIRE(w.nbDims == 1 && (w.d[0] == k || (allowWildcards && w.d[0] == -1)), "weight (input 1): expected [",
        k, "], found ", dimsToString(w));
    for (int32_t i = kFIRST_OPTIONAL_IDX; i < nbInputs; ++i)
    {
        char const* name = hasResidual && i == kFIRST_OPTIONAL_IDX ? "residual" : "gate";
        bool same = dims[i].nbDims == x.nbDims;
        for (int32_t j = 0; same && j < x.nbDims; ++j)
        {
            same = dims[i].d[j] == x.d[j] || (allowWildcards && (dims[i].d[j] == -1 || x.d[j] == -1));
        }
        METRALE_REQUIRE(same, name, " (input ", i, "): expected x's shape ", dimsToString(x), ", found ",
            dimsToString(dims[i]));
    }
}

template <>
void OpPluginOf<RMSNormOp>::outputShapes(
    nvinfer1::DimsExprs const* in, nvinfer1::DimsExprs* out, nvinfer1::IExprBuilder&) const
{
    // y and residual_out have x's shape.
    out[0] = in[kX_IDX];
    if (hasResidual)
    {
        out[1] = in[kX_IDX];
    }
}

template <>
std::vector<Dims> OpPluginOf<RMSNormOp>::outputDims(Dims const* in) const
{
    return std::vector<Dims>(hasResidual ? 2 : 1, in[kX_IDX]);
}

template <>
int64_t OpPluginOf<RMSNormOp>::rows(Dims const* in) const
{
    int64_t m = 1;
    for (int32_t j = 0; j + 1 < in[kX_IDX].nbDims; ++j)
    {
        m *= in[kX_IDX].d[j];
    }
    return m;
}

template <>
cudaError_t OpPluginOf<RMSNormOp>::launch(OpTensors const& t) const
{
    int32_t next = kFIRST_OPTIONAL_IDX;
    void const* residual = hasResidual ? t.in[next++] : nullptr;
    void const* gate = hasGate ? t.in[next++] : nullptr;
    return metrale_rms_norm(t.in[kX_IDX], t.xDType, t.in[kWEIGHT_IDX], residual, gate, t.out[0],
        hasResidual ? t.out[1] : nullptr, rows(&t.inDesc[kX_IDX].dims), k, epsilon, weightOffset, t.stream);
}

template <>
std::string OpPluginOf<RMSNormOp>::describe() const
{
    return cat("k=", k, ";epsilon=", std::setprecision(9), epsilon, ";weight_offset=", weightOffset,
        ";has_residual=", hasResidual, ";has_gate=", hasGate);
}

} // namespace plugin
} // namespace metrale
