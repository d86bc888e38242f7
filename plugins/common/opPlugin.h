/*
 * The plugins of the non-projection ops (RMSNorm, Router, Attention: docs/ops.md, "Norms, the float
 * projection and the router" and "Attention"). Their tensors are not a projection's x [M, K] ->
 * y [M, N]: an op may have several dynamic dimensions (the rows of a norm's [..., K], the batch,
 * query and key lengths of attention) and several outputs (a norm's residual_out, the router's
 * topk_ids and topk_weights). OpPlugin does every TensorRT method once, from the contract's input
 * and output tables (Op::kINPUTS, Op::kOUTPUTS: which are present by their gate fields, their
 * types, kLIKE_X meaning x's); OpPluginOf<Fields> is one op, whose fields struct (RMSNormOp,
 * RouterOp, AttentionOp, ...) and .cpp supply only its fields, shapes, workspace and the call into
 * the same C launcher the torch CUDA op calls.
 *
 * Invariants:
 * - The serialized fields are exactly the ONNX attributes (visitOpFields: the contract's names, the
 *   member types checked against Op::kFIELDS at creation), so kBUILD and kRUNTIME creation go
 *   through one parser.
 * - Shapes are checked at network construction (getOutputShapes, on the dimensions that are
 *   constant), at build (configurePlugin) and at run time (onShapeChange, enqueue).
 * - Only the dimensions the op names dynamic (isDynamic) may be symbolic; every tensor is linear.
 * - Every TensorRT-facing method is noexcept (pluginBase.h's METRALE_GUARDED).
 */
#ifndef METRALE_OP_PLUGIN_H
#define METRALE_OP_PLUGIN_H

#include "pluginBase.h"

#include <string>
#include <tuple>
#include <vector>

namespace metrale
{
namespace plugin
{

//! One tensor of a non-projection op: its contract name and type (kLIKE_X: the type of x).
struct TensorSpec
{
    char const* name;
    contract::TensorType type;
};

//! The entries of a contract table (Op::kINPUTS, Op::kOUTPUTS: nbEntries of them, possibly none)
//! present for the gate values the op's field walk binds (visit(FieldValues&)): always-present
//! ones, and optional ones whose int gate is 1.
template <typename Entry, typename Visit>
std::vector<TensorSpec> presentTensors(Entry const* table, size_t nbEntries, Visit visit)
{
    FieldValues gates;
    visit(gates);
    std::vector<TensorSpec> specs;
    for (size_t i = 0; i < nbEntries; ++i)
    {
        if (table[i].gate == nullptr || gates.at(table[i].gate) != 0)
        {
            specs.push_back({table[i].name, table[i].type});
        }
    }
    return specs;
}

//! presentTensors over a whole contract table (sizeof: a table may be empty, Router's kINPUTS).
#define METRALE_PRESENT(table, visit) presentTensors(table, sizeof(table) / sizeof((table)[0]), visit)

//! The pointers and dims of one enqueue: inputs from x, outputs from the first.
struct OpTensors
{
    nvinfer1::PluginTensorDesc const* inDesc{nullptr};
    void const* const* in{nullptr};
    void* const* out{nullptr};
    int32_t xDType{0};
    void* workspace{nullptr};
    size_t workspaceBytes{0};
    cudaStream_t stream{nullptr};
};

class OpPlugin : public PluginCore
{
public:
    ~OpPlugin() override = default;

    // IPluginV3OneBuild
    int32_t getNbOutputs() const noexcept override
    {
        return static_cast<int32_t>(mOutputs.size());
    }
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
    //! inputs: every input present, x first; outputs: every output present.
    OpPlugin(OpIdentity op, std::string layerName, std::vector<TensorSpec> inputs, std::vector<TensorSpec> outputs);
    OpPlugin(OpPlugin const&) = default;
    OpPlugin& operator=(OpPlugin const&) = delete;

    // The op (OpPluginOf<Fields>).
    //! Whether dimension dim of input (of rank rank) may be dynamic (symbolic at build).
    virtual bool isDynamic(int32_t input, int32_t dim, int32_t rank) const = 0;
    // checkDims (PluginCore's): every input's dims against the fields and each other.
    //! The outputs' expressions from the inputs'.
    virtual void outputShapes(nvinfer1::DimsExprs const* in, nvinfer1::DimsExprs* out,
        nvinfer1::IExprBuilder& builder) const = 0;
    //! The outputs' dims for concrete input dims.
    virtual std::vector<nvinfer1::Dims> outputDims(nvinfer1::Dims const* in) const = 0;
    //! Workspace bytes for input dims (the profile's max at build, the actual ones at enqueue).
    virtual size_t workspaceSize(nvinfer1::Dims const* in, int32_t xDType) const = 0;
    //! Runs the op's launcher.
    virtual cudaError_t launch(OpTensors const& t) const = 0;
    //! The op's fields as "key=value;..." (timing cache ID and metadata).
    virtual std::string describe() const = 0;
    //! The number of rows an enqueue covers, for messages.
    virtual int64_t rows(nvinfer1::Dims const* in) const = 0;

    std::vector<TensorSpec> mInputs;
    std::vector<TensorSpec> mOutputs;
    std::string mTimingCacheId;
    std::string mMetadata;

    //! The counts of the op's inputs and outputs present, naming them.
    void checkCounts(int32_t nbInputs, int32_t nbOutputs) const override;
    //! x an activation type, every other input its contract type.
    void checkTypes(nvinfer1::DataType const* types, int32_t nbInputs) const override;
};

//! The TensorRT type of a tensor of contract type type when x has type x.
nvinfer1::DataType tensorType(contract::TensorType type, nvinfer1::DataType x);

//! The base of a non-projection op's fields: its contract::<op type> and the last fields of every
//! op, family and name.
template <typename OpT>
struct OpFields
{
    using Op = OpT;
    NodeNames names;
};

//! Visits one field of a non-projection op (its int or float member) under the contract's name.
template <typename Visitor>
void visitOpField(Visitor& v, char const* name, int32_t const& value)
{
    v.intField(name, value);
}
template <typename Visitor>
void visitOpField(Visitor& v, char const* name, float const& value)
{
    v.floatField(name, value);
}

//! The fields of a non-projection op in contract order (a Visitor as in pluginBase.h): Fields::kMEMBERS,
//! the members of the fields before family and name in the order of Op::kFIELDS, each under its
//! contract name, then family and name. FieldListCheck (at creation) checks each member's type
//! against the contract's.
template <typename Fields, typename Visitor>
void visitOpFields(Fields const& fields, Visitor& v)
{
    using Op = typename Fields::Op;
    static_assert(std::tuple_size<decltype(Fields::kMEMBERS)>::value + 2 == contract::count(Op::kFIELDS),
        "kMEMBERS must name every field of the op's contract::<Op>::kFIELDS but family and name");
    int32_t i = 0;
    std::apply([&](auto... member) { (visitOpField(v, Op::kFIELDS[i++].name, fields.*member), ...); },
        Fields::kMEMBERS);
    fields.names.visit(v);
}

//! The plugin of one non-projection op. Fields (RMSNormOp, RouterOp, AttentionOp, CausalConv1dOp,
//! GatedDeltaRuleOp) holds the op's fields and supplies:
//! - Op and names, from its base OpFields<contract::<op type>>; kMEMBERS (visitOpFields);
//! - static Fields parse(FieldReader const&), which validates them.
//! The op's .cpp defines the members below declared without a body (explicit specializations of
//! them: the linker, --no-undefined, refuses a plugin library that lacks one); an op's header
//! declares the specializations it defines of workspaceSize (default: none) or rows (default: x's
//! dimension 0), so no file instantiates the default instead.
template <typename FieldsT>
class OpPluginOf final : public OpPlugin, private FieldsT
{
public:
    using Fields = FieldsT;
    using Op = typename Fields::Op;

    static OpPluginOf* create(std::string const& layerName, nvinfer1::PluginFieldCollection const* fc)
    {
        FieldReader const reader(fc, Op::kFIELDS);
        Fields fields = Fields::parse(reader);
        FieldListCheck check(Op::kOP_TYPE, Op::kFIELDS, contract::count(Op::kFIELDS));
        visitOpFields(fields, check);
        check.finish();
        return new OpPluginOf(layerName, std::move(fields));
    }

    nvinfer1::IPluginV3* clone() noexcept override
    {
        METRALE_GUARDED("clone", nullptr, { return new OpPluginOf(*this); })
    }

private:
    OpPluginOf(std::string layerName, Fields fields)
        : OpPlugin({Op::kOP_TYPE, Op::kVERSION}, std::move(layerName), inputsOf(fields),
            METRALE_PRESENT(Op::kOUTPUTS, [&](FieldValues& v) { visitOpFields(fields, v); }))
        , Fields(std::move(fields))
    {
    }
    OpPluginOf(OpPluginOf const&) = default;

    static std::vector<TensorSpec> inputsOf(Fields const& fields)
    {
        std::vector<TensorSpec> in{{Op::kX_NAME, contract::TensorType::kLIKE_X}};
        for (TensorSpec const& s : METRALE_PRESENT(Op::kINPUTS, [&](FieldValues& v) { visitOpFields(fields, v); }))
        {
            in.push_back(s);
        }
        return in;
    }

    std::string const& nodeName() const override
    {
        return this->names.name;
    }
    void writeFields(FieldWriter& writer) const override
    {
        visitOpFields(static_cast<Fields const&>(*this), writer);
    }

    // The op's own (its .cpp): OpPlugin's and PluginCore's virtuals.
    bool isDynamic(int32_t input, int32_t dim, int32_t rank) const override;
    void checkDims(nvinfer1::Dims const* dims, int32_t nbInputs, bool allowWildcards) const override;
    void outputShapes(nvinfer1::DimsExprs const* in, nvinfer1::DimsExprs* out,
        nvinfer1::IExprBuilder& builder) const override;
    std::vector<nvinfer1::Dims> outputDims(nvinfer1::Dims const* in) const override;
    cudaError_t launch(OpTensors const& t) const override;
    std::string describe() const override;

    // The defaults.
    size_t workspaceSize(nvinfer1::Dims const* /*in*/, int32_t /*xDType*/) const override
    {
        return 0;
    }
    int64_t rows(nvinfer1::Dims const* in) const override
    {
        return in[kX_IDX].d[0];
    }
};

//! Declares the members of OpPluginOf<FieldsT> that the op's .cpp defines as explicit
//! specializations, so that every translation unit that instantiates the plugin (the creators in
//! pluginLibrary.cpp) sees them declared before their use, as the standard requires. One line in
//! each op's header.
#define METRALE_OP_PLUGIN_SPECIALIZATIONS(FieldsT)                                                                   \
    template <>                                                                                                    \
    bool OpPluginOf<FieldsT>::isDynamic(int32_t input, int32_t dim, int32_t rank) const;                           \
    template <>                                                                                                    \
    void OpPluginOf<FieldsT>::checkDims(nvinfer1::Dims const* dims, int32_t nbInputs, bool allowWildcards) const;  \
    template <>                                                                                                    \
    void OpPluginOf<FieldsT>::outputShapes(                                                                        \
        nvinfer1::DimsExprs const* in, nvinfer1::DimsExprs* out, nvinfer1::IExprBuilder& builder) const;           \
    template <>                                                                                                    \
    std::vector<nvinfer1::Dims> OpPluginOf<FieldsT>::outputDims(nvinfer1::Dims const* in) const;                   \
    template <>                                                                                                    \
    cudaError_t OpPluginOf<FieldsT>::launch(OpTensors const& t) const;                                             \
    template <>                                                                                                    \
    std::string OpPluginOf<FieldsT>::describe() const

} // namespace plugin
} // namespace metrale

#endif // METRALE_OP_PLUGIN_H
