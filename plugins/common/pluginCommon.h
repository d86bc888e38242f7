/*
 * Shared helpers of the metrale TensorRT plugins: errors, reporting, plugin-field parsing and
 * writing, data-type mapping.
 *
 * Invariants:
 * - Nothing here throws across a TensorRT interface: plugin methods catch PluginError (and any
 *   std::exception) and hand the message to reportError(), which goes to the error recorder when
 *   one is attached, otherwise to the logger TensorRT gave through setLoggerFinder(), otherwise to
 *   stderr. No path aborts the host process.
 * - Field names and types are those of docs/ops.md: ints as kINT32, strings as kCHAR. The parser
 *   also accepts the other integer widths and strings with or without a trailing NUL, because
 *   callers (the ONNX parser, Polygraphy, hand-written code) differ there.
 */
#ifndef METRALE_PLUGIN_COMMON_H
#define METRALE_PLUGIN_COMMON_H

#include "NvInferRuntime.h"
#include "metrale/kernels.h"

#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace metrale
{
namespace plugin
{

//! The namespace every metrale plugin registers under (docs/ops.md; each op's format names its own
//! kPLUGIN_VERSION, as metrale_export/contract.py does).
constexpr char const* kPLUGIN_NAMESPACE{"metrale"};

//! An invalid argument or state found by a plugin method; carries the TensorRT error code to report.
class PluginError : public std::runtime_error
{
public:
    explicit PluginError(std::string const& message,
        nvinfer1::ErrorCode code = nvinfer1::ErrorCode::kINVALID_ARGUMENT)
        : std::runtime_error(message)
        , mCode(code)
    {
    }

    nvinfer1::ErrorCode code() const noexcept
    {
        return mCode;
    }

private:
    nvinfer1::ErrorCode mCode;
};

//! Concatenates anything streamable into one message.
template <typename... Parts>
std::string cat(Parts const&... parts)
{
    std::ostringstream out;
    (out << ... << parts);
    return out.str();
}

//! Throws a PluginError (kINVALID_ARGUMENT) with the concatenated message when cond is false. The
//! message is built only on failure, so checks stay cheap in enqueue().
#define METRALE_REQUIRE(cond, ...)                                                                     \
    do                                                                                                 \
    {                                                                                                  \
        if (!(cond))                                                                                   \
        {                                                                                              \
            throw ::metrale::plugin::PluginError(::metrale::plugin::cat(__VA_ARGS__));                 \
        }                                                                                              \
    } while (0)

//! The logger TensorRT handed to setLoggerFinder(), or nullptr.
nvinfer1::ILogger* pluginLogger() noexcept;

//! Stores the logger finder (the library entry point setLoggerFinder forwards here).
void setPluginLoggerFinder(nvinfer1::ILoggerFinder* finder) noexcept;

//! Reports an error: to recorder if non-null, else to the logger, else to stderr.
void reportError(nvinfer1::IErrorRecorder* recorder, nvinfer1::ErrorCode code, std::string const& message) noexcept;

//! Logs a warning to the logger if there is one (warnings never go to the error recorder).
void reportWarning(std::string const& message) noexcept;

//! Short name of a TensorRT data type, for messages ("kHALF").
char const* dataTypeName(nvinfer1::DataType type) noexcept;

//! The kernels' dtype code of x (MetraleDType); throws for a type the ops do not take as x.
int32_t activationDType(nvinfer1::DataType type);

//! True for the types x (and y) may have: float32, float16, bfloat16.
bool isActivationType(nvinfer1::DataType type) noexcept;

//! Parses a PluginFieldCollection by name. Unknown field names are an error (a typo in an exporter
//! or a mismatched contract version must not be silently ignored); a field given twice is an error.
class FieldReader
{
public:
    //! @param known the fields the op accepts: the creator's getFieldNames() table.
    FieldReader(nvinfer1::PluginFieldCollection const* fc, nvinfer1::PluginFieldCollection const& known);

    //! A required integer field.
    int32_t getInt(char const* name) const;
    //! An optional integer field.
    int32_t getInt(char const* name, int32_t defaultValue) const;
    //! A required string field.
    std::string getString(char const* name) const;
    //! An optional string field.
    std::string getString(char const* name, std::string const& defaultValue) const;

private:
    nvinfer1::PluginField const* find(char const* name) const;
    int32_t toInt(nvinfer1::PluginField const& field) const;
    std::string toString(nvinfer1::PluginField const& field) const;

    nvinfer1::PluginFieldCollection const* mFc;
};

//! Builds the PluginFieldCollection a plugin serializes, as the Visitor of an op's visitFields.
//! The fields point into the plugin's own members, so the collection must be rebuilt (not copied)
//! after the plugin is copied.
class FieldWriter
{
public:
    void clear() noexcept
    {
        mFields.clear();
        mCollection = nvinfer1::PluginFieldCollection{};
    }

    void intField(char const* name, int32_t const& value)
    {
        mFields.emplace_back(name, &value, nvinfer1::PluginFieldType::kINT32, 1);
    }

    //! Strings are written without a NUL; length is the number of characters.
    void stringField(char const* name, std::string const& value)
    {
        mFields.emplace_back(
            name, value.c_str(), nvinfer1::PluginFieldType::kCHAR, static_cast<int32_t>(value.size()));
    }

    nvinfer1::PluginFieldCollection const* collection() noexcept
    {
        mCollection.nbFields = static_cast<int32_t>(mFields.size());
        mCollection.fields = mFields.data();
        return &mCollection;
    }

private:
    std::vector<nvinfer1::PluginField> mFields;
    nvinfer1::PluginFieldCollection mCollection{};
};

//! The fields a creator advertises through getFieldNames(): names and types, no data. Built once,
//! by fill(*this) walking an op's visitFields with this as the Visitor.
class FieldNames
{
public:
    template <typename Fill>
    explicit FieldNames(Fill fill)
    {
        fill(*this);
        mCollection.nbFields = static_cast<int32_t>(mFields.size());
        mCollection.fields = mFields.data();
    }
    FieldNames(FieldNames const&) = delete;
    FieldNames& operator=(FieldNames const&) = delete;

    void intField(char const* name, int32_t const&)
    {
        mFields.emplace_back(name, nullptr, nvinfer1::PluginFieldType::kINT32, 1);
    }
    void stringField(char const* name, std::string const&)
    {
        mFields.emplace_back(name, nullptr, nvinfer1::PluginFieldType::kCHAR, 1);
    }

    nvinfer1::PluginFieldCollection const* collection() const noexcept
    {
        return &mCollection;
    }

private:
    std::vector<nvinfer1::PluginField> mFields;
    nvinfer1::PluginFieldCollection mCollection{};
};

//! Maps the value of an enumerated string field to its code, e.g. weight_scale_granularity
//! "channel" -> kMETRALE_WSCALE_CHANNEL; throws "field '<field>': expected a or b, found '<value>'".
int32_t parseChoice(char const* field, std::string const& value,
    std::initializer_list<std::pair<char const*, int32_t>> choices);

//! Parses a flag field (0 or 1).
bool parseFlag(FieldReader const& reader, char const* name);

//! Parses activation_format against the values an op allows (docs/ops.md, Activation formats).
int32_t parseActivationFormat(std::string const& value, char const* const* allowed, int32_t nbAllowed);

//! The attribute spelling of an activation format code ("bf16").
char const* activationFormatName(int32_t format) noexcept;

} // namespace plugin
} // namespace metrale

#endif // METRALE_PLUGIN_COMMON_H
