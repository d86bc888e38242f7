/*
 * The Gated DeltaNet plugins: fields, shapes and the calls into metrale_causal_conv1d and
 * metrale_gated_delta_rule (see GatedDeltaNetPlugin.h).
 */
#include "GatedDeltaNetPlugin.h"

#include <algorithm>
#include <initializer_list>
#include <iterator>

namespace metrale
{
namespace plugin
{

using nvinfer1::Dims;
using nvinfer1::DimsExprs;

namespace
{
// CausalConv1d's inputs and outputs (contract order).
constexpr int32_t kCONV_WEIGHT_IDX{1};
constexpr int32_t kCONV_STATE_IDX{2};
constexpr int32_t kCONV_Y_IDX{0};
constexpr int32_t kCONV_STATE_OUT_IDX{1};
// GatedDeltaRule's inputs and outputs (contract order).
constexpr int32_t kBA_IDX{1};
constexpr int32_t kA_LOG_IDX{2};
constexpr int32_t kDT_BIAS_IDX{3};
constexpr int32_t kSTATE_IDX{4};
constexpr int32_t kRULE_Y_IDX{0};
constexpr int32_t kSTATE_OUT_IDX{1};
// x's dimensions: [B, S, features].
constexpr int32_t kGDN_BATCH_DIM{0};
constexpr int32_t kGDN_SEQ_DIM{1};
//! The most sequences (and value heads) a launch serves: the kernels' grid y / z dimension.
constexpr int64_t kMAX_GRID_YZ{65535};

//! A wanted dimension that may be any size (a batch or token count).
constexpr int64_t kANY{-3};

//! A dimension found as wanted: kANY any size, else equal; -1 (unknown at build) passes while
//! wildcards are allowed, whatever is wanted.
bool gdnMatches(int64_t found, int64_t want, bool allowWildcards)
{
    if (found == -1 || want == -1)
    {
        return allowWildcards;
    }
    return found >= 0 && (want == kANY || found == want);
}

//! dims is [want...] (its rank and every dimension, under matches).
bool gdnShaped(Dims const& dims, std::initializer_list<int64_t> want, bool allowWildcards)
{
    if (dims.nbDims != static_cast<int32_t>(want.size()))
    {
        return false;
    }
    int32_t j = 0;
    for (int64_t w : want)
    {
        if (!gdnMatches(dims.d[j++], w, allowWildcards))
        {
            return false;
        }
    }
    return true;
}

template <typename T, size_t N>
bool gdnOneOf(T const (&values)[N], T v)
{
    return std::find(std::begin(values), std::end(values), v) != std::end(values);
}

template <size_t N>
std::string gdnListed(int32_t const (&values)[N])
{
    std::string s;
    for (size_t i = 0; i < N; ++i)
    {
        s += cat(i ? ", " : "", values[i]);
    }
    return s;
}

Dims gdnDims(std::initializer_list<int64_t> d)
{
    Dims out{};
    out.nbDims = static_cast<int32_t>(d.size());
    std::copy(d.begin(), d.end(), out.d);
    return out;
}
} // namespace

// ---- CausalConv1d --------------------------------------------------------------------------------

CausalConv1dOp CausalConv1dOp::parse(FieldReader const& reader)
{
    CausalConv1dOp op;
    op.channels = parsePositive(reader, "channels", "C");
    op.kernelSize = reader.getInt("kernel_size");
    METRALE_REQUIRE(gdnOneOf(contract::kGDN_CONV_KERNELS, op.kernelSize), "field 'kernel_size': expected one of ",
        gdnListed(contract::kGDN_CONV_KERNELS), " (the taps the CUDA kernel serves), found ", op.kernelSize);
    op.names = NodeNames::parse(reader);
    return op;
}

template <>
bool OpPluginOf<CausalConv1dOp>::isDynamic(int32_t input, int32_t dim, int32_t /*rank*/) const
{
    // x's batch and tokens, conv_state's batch.
    return (input == kX_IDX && (dim == kGDN_BATCH_DIM || dim == kGDN_SEQ_DIM))
        || (input == kCONV_STATE_IDX && dim == 0);
}

template <>
void OpPluginOf<CausalConv1dOp>::checkDims(Dims const* dims, int32_t /*nbInputs*/, bool allowWildcards) const
{
    Dims const& x = dims[kX_IDX];
    METRALE_REQUIRE(gdnShaped(x, {kANY, kANY, channels}, allowWildcards), "x: expected [B, S, channels=", channels,
        "], found ", dimsToString(x));
    METRALE_REQUIRE(gdnShaped(dims[kCONV_WEIGHT_IDX], {channels, 1, kernelSize}, allowWildcards),
        "weight (input 1): expected [channels=", channels, ", 1, kernel_size=", kernelSize, "], found ",
        dimsToString(dims[kCONV_WEIGHT_IDX]));
    METRALE_REQUIRE(gdnShaped(dims[kCONV_STATE_IDX], {x.d[kGDN_BATCH_DIM], channels, kernelSize - 1}, allowWildcards),
        "conv_state (input 2): expected [B=", x.d[kGDN_BATCH_DIM], ", channels=", channels, ", kernel_size-1=",
        kernelSize - 1, "], found ", dimsToString(dims[kCONV_STATE_IDX]));
    METRALE_REQUIRE(x.d[kGDN_BATCH_DIM] <= kMAX_GRID_YZ, "x: at most ", kMAX_GRID_YZ, " sequences a launch, found ",
        x.d[kGDN_BATCH_DIM]);
}

template <>
void OpPluginOf<CausalConv1dOp>::outputShapes(DimsExprs const* in, DimsExprs* out, nvinfer1::IExprBuilder& b) const
{
    out[kCONV_Y_IDX] = in[kX_IDX];
    out[kCONV_STATE_OUT_IDX].nbDims = 3;
    out[kCONV_STATE_OUT_IDX].d[0] = in[kX_IDX].d[kGDN_BATCH_DIM];
    out[kCONV_STATE_OUT_IDX].d[1] = b.constant(channels);
    out[kCONV_STATE_OUT_IDX].d[2] = b.constant(kernelSize - 1);
}

template <>
std::vector<Dims> OpPluginOf<CausalConv1dOp>::outputDims(Dims const* in) const
{
    return {in[kX_IDX], gdnDims({in[kX_IDX].d[kGDN_BATCH_DIM], channels, kernelSize - 1})};
}

template <>
cudaError_t OpPluginOf<CausalConv1dOp>::launch(OpTensors const& t) const
{
    Dims const& x = t.inDesc[kX_IDX].dims;
    return metrale_causal_conv1d(t.in[kX_IDX], t.xDType, t.in[kCONV_WEIGHT_IDX], t.in[kCONV_STATE_IDX],
        t.out[kCONV_Y_IDX], t.out[kCONV_STATE_OUT_IDX], x.d[kGDN_BATCH_DIM], x.d[kGDN_SEQ_DIM], channels, kernelSize,
        t.stream);
}

template <>
std::string OpPluginOf<CausalConv1dOp>::describe() const
{
    return cat("channels=", channels, ";kernel_size=", kernelSize);
}

// ---- GatedDeltaRule ------------------------------------------------------------------------------

GatedDeltaRuleOp GatedDeltaRuleOp::parse(FieldReader const& reader)
{
    GatedDeltaRuleOp op;
    op.numKHeads = reader.getInt("num_k_heads");
    op.numVHeads = reader.getInt("num_v_heads");
    METRALE_REQUIRE(op.numKHeads > 0 && op.numVHeads > 0 && op.numVHeads % op.numKHeads == 0,
        "fields 'num_k_heads', 'num_v_heads': expected positive counts, num_v_heads a multiple of num_k_heads, "
        "found ",
        op.numKHeads, " and ", op.numVHeads);
    METRALE_REQUIRE(op.numVHeads <= kMAX_GRID_YZ, "field 'num_v_heads': at most ", kMAX_GRID_YZ, " on CUDA, found ",
        op.numVHeads);
    op.headKDim = reader.getInt("head_k_dim");
    METRALE_REQUIRE(gdnOneOf(contract::kGDN_HEAD_K_DIMS, op.headKDim), "field 'head_k_dim': expected one of ",
        gdnListed(contract::kGDN_HEAD_K_DIMS), " (the CUDA kernel holds a state column in registers), found ",
        op.headKDim);
    op.headVDim = reader.getInt("head_v_dim");
    METRALE_REQUIRE(op.headVDim > 0 && op.headVDim % contract::kGDN_HEAD_V_BLOCK == 0,
        "field 'head_v_dim': expected a positive multiple of ", contract::kGDN_HEAD_V_BLOCK,
        " (one warp a block of value columns), found ", op.headVDim);
    op.names = NodeNames::parse(reader);
    return op;
}

template <>
bool OpPluginOf<GatedDeltaRuleOp>::isDynamic(int32_t input, int32_t dim, int32_t /*rank*/) const
{
    // x's and ba's batch and tokens, state's batch.
    return ((input == kX_IDX || input == kBA_IDX) && (dim == kGDN_BATCH_DIM || dim == kGDN_SEQ_DIM))
        || (input == kSTATE_IDX && dim == 0);
}

template <>
void OpPluginOf<GatedDeltaRuleOp>::checkDims(Dims const* dims, int32_t /*nbInputs*/, bool allowWildcards) const
{
    Dims const& x = dims[kX_IDX];
    METRALE_REQUIRE(gdnShaped(x, {kANY, kANY, width()}, allowWildcards),
        "x: expected [B, S, 2*num_k_heads*head_k_dim + num_v_heads*head_v_dim=", width(), "], found ",
        dimsToString(x));
    int64_t const b = x.d[kGDN_BATCH_DIM];
    int64_t const s = x.d[kGDN_SEQ_DIM];
    METRALE_REQUIRE(gdnShaped(dims[kBA_IDX], {b, s, 2LL * numVHeads}, allowWildcards), "ba (input 1): expected [B=", b,
        ", S=", s, ", 2*num_v_heads=", 2 * numVHeads, "], found ", dimsToString(dims[kBA_IDX]));
    for (int32_t i : {kA_LOG_IDX, kDT_BIAS_IDX})
    {
        METRALE_REQUIRE(gdnShaped(dims[i], {numVHeads}, allowWildcards), i == kA_LOG_IDX ? "A_log" : "dt_bias",
            " (input ", i, "): expected [num_v_heads=", numVHeads, "], found ", dimsToString(dims[i]));
    }
    METRALE_REQUIRE(gdnShaped(dims[kSTATE_IDX], {b, numVHeads, headKDim, headVDim}, allowWildcards),
        "state (input 4): expected [B=", b, ", num_v_heads=", numVHeads, ", head_k_dim=", headKDim,
        ", head_v_dim=", headVDim, "], found ", dimsToString(dims[kSTATE_IDX]));
    METRALE_REQUIRE(b <= kMAX_GRID_YZ, "x: at most ", kMAX_GRID_YZ, " sequences a launch, found ", b);
}

template <>
void OpPluginOf<GatedDeltaRuleOp>::outputShapes(DimsExprs const* in, DimsExprs* out, nvinfer1::IExprBuilder& b) const
{
    out[kRULE_Y_IDX].nbDims = 4;
    out[kRULE_Y_IDX].d[0] = in[kX_IDX].d[kGDN_BATCH_DIM];
    out[kRULE_Y_IDX].d[1] = in[kX_IDX].d[kGDN_SEQ_DIM];
    out[kRULE_Y_IDX].d[2] = b.constant(numVHeads);
    out[kRULE_Y_IDX].d[3] = b.constant(headVDim);
    out[kSTATE_OUT_IDX].nbDims = 4;
    out[kSTATE_OUT_IDX].d[0] = in[kX_IDX].d[kGDN_BATCH_DIM];
    out[kSTATE_OUT_IDX].d[1] = b.constant(numVHeads);
    out[kSTATE_OUT_IDX].d[2] = b.constant(headKDim);
    out[kSTATE_OUT_IDX].d[3] = b.constant(headVDim);
}

template <>
std::vector<Dims> OpPluginOf<GatedDeltaRuleOp>::outputDims(Dims const* in) const
{
    int64_t const b = in[kX_IDX].d[kGDN_BATCH_DIM];
    return {gdnDims({b, in[kX_IDX].d[kGDN_SEQ_DIM], numVHeads, headVDim}), gdnDims({b, numVHeads, headKDim, headVDim})};
}

template <>
cudaError_t OpPluginOf<GatedDeltaRuleOp>::launch(OpTensors const& t) const
{
    Dims const& x = t.inDesc[kX_IDX].dims;
    return metrale_gated_delta_rule(t.in[kX_IDX], t.xDType, t.in[kBA_IDX], t.in[kA_LOG_IDX], t.in[kDT_BIAS_IDX],
        static_cast<float const*>(t.in[kSTATE_IDX]), t.out[kRULE_Y_IDX], static_cast<float*>(t.out[kSTATE_OUT_IDX]),
        x.d[kGDN_BATCH_DIM], x.d[kGDN_SEQ_DIM], numKHeads, numVHeads, headKDim, headVDim, t.stream);
}

template <>
std::string OpPluginOf<GatedDeltaRuleOp>::describe() const
{
    return cat("num_k_heads=", numKHeads, ";num_v_heads=", numVHeads, ";head_k_dim=", headKDim,
        ";head_v_dim=", headVDim);
}

} // namespace plugin
} // namespace metrale
