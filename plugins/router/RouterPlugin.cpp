/*
 * Router plugin: fields, shapes and the call into metrale_router (see RouterPlugin.h).
 */
#include "RouterPlugin.h"

namespace metrale
{
namespace plugin
{

using nvinfer1::Dims;

namespace
{
constexpr int32_t kTOPK_IDS_IDX{0};
constexpr int32_t kTOPK_WEIGHTS_IDX{1};
} // namespace

RouterOp RouterOp::parse(FieldReader const& reader)
{
    RouterOp op;
    op.numExperts = reader.getInt("num_experts");
    op.topK = reader.getInt("top_k");
    METRALE_REQUIRE(op.numExperts > 0, "field 'num_experts': expected a positive count, found ", op.numExperts);
    METRALE_REQUIRE(op.topK > 0 && op.topK <= op.numExperts, "field 'top_k': expected 1 .. num_experts=",
        op.numExperts, ", found ", op.topK);
    op.normalize = parseFlag(reader, "normalize") ? 1 : 0;
    op.names = NodeNames::parse(reader);
    return op;
}

template <>
bool OpPluginOf<RouterOp>::isDynamic(int32_t input, int32_t dim, int32_t /*rank*/) const
{
    return input == kX_IDX && dim == 0;
}

template <>
void OpPluginOf<RouterOp>::checkDims(Dims const* dims, int32_t /*nbInputs*/, bool allowWildcards) const
{
    Dims const& x = dims[kX_IDX];
    METRALE_REQUIRE(x.nbDims == 2 && (x.d[1] == numExperts || (allowWildcards && x.d[1] == -1))
            && (x.d[0] >= 0 || (allowWildcards && x.d[0] == -1)),
        "logits: expected [M, num_experts=", numExperts, "], found ", dimsToString(x));
}

template <>
void OpPluginOf<RouterOp>::outputShapes(
    nvinfer1::DimsExprs const* in, nvinfer1::DimsExprs* out, nvinfer1::IExprBuilder& b) const
{
    for (int32_t o : {kTOPK_IDS_IDX, kTOPK_WEIGHTS_IDX})
    {
        out[o].nbDims = 2;
        out[o].d[0] = in[kX_IDX].d[0];
        out[o].d[1] = b.constant(topK);
    }
}

template <>
std::vector<Dims> OpPluginOf<RouterOp>::outputDims(Dims const* in) const
{
    Dims y{};
    y.nbDims = 2;
    y.d[0] = in[kX_IDX].d[0];
    y.d[1] = topK;
    return {y, y};
}

template <>
cudaError_t OpPluginOf<RouterOp>::launch(OpTensors const& t) const
{
    return metrale_router(t.in[kX_IDX], t.xDType, static_cast<int32_t*>(t.out[kTOPK_IDS_IDX]),
        t.out[kTOPK_WEIGHTS_IDX], t.inDesc[kX_IDX].dims.d[0], numExperts, topK, normalize, t.stream);
}

template <>
std::string OpPluginOf<RouterOp>::describe() const
{
    return cat("num_experts=", numExperts, ";top_k=", topK, ";normalize=", normalize);
}

} // namespace plugin
} // namespace metrale
