/*
 * The IPluginV3 machinery every metrale plugin shares, dense (ProjectionPlugin) and grouped-expert
 * (GroupedProjectionPlugin) alike: the capability interfaces, the namespace, one output y of x's
 * type, the build and run-time checks in the order TensorRT calls them, workspace, timing-cache ID,
 * enqueue, error reporting with the plugin's identity, context attachment and field serialization.
 * The two layouts keep only what differs: their inputs, shapes and messages; an op's format
 * (W4A16Format, W8A8Format, W4A4Format) keeps its own fields, weight inputs and launcher calls.
 *
 * Invariants:
 * - Every TensorRT-facing method is noexcept: failures are reported (pluginCommon.h) and turned
 *   into a non-zero status, a nullptr, 0 or false, never an exception or an abort.
 * - An op's fields are listed once, by its visitFields: the creator's field table, the names the
 *   parser accepts and the serialized fields all walk that list, so they cannot disagree.
 * - getFieldsToSerialize rebuilds the fields on every call, so they point into this object, also
 *   after a copy.
 * - A plugin attached to a context reports to that context's error recorder.
 */
#ifndef METRALE_PLUGIN_BASE_H
#define METRALE_PLUGIN_BASE_H

#include "pluginCommon.h"

#include <string>
#include <vector>

namespace metrale
{
namespace plugin
{

//! Positions of x (the first input) and of the only output, in TensorRT's numbering.
constexpr int32_t kX_IDX{0};
constexpr int32_t kY_IDX{0};

//! One input of the op: its contract name, TensorRT type and static shape (-1: M, grouped ops).
struct InputSpec
{
    char const* name;
    nvinfer1::DataType type;
    std::vector<int64_t> dims;
};

//! family and name, the last fields of every op.
struct NodeNames
{
    std::string family;
    std::string name;

    static NodeNames parse(FieldReader const& reader);
    template <typename Visitor>
    void visit(Visitor& v) const
    {
        v.stringField("family", family);
        v.stringField("name", name);
    }
};

//! The attributes every projection op has (docs/ops.md, Attributes).
struct CommonAttributes
{
    int32_t n{0};
    int32_t k{0};
    int32_t activationFormat{kMETRALE_ACT_BF16};
    int32_t hasBias{0};
    std::string activationFormatName;
    std::string family;
    std::string name;
};

//! Which op a plugin is: its ONNX op type and plugin version (its contract::<Op>'s kOP_TYPE and
//! kVERSION).
struct OpIdentity
{
    char const* type;
    char const* version;
};

//! Parses n, k, activation_format, has_bias, family and name; activation_format must be one of
//! the nbFormats allowedFormats (absent: the contract's default, which the reader knows); an op
//! with no activation formats (nbFormats 0: FloatProj) has no such field.
CommonAttributes parseCommonAttributes(FieldReader const& reader, char const* const* allowedFormats, int32_t nbFormats);

//! The same for an op's contract::<Op>::kACTIVATION_FORMATS.
template <int32_t N>
CommonAttributes parseCommonAttributes(FieldReader const& reader, char const* const (&allowedFormats)[N])
{
    return parseCommonAttributes(reader, allowedFormats, N);
}

//! The first fields of every op, n and k (a Visitor has intField(name, value) and
//! stringField(name, value): FieldWriter, FieldTable).
template <typename Visitor>
void visitHeadFields(CommonAttributes const& a, Visitor& v)
{
    v.intField("n", a.n);
    v.intField("k", a.k);
}

//! The last fields of every op: has_bias, family, name.
template <typename Visitor>
void visitTailFields(CommonAttributes const& a, Visitor& v)
{
    v.intField("has_bias", a.hasBias);
    v.stringField("family", a.family);
    v.stringField("name", a.name);
}

//! The inputs after x of an op from its contract table (Op::kINPUTS: names, types, which are
//! optional), with dims, one per table entry in table order; an optional input is present when its
//! gate field is 1 (an enumerated gate: when it has the value gateValue), the gate values read off
//! the op's field list by visit(FieldValues&).
template <int32_t N, typename Visit>
std::vector<InputSpec> contractInputs(
    contract::Input const (&table)[N], std::vector<std::vector<int64_t>> const& dims, Visit visit)
{
    METRALE_REQUIRE(static_cast<int32_t>(dims.size()) == N, "internal: ", dims.size(), " input shapes for the ", N,
        " inputs of metrale/contract.h");
    FieldValues gates;
    visit(gates);
    std::vector<InputSpec> specs;
    for (int32_t i = 0; i < N; ++i)
    {
        contract::Input const& in = table[i];
        bool const present = in.gate == nullptr
            || (in.gateValue == nullptr ? gates.at(in.gate) != 0 : gates.text(in.gate) == in.gateValue);
        if (present)
        {
            specs.push_back({table[i].name, dataType(table[i].type), dims[i]});
        }
    }
    return specs;
}

//! The tensors of one enqueue after x (and the grouped ops' topk_ids), by contract name.
class InputTensors
{
public:
    //! specs: the inputs present, in order; pointers: TensorRT's, from the first of them.
    InputTensors(std::vector<InputSpec> const& specs, void const* const* pointers)
        : mSpecs(specs)
        , mPointers(pointers)
    {
    }

    //! The tensor named name; throws when the op has no such input (a launcher asking for the
    //! wrong name must fail loudly, not read nullptr).
    template <typename T = void>
    T const* required(char const* name) const
    {
        return static_cast<T const*>(find(name));
    }

    //! The tensor named name when present (its gate attribute is 1), else nullptr.
    template <typename T = void>
    T const* optional(char const* name, int32_t present) const
    {
        return present ? required<T>(name) : nullptr;
    }

private:
    void const* find(char const* name) const;

    std::vector<InputSpec> const& mSpecs;
    void const* const* mPointers;
};

//! What enqueue hands an op's launcher: x, y, the rows and the scratch; topkIds and topkWeights
//! only for the grouped ops (nullptr otherwise, and topkWeights also for combine=0).
struct LaunchArgs
{
    void const* x{nullptr};
    int32_t xDType{0};
    void* y{nullptr};
    int64_t m{0};
    void* workspace{nullptr};
    size_t workspaceBytes{0};
    cudaStream_t stream{nullptr};
    int32_t const* topkIds{nullptr};
    void const* topkWeights{nullptr};
};

//! "[d0, d1, ...]" for messages.
std::string dimsToString(nvinfer1::Dims const& dims);

//! The dims and types of TensorRT's build-time tensor descriptions.
void collectDescriptions(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
    std::vector<nvinfer1::Dims>& dims, std::vector<nvinfer1::DataType>& types);
//! The same at run time; throws unless every input is linear.
void collectDescriptions(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, std::vector<nvinfer1::Dims>& dims,
    std::vector<nvinfer1::DataType>& types);

//! The dims of symbolic input shapes, -1 where not constant. Only dimension 0 of an input for which
//! isRows(i) holds may be dynamic; any other throws "... must be static (<dynamicNote>)".
template <typename IsRows>
std::vector<nvinfer1::Dims> staticDims(
    nvinfer1::DimsExprs const* inputs, int32_t nbInputs, IsRows isRows, char const* dynamicNote)
{
    std::vector<nvinfer1::Dims> dims(nbInputs);
    for (int32_t i = 0; i < nbInputs; ++i)
    {
        dims[i].nbDims = inputs[i].nbDims;
        METRALE_REQUIRE(inputs[i].nbDims >= 0 && inputs[i].nbDims <= nvinfer1::Dims::MAX_DIMS, "input ", i,
            ": bad rank ", inputs[i].nbDims);
        for (int32_t j = 0; j < inputs[i].nbDims; ++j)
        {
            nvinfer1::IDimensionExpr const* e = inputs[i].d[j];
            METRALE_REQUIRE(e != nullptr, "input ", i, ": dimension ", j, " has no expression");
            METRALE_REQUIRE((j == 0 && isRows(i)) || e->isConstant(), "input ", i, ": dimension ", j,
                " must be static (", dynamicNote, ")");
            dims[i].d[j] = e->isConstant() ? e->getConstantValue() : -1;
        }
    }
    return dims;
}

//! Runs a TensorRT-facing method's body: an exception becomes a report (with the plugin's
//! identity and the method) and the method returns onError.
#define METRALE_GUARDED(method, onError, body)                                                         \
    try                                                                                                \
    {                                                                                                  \
        body                                                                                           \
    }                                                                                                  \
    catch (std::exception const& e)                                                                    \
    {                                                                                                  \
        reportException(method, e);                                                                    \
    }                                                                                                  \
    catch (...)                                                                                        \
    {                                                                                                  \
        reportUnknownException(method);                                                                \
    }                                                                                                  \
    return onError;

//! What every metrale plugin is, projection or not (PluginBase, OpPlugin): the capability
//! interfaces, its identity (op type, version, namespace, node name), error reporting with that
//! identity, context attachment and the serialized fields.
class PluginCore : public nvinfer1::IPluginV3,
                   public nvinfer1::IPluginV3OneCore,
                   public nvinfer1::IPluginV3OneBuild,
                   public nvinfer1::IPluginV3OneRuntime
{
public:
    ~PluginCore() override = default;

    // IPluginV3
    nvinfer1::IPluginCapability* getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept override;

    // IPluginV3OneCore
    char const* getPluginName() const noexcept override
    {
        return mOp.type;
    }
    char const* getPluginVersion() const noexcept override
    {
        return mOp.version;
    }
    char const* getPluginNamespace() const noexcept override
    {
        return kPLUGIN_NAMESPACE;
    }

    // IPluginV3OneRuntime
    nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* context) noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldsToSerialize() noexcept override;

protected:
    PluginCore(OpIdentity op, std::string layerName)
        : mOp(op)
        , mLayerName(std::move(layerName))
    {
    }
    PluginCore(PluginCore const&) = default;
    PluginCore& operator=(PluginCore const&) = delete;

    //! The checkpoint name of the node (its name field), or "" (then messages show the layer name).
    virtual std::string const& nodeName() const = 0;
    //! Throws unless nbInputs and nbOutputs are the op's, naming the tensors expected.
    virtual void checkCounts(int32_t nbInputs, int32_t nbOutputs) const = 0;
    //! Checks static dims against the contract; with allowWildcards, -1 (unknown at build time) passes.
    virtual void checkDims(nvinfer1::Dims const* dims, int32_t nbInputs, bool allowWildcards) const = 0;
    virtual void checkTypes(nvinfer1::DataType const* types, int32_t nbInputs) const = 0;
    //! configurePlugin's and onShapeChange's input checks (Desc: the build or run-time description).
    template <typename Desc>
    void checkDescriptions(Desc const* in, int32_t nbInputs, Desc const* out, int32_t nbOutputs,
        bool allowWildcards) const
    {
        checkCounts(nbInputs, nbOutputs);
        METRALE_REQUIRE(in != nullptr && out != nullptr, "null tensor descriptions");
        std::vector<nvinfer1::Dims> dims;
        std::vector<nvinfer1::DataType> types;
        collectDescriptions(in, nbInputs, dims, types);
        checkDims(dims.data(), nbInputs, allowWildcards);
        checkTypes(types.data(), nbInputs);
    }
    //! Appends every field, in contract order, pointing into this object's members.
    virtual void writeFields(FieldWriter& writer) const = 0;

    //! Reports an exception caught in method, with the plugin's identity.
    void reportException(char const* method, std::exception const& e) const noexcept;
    void reportUnknownException(char const* method) const noexcept;
    //! Throws the PluginError of a failed kernel launch for m rows (nothing on cudaSuccess).
    static void checkLaunch(cudaError_t status, int64_t m);

    OpIdentity mOp;
    std::string mLayerName;

private:
    std::string identity() const;

    nvinfer1::IErrorRecorder* mRecorder{nullptr};
    FieldWriter mFieldWriter;
};

//! The projections' base: one output y of x's type, [M, K] rows, the common attributes.
class PluginBase : public PluginCore
{
public:
    ~PluginBase() override = default;

    // IPluginV3OneBuild
    int32_t getNbOutputs() const noexcept override
    {
        return 1;
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
    // attachToContext, getFieldsToSerialize: PluginCore's

    //! The attributes, for tests and messages.
    CommonAttributes const& attributes() const noexcept
    {
        return mAttrs;
    }

protected:
    //! inputs: the op's inputs after its row inputs (x, and topk_ids for the grouped ops), in
    //! contract order, optional ones only when present.
    PluginBase(OpIdentity op, std::string layerName, CommonAttributes attrs, std::vector<InputSpec> inputs);
    PluginBase(PluginBase const&) = default;
    PluginBase& operator=(PluginBase const&) = delete;

    // The layout (ProjectionPlugin, GroupedProjectionPlugin): inputs, shapes and their messages.
    virtual int32_t expectedNbInputs() const = 0;
    // checkCounts, checkDims, checkTypes: PluginCore's, per layout.
    //! Whether input pos (not x) may have type for an x of xType.
    virtual bool supportsInputType(int32_t pos, nvinfer1::DataType type, nvinfer1::DataType xType) const = 0;
    //! Whether dimension 0 of input i is M, and the note that says so in messages.
    virtual bool isRowInput(int32_t i) const = 0;
    virtual char const* rowInputsNote() const = 0;
    //! x's rank: 2 ([M, K]), or 3 ([M, top_k, K], the grouped ops with combine=1).
    virtual int32_t xRank() const = 0;
    //! y's shape for m rows.
    virtual nvinfer1::Dims outputDims(int64_t m) const = 0;
    //! The layout's own attributes as sep-prefixed "key=value" (timing cache ID and metadata).
    virtual std::string describeLayout(char const* sep) const = 0;

    // The op (DenseProjPlugin<Format>, GroupedProjPlugin<Format>).
    //! Workspace bytes for m rows (the op's *_workspace_size launcher; x's dtype code).
    virtual size_t workspaceSize(int64_t m, int32_t xDType) const = 0;
    //! Runs the op's launcher; inputs are TensorRT's, in contract order.
    virtual cudaError_t launch(LaunchArgs args, void const* const* inputs) const = 0;
    //! The op-specific attributes as "key=value;..." (timing cache ID and metadata).
    virtual std::string describeOpAttributes() const = 0;
    std::string const& nodeName() const override
    {
        return mAttrs.name;
    }

    //! checkCounts for a layout: the message names the inputs (rowNames, the op's inputs, tailNames)
    //! and the fields that set their count (gates, e.g. "combine=1, ", then has_bias).
    void requireCounts(int32_t nbInputs, int32_t nbOutputs, char const* rowNames, char const* tailNames,
        std::string const& gates) const;

    CommonAttributes mAttrs;
    std::vector<InputSpec> mInputs;
    std::string mTimingCacheId;
    std::string mMetadata;

private:
    //! sep-prefixed activation_format (when the op has one) and the op's own attributes.
    std::string formatText(char const* sep) const;
};

//! The creator of a plugin: Plugin supplies Op (its contract::<Op>: type, version, fields) and
//! create(layerName, fc). kBUILD and kRUNTIME creation parse the same fields.
template <typename Plugin>
class ProjectionPluginCreator : public nvinfer1::IPluginCreatorV3One
{
public:
    nvinfer1::IPluginV3* createPlugin(
        char const* name, nvinfer1::PluginFieldCollection const* fc, nvinfer1::TensorRTPhase phase) noexcept override
    {
        try
        {
            return Plugin::create(name == nullptr ? "" : name, fc);
        }
        catch (PluginError const& e)
        {
            reportError(nullptr, e.code(),
                cat(kPLUGIN_NAMESPACE, "::", Plugin::Op::kOP_TYPE, " '", name == nullptr ? "" : name,
                    "' (createPlugin, ", phase == nvinfer1::TensorRTPhase::kBUILD ? "build" : "runtime", " phase): ",
                    e.what()));
        }
        catch (std::exception const& e)
        {
            reportError(nullptr, nvinfer1::ErrorCode::kINTERNAL_ERROR,
                cat(kPLUGIN_NAMESPACE, "::", Plugin::Op::kOP_TYPE, " (createPlugin): ", e.what()));
        }
        catch (...)
        {
            reportError(nullptr, nvinfer1::ErrorCode::kINTERNAL_ERROR,
                cat(kPLUGIN_NAMESPACE, "::", Plugin::Op::kOP_TYPE, " (createPlugin): unknown exception"));
        }
        return nullptr;
    }

    nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override
    {
        static FieldNames const kNAMES{Plugin::Op::kFIELDS};
        return kNAMES.collection();
    }
    char const* getPluginName() const noexcept override
    {
        return Plugin::Op::kOP_TYPE;
    }
    char const* getPluginVersion() const noexcept override
    {
        return Plugin::Op::kVERSION;
    }
    char const* getPluginNamespace() const noexcept override
    {
        return kPLUGIN_NAMESPACE;
    }
};

//! The creator registered under an op's older plugin version (the contract's kRETIRED[kIndex], one
//! creator per retired version): it refuses every plugin, saying that the graph follows an older op
//! contract and must be re-exported (docs/ops.md, "Older exports"), so an old graph is never read
//! with the new layout or arithmetic.
template <typename Plugin, int32_t kIndex = 0>
class RetiredPluginCreator : public ProjectionPluginCreator<Plugin>
{
    static_assert(kIndex >= 0 && kIndex < Plugin::Op::kNB_RETIRED, "the contract names no such retired version of this op");
    static constexpr contract::Retired kOLD{Plugin::Op::kRETIRED[kIndex]};

public:
    nvinfer1::IPluginV3* createPlugin(
        char const* name, nvinfer1::PluginFieldCollection const*, nvinfer1::TensorRTPhase) noexcept override
    {
        reportError(nullptr, nvinfer1::ErrorCode::kINVALID_ARGUMENT,
            cat(kPLUGIN_NAMESPACE, "::", Plugin::Op::kOP_TYPE, " '", name == nullptr ? "" : name, "': plugin version ",
                kOLD.version, " (", kOLD.change,
                ") is an older metrale op contract; this library implements version ", Plugin::Op::kVERSION,
                ": re-export the model with metrale-export"));
        return nullptr;
    }
    char const* getPluginVersion() const noexcept override
    {
        return kOLD.version;
    }
};

//! The creator registered under an op's older plugin version whose graphs the current version
//! reads as they are (the contract's kCOMPATIBLE_VERSION: the newer version only added an attribute
//! value, contract.VALUE_SINCE): it creates the current plugin, so a node written as the older
//! version (no plugin_version attribute) builds with the same arithmetic.
template <typename Plugin>
class CompatiblePluginCreator : public ProjectionPluginCreator<Plugin>
{
    static_assert(Plugin::Op::kCOMPATIBLE_VERSION != nullptr, "the contract names no compatible version of this op");

public:
    char const* getPluginVersion() const noexcept override
    {
        return Plugin::Op::kCOMPATIBLE_VERSION;
    }
};

} // namespace plugin
} // namespace metrale

#endif // METRALE_PLUGIN_BASE_H
