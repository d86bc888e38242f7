/*
 * The dense projection plugins: Y[M, N] = X[M, K] W^T with the weights, scales and optional tensors
 * as further inputs (docs/ops.md). ProjectionPlugin is their layout (x [M, K], the weight inputs,
 * y [M, N]); DenseProjPlugin<Format> is the plugin of one op, whose format (W4A16Format,
 * W8A8Format, W4A4Format) supplies only what differs per op: its name, version, fields, weight
 * inputs, workspace size and launch. Everything TensorRT asks of a plugin lives in PluginBase.
 *
 * Invariants:
 * - M (rows of x) is the only dynamic dimension; K, N and every weight shape are static and
 *   checked against the fields at build (getOutputShapes, configurePlugin) and run time
 *   (onShapeChange, enqueue).
 * - y has the data type of x; every tensor is linear (row-major, contiguous).
 * - The serialized fields are exactly the ONNX attributes, so kBUILD and kRUNTIME creation go
 *   through one parser and a round trip reproduces the plugin.
 * - Every TensorRT-facing method is noexcept: failures are reported (pluginCommon.h) and turned
 *   into a non-zero status, a nullptr, 0 or false, never an exception or an abort.
 */
#ifndef METRALE_PROJECTION_PLUGIN_H
#define METRALE_PROJECTION_PLUGIN_H

#include "pluginBase.h"

#include <string>
#include <vector>

namespace metrale
{
namespace plugin
{

//! Position of the first weight input (after x) in TensorRT's numbering.
constexpr int32_t kFIRST_WEIGHT_IDX{1};

class ProjectionPlugin : public PluginBase
{
public:
    ~ProjectionPlugin() override = default;

protected:
    //! weights: the inputs after x, in contract order (optional ones only when present).
    ProjectionPlugin(OpIdentity op, std::string layerName, CommonAttributes attrs, std::vector<InputSpec> weights);
    ProjectionPlugin(ProjectionPlugin const&) = default;
    ProjectionPlugin& operator=(ProjectionPlugin const&) = delete;

    int32_t expectedNbInputs() const override
    {
        return kFIRST_WEIGHT_IDX + static_cast<int32_t>(mInputs.size());
    }
    void checkCounts(int32_t nbInputs, int32_t nbOutputs) const override;
    void checkDims(nvinfer1::Dims const* dims, int32_t nbInputs, bool allowWildcards) const override;
    void checkTypes(nvinfer1::DataType const* types, int32_t nbInputs) const override;
    bool supportsInputType(int32_t pos, nvinfer1::DataType type, nvinfer1::DataType xType) const override;
    bool isRowInput(int32_t i) const override
    {
        return i == kX_IDX;
    }
    char const* rowInputsNote() const override
    {
        return "only M, the rows of x, is dynamic";
    }
    int32_t xRank() const override
    {
        return 2;
    }
    nvinfer1::Dims outputDims(int64_t m) const override;
    std::string describeLayout(char const* /*sep*/) const override
    {
        return {};
    }
};

//! The walk of the fields that gate a format's inputs (its own, and has_bias), for contractInputs
//! in its formatInputs.
template <typename Format>
auto formatGates(Format const& format, CommonAttributes const& attrs)
{
    return [&format, &attrs](FieldValues& gates) {
        format.visitFields(attrs, gates);
        visitTailFields(attrs, gates);
    };
}

//! The fields of a projection op in contract order: n, k, the grouped op's routing fields (routing:
//! none for a dense op), the format's, has_bias, family, name: the one field list.
template <typename Format, typename Visitor, typename... Routing>
void visitProjectionFields(CommonAttributes const& attrs, Format const& format, Visitor& v, Routing const&... routing)
{
    visitHeadFields(attrs, v);
    (visitRoutingFields(routing, v), ...);
    format.visitFields(attrs, v);
    visitTailFields(attrs, v);
}

//! A format's own fields as "key=value;..." (FieldText), for the timing cache ID and the metadata.
template <typename Format>
std::string formatAttributes(Format const& format, CommonAttributes const& attrs)
{
    FieldText text;
    format.visitFields(attrs, text);
    return text.text();
}

//! A format's own fields, parsed and checked against the common ones (throws PluginError), and its
//! inputs after x in contract order (optional ones only when present; the grouped op stacks them):
//! each format's .cpp defines both (explicit specializations).
template <typename Format>
Format parseFormat(FieldReader const& reader, CommonAttributes const& attrs);
template <typename Format>
std::vector<InputSpec> formatInputs(Format const& format, CommonAttributes const& attrs);

//! The base of a format: its dense op's contract (metrale/contract.h: type, version, activation
//! formats, fields, inputs) and, for a format with a grouped-expert op, that op's (else void).
template <typename OpT, typename GroupedOpT = void>
struct ProjFormat
{
    using Op = OpT;
    using GroupedOp = GroupedOpT;
};

//! The plugin of a dense op. Format (W4A16Format, ...) supplies:
//! - Op, its contract::<op type>, from its base ProjFormat<Op, GroupedOp>;
//! - its fields and visitFields(attrs, visitor): the fields after n and k (after the routing fields
//!   in the grouped op) and before has_bias, family and name, in contract order, activation_format
//!   included;
//! and its .cpp defines parseFormat<Format>, formatInputs<Format>, and DenseProjPlugin<Format>'s
//! workspaceSize and launchKernel, the dense launcher calls (explicit specializations).
template <typename FormatT>
class DenseProjPlugin final : public ProjectionPlugin
{
public:
    using Format = FormatT;
    using Op = typename Format::Op;
    static_assert(Op::kGROUPED_OF == nullptr, "a dense plugin of a grouped-expert op");

    //! Parses and validates the fields (the same for kBUILD and kRUNTIME); throws PluginError.
    static DenseProjPlugin* create(std::string const& layerName, nvinfer1::PluginFieldCollection const* fc)
    {
        // The parser passes only the fields the creator lists (Op::kFIELDS; a plugin_version node
        // attribute, which the parser finds the creator by, never arrives here).
        FieldReader const reader(fc, Op::kFIELDS);
        // sizeof, not count(): an op with no activation format has an empty list (FloatProj).
        CommonAttributes attrs = parseCommonAttributes(reader, Op::kACTIVATION_FORMATS,
            static_cast<int32_t>(sizeof(Op::kACTIVATION_FORMATS) / sizeof(char const*)));
        Format format = parseFormat<Format>(reader, attrs);
        FieldListCheck check(Op::kOP_TYPE, Op::kFIELDS, contract::count(Op::kFIELDS));
        visitProjectionFields(attrs, format, check);
        check.finish();
        return new DenseProjPlugin(layerName, std::move(attrs), std::move(format));
    }

    nvinfer1::IPluginV3* clone() noexcept override
    {
        METRALE_GUARDED("clone", nullptr, { return new DenseProjPlugin(*this); })
    }

private:
    DenseProjPlugin(std::string layerName, CommonAttributes attrs, Format format)
        : ProjectionPlugin({Op::kOP_TYPE, Op::kVERSION}, std::move(layerName), attrs, formatInputs(format, attrs))
        , mFormat(std::move(format))
    {
    }
    DenseProjPlugin(DenseProjPlugin const&) = default;

    cudaError_t launch(LaunchArgs args, void const* const* inputs) const override
    {
        return launchKernel(InputTensors(mInputs, inputs + kFIRST_WEIGHT_IDX), args);
    }
    // The format's launcher calls (its .cpp: explicit specializations).
    size_t workspaceSize(int64_t m, int32_t xDType) const override;
    cudaError_t launchKernel(InputTensors const& in, LaunchArgs const& run) const;
    std::string describeOpAttributes() const override
    {
        return formatAttributes(mFormat, mAttrs);
    }
    void writeFields(FieldWriter& writer) const override
    {
        visitProjectionFields(mAttrs, mFormat, writer);
    }

    Format mFormat;
};

//! Declare what a format's .cpp files define as explicit specializations, before the creators
//! instantiate the plugins (pluginLibrary.cpp, after the format headers): the format's parseFormat
//! and formatInputs, and the launcher calls of PluginT<Format> (DenseProjPlugin, GroupedProjPlugin).
#define METRALE_PROJ_FORMAT_SPECIALIZATIONS(FormatT)                                                                 \
    template <>                                                                                                    \
    FormatT parseFormat<FormatT>(FieldReader const& reader, CommonAttributes const& attrs);                        \
    template <>                                                                                                    \
    std::vector<InputSpec> formatInputs<FormatT>(FormatT const& format, CommonAttributes const& attrs)
#define METRALE_LAUNCH_SPECIALIZATIONS(PluginT, FormatT)                                                             \
    template <>                                                                                                    \
    size_t PluginT<FormatT>::workspaceSize(int64_t m, int32_t xDType) const;                                       \
    template <>                                                                                                    \
    cudaError_t PluginT<FormatT>::launchKernel(InputTensors const& in, LaunchArgs const& run) const

} // namespace plugin
} // namespace metrale

#endif // METRALE_PROJECTION_PLUGIN_H
