/*
 * Attention plugin: fields, shapes and the call into metrale_attention (see AttentionPlugin.h).
 */
#include "AttentionPlugin.h"

#include <algorithm>
#include <cmath>
#include <iomanip>

namespace metrale
{
namespace plugin
{

using nvinfer1::Dims;

namespace
{
constexpr int32_t kKEY_IDX{1};
constexpr int32_t kVALUE_IDX{2};
//! The dimensions of q [B, Hq, S, D] and of key / value [B, Hkv, T, D].
constexpr int32_t kBATCH_DIM{0};
constexpr int32_t kHEADS_DIM{1};
constexpr int32_t kLENGTH_DIM{2};
constexpr int32_t kHEAD_DIM_DIM{3};
constexpr int32_t kRANK{4};
//! The launcher's split argument: unsplit, split, or its own choice (see AttentionPlugin.h).
enum Split : int32_t { kNO_SPLIT = 0, kSPLIT = 1, kLAUNCHER_CHOICE = -1 };

//! The longest seq up to `seq` that the decode rule admits (at most 16 rows a (sequence, kv head)).
int64_t decodeSeq(int64_t seq, int32_t qHeads, int32_t kvHeads)
{
    return std::min<int64_t>(seq, METRALE_ATTENTION_DECODE_MAX_ROWS / (qHeads / kvHeads));
}

//! The launch's split argument: the launcher's choice (the decode kernel) for decode, else unsplit.
int32_t splitFor(int64_t seq, int32_t qHeads, int32_t kvHeads)
{
    return decodeSeq(seq, qHeads, kvHeads) == seq ? kLAUNCHER_CHOICE : kNO_SPLIT;
}

bool matches(int64_t found, int64_t want, bool allowWildcards)
{
    return found == want || (allowWildcards && found == -1);
}
} // namespace

AttentionOp AttentionOp::parse(FieldReader const& reader)
{
    AttentionOp op;
    op.qHeads = reader.getInt("q_heads");
    op.kvHeads = reader.getInt("kv_heads");
    op.headDim = reader.getInt("head_dim");
    METRALE_REQUIRE(op.kvHeads > 0 && op.qHeads > 0 && op.qHeads % op.kvHeads == 0, "fields 'q_heads', 'kv_heads': ",
        "expected positive counts, q_heads a multiple of kv_heads, found ", op.qHeads, " and ", op.kvHeads);
    METRALE_REQUIRE(op.headDim > 0, "field 'head_dim': expected a positive D, found ", op.headDim);
    op.scale = reader.getFloat("scale");
    METRALE_REQUIRE(op.scale > 0.0F, "field 'scale': expected a positive float, found ", op.scale);
    op.names = NodeNames::parse(reader);
    return op;
}

template <>
bool OpPluginOf<AttentionOp>::isDynamic(int32_t /*input*/, int32_t dim, int32_t /*rank*/) const
{
    return dim == kBATCH_DIM || dim == kLENGTH_DIM;
}

template <>
void OpPluginOf<AttentionOp>::checkDims(Dims const* dims, int32_t /*nbInputs*/, bool allowWildcards) const
{
    Dims const& q = dims[kX_IDX];
    METRALE_REQUIRE(q.nbDims == kRANK && matches(q.d[kHEADS_DIM], qHeads, allowWildcards)
            && matches(q.d[kHEAD_DIM_DIM], headDim, allowWildcards),
        "q: expected [B, q_heads=", qHeads, ", S, head_dim=", headDim, "], found ", dimsToString(q));
    for (int32_t i : {kKEY_IDX, kVALUE_IDX})
    {
        Dims const& kv = dims[i];
        bool ok = kv.nbDims == kRANK && matches(kv.d[kHEADS_DIM], kvHeads, allowWildcards)
            && matches(kv.d[kHEAD_DIM_DIM], headDim, allowWildcards);
        ok = ok && (kv.d[kBATCH_DIM] == q.d[kBATCH_DIM] || (allowWildcards && (kv.d[kBATCH_DIM] == -1 || q.d[kBATCH_DIM] == -1)));
        ok = ok && (kv.d[kLENGTH_DIM] == -1 || q.d[kLENGTH_DIM] == -1 ? allowWildcards : kv.d[kLENGTH_DIM] >= q.d[kLENGTH_DIM]);
        METRALE_REQUIRE(ok, i == kKEY_IDX ? "key" : "value", " (input ", i, "): expected [B=", q.d[kBATCH_DIM],
            ", kv_heads=", kvHeads, ", T >= S=", q.d[kLENGTH_DIM], ", head_dim=", headDim, "], found ",
            dimsToString(kv));
    }
    bool const sameLength = dims[kKEY_IDX].d[kLENGTH_DIM] == dims[kVALUE_IDX].d[kLENGTH_DIM]
        || (allowWildcards && (dims[kKEY_IDX].d[kLENGTH_DIM] == -1 || dims[kVALUE_IDX].d[kLENGTH_DIM] == -1));
    METRALE_REQUIRE(sameLength, "key and value: expected the same T, found ", dimsToString(dims[kKEY_IDX]), " and ",
        dimsToString(dims[kVALUE_IDX]));
}

template <>
void OpPluginOf<AttentionOp>::outputShapes(
    nvinfer1::DimsExprs const* in, nvinfer1::DimsExprs* out, nvinfer1::IExprBuilder& b) const
{
    // y [B, S, Hq, D].
    out[0].nbDims = kRANK;
    out[0].d[0] = in[kX_IDX].d[kBATCH_DIM];
    out[0].d[1] = in[kX_IDX].d[kLENGTH_DIM];
    out[0].d[2] = b.constant(qHeads);
    out[0].d[3] = b.constant(headDim);
}

template <>
std::vector<Dims> OpPluginOf<AttentionOp>::outputDims(Dims const* in) const
{
    Dims y{};
    y.nbDims = kRANK;
    y.d[0] = in[kX_IDX].d[kBATCH_DIM];
    y.d[1] = in[kX_IDX].d[kLENGTH_DIM];
    y.d[2] = qHeads;
    y.d[3] = headDim;
    return {y};
}

template <>
size_t OpPluginOf<AttentionOp>::workspaceSize(Dims const* in, int32_t xDType) const
{
    int64_t const batch = in[kX_IDX].d[kBATCH_DIM];
    int64_t const seq = in[kX_IDX].d[kLENGTH_DIM];
    int64_t const total = in[kKEY_IDX].d[kLENGTH_DIM];
    size_t const unsplit = metrale_attention_workspace_size(xDType, batch, qHeads, kvHeads, seq, total, headDim, kNO_SPLIT);
    int64_t const dseq = decodeSeq(seq, qHeads, kvHeads);
    size_t const split = dseq > 0
        ? metrale_attention_workspace_size(xDType, batch, qHeads, kvHeads, dseq, total, headDim, kSPLIT)
        : 0;
    return std::max(unsplit, split);
}

template <>
cudaError_t OpPluginOf<AttentionOp>::launch(OpTensors const& t) const
{
    Dims const& q = t.inDesc[kX_IDX].dims;
    // The score multiplier as the torch op computes it (contract.attention_scale_log2): the product
    // in float64, rounded once.
    float const scaleLog2 = static_cast<float>(static_cast<double>(scale) * contract::kLOG2E);
    return metrale_attention(t.in[kX_IDX], t.in[kKEY_IDX], t.in[kVALUE_IDX], t.out[0], t.xDType, q.d[kBATCH_DIM],
        qHeads, kvHeads, q.d[kLENGTH_DIM], t.inDesc[kKEY_IDX].dims.d[kLENGTH_DIM], headDim, scaleLog2,
        splitFor(q.d[kLENGTH_DIM], qHeads, kvHeads),
        t.workspace, t.workspaceBytes, t.stream);
}

template <>
std::string OpPluginOf<AttentionOp>::describe() const
{
    return cat("q_heads=", qHeads, ";kv_heads=", kvHeads, ";head_dim=", headDim, ";scale=", std::setprecision(9),
        scale);
}

} // namespace plugin
} // namespace metrale
