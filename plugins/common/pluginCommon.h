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
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace metrale
{
namespace plugin
{

//! The namespace every metrale plugin registers under: the contract's domain (metrale/contract.h,
//! generated from metrale_export/contract/, like every op's type, version and fields).
constexpr char const* kPLUGIN_NAMESPACE{contract::kDOMAIN};

//! Whether two C strings are equal, at compile time (static_assert on the contract's names).
constexpr bool sameText(char const* a, char const* b)
{
    return *a == *b && (*a == '\0' || sameText(a + 1, b + 1));
}

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

//! Parses a PluginFieldCollection by name against an op's contract fields (Op::kFIELDS). Unknown
//! field names are an error (a typo in an exporter or a mismatched contract version must not be
//! silently ignored); a field given twice is an error; an absent field takes the contract's default,
//! and a required one (no default) is an error.
class FieldReader
{
public:
    FieldReader(nvinfer1::PluginFieldCollection const* fc, contract::Field const* fields, int32_t nbFields);
    template <int32_t N>
    FieldReader(nvinfer1::PluginFieldCollection const* fc, contract::Field const (&fields)[N])
        : FieldReader(fc, fields, N)
    {
    }

    //! An integer field (kINT in the contract).
    int32_t getInt(char const* name) const;
    //! A string field (kSTRING in the contract).
    std::string getString(char const* name) const;
    //! A float field (kFLOAT in the contract): kFLOAT32, or kFLOAT64 that rounds to a finite float.
    float getFloat(char const* name) const;

private:
    //! The contract's field name, checked to have type; throws (internal) for a name it lacks.
    contract::Field const& field(char const* name, contract::FieldType type) const;
    nvinfer1::PluginField const* find(char const* name) const;
    int32_t toInt(nvinfer1::PluginField const& field) const;
    std::string toString(nvinfer1::PluginField const& field) const;
    float toFloat(nvinfer1::PluginField const& field) const;

    nvinfer1::PluginFieldCollection const* mFc;
    contract::Field const* mFields;
    int32_t mNbFields;
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

    void floatField(char const* name, float const& value)
    {
        mFields.emplace_back(name, &value, nvinfer1::PluginFieldType::kFLOAT32, 1);
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

//! The TensorRT type of a contract field type (kINT32, kCHAR, kFLOAT32).
nvinfer1::PluginFieldType pluginFieldType(contract::FieldType type) noexcept;

//! The TensorRT type of a contract tensor type; throws for kLIKE_X (the type of x, not one type).
nvinfer1::DataType dataType(contract::TensorType type);

//! The fields a creator advertises through getFieldNames(): the contract's names and types, no data.
class FieldNames
{
public:
    template <int32_t N>
    explicit FieldNames(contract::Field const (&fields)[N])
    {
        for (contract::Field const& f : fields)
        {
            mFields.emplace_back(f.name, nullptr, pluginFieldType(f.type), 1);
        }
        mCollection.nbFields = static_cast<int32_t>(mFields.size());
        mCollection.fields = mFields.data();
    }
    FieldNames(FieldNames const&) = delete;
    FieldNames& operator=(FieldNames const&) = delete;

    nvinfer1::PluginFieldCollection const* collection() const noexcept
    {
        return &mCollection;
    }

private:
    std::vector<nvinfer1::PluginField> mFields;
    nvinfer1::PluginFieldCollection mCollection{};
};

//! A Visitor of an op's visitFields that checks the fields it binds are the contract's, in order and
//! of the same types; finish() throws an internal PluginError naming both lists otherwise (a plugin
//! whose members drifted from metrale/contract.h must fail at creation, not serialize wrong fields).
class FieldListCheck
{
public:
    FieldListCheck(char const* op, contract::Field const* fields, int32_t nbFields)
        : mOp(op)
        , mFields(fields)
        , mNbFields(nbFields)
    {
    }
    void intField(char const* name, int32_t const&)
    {
        visit(name, contract::FieldType::kINT);
    }
    void stringField(char const* name, std::string const&)
    {
        visit(name, contract::FieldType::kSTRING);
    }
    void floatField(char const* name, float const&)
    {
        visit(name, contract::FieldType::kFLOAT);
    }
    void finish() const;

private:
    void visit(char const* name, contract::FieldType type);

    char const* mOp;
    contract::Field const* mFields;
    int32_t mNbFields;
    int32_t mNext{0};
    bool mOk{true};
    std::string mVisited;
};

//! The fields a visitFields walk binds, by name: an op's gate fields (has_*, or an enumerated
//! field such as W8A8Proj's activation_scale_granularity) for its inputs.
class FieldValues
{
public:
    void intField(char const* name, int32_t const& value)
    {
        mInts.emplace_back(name, value);
    }
    void stringField(char const* name, std::string const& value)
    {
        mStrings.emplace_back(name, value);
    }
    void floatField(char const*, float const&) {}
    //! The value of the int field name; throws (internal) when the walk did not visit it.
    int32_t at(char const* name) const;
    //! The value of the string field name; throws (internal) when the walk did not visit it.
    std::string const& text(char const* name) const;

private:
    std::vector<std::pair<char const*, int32_t>> mInts;
    std::vector<std::pair<char const*, std::string>> mStrings;
};

//! A Visitor of a format's visitFields that writes its fields as "key=value;..." (the timing cache
//! ID's and the metadata's op attributes), activation_format aside (PluginBase states it first).
//! A format has no float fields; one would not compile here.
class FieldText
{
public:
    void intField(char const* name, int32_t const& value)
    {
        add(name, std::to_string(value));
    }
    void stringField(char const* name, std::string const& value)
    {
        add(name, value);
    }
    std::string const& text() const noexcept
    {
        return mText;
    }

private:
    void add(char const* name, std::string const& value)
    {
        if (std::string(name) != "activation_format")
        {
            mText += (mText.empty() ? "" : ";") + std::string(name) + "=" + value;
        }
    }

    std::string mText;
};

//! The code of an enumerated string field's value: its index in the contract's values (the order
//! of the kernels' enum, e.g. W8A8Proj::kWEIGHT_SCALE_GRANULARITY_VALUES -> MetraleWeightScale);
//! throws "field '<field>': expected a or b, found '<value>'".
int32_t parseCode(char const* field, std::string const& value, char const* const* values, int32_t nbValues);
template <int32_t N>
int32_t parseCode(char const* field, std::string const& value, char const* const (&values)[N])
{
    return parseCode(field, value, values, N);
}

//! Throws "field '<field>': expected 32, 64 or 128, found <value>" unless value is one of values.
void requireValue(char const* field, int32_t value, int32_t const* values, int32_t nbValues);
template <int32_t N>
void requireValue(char const* field, int32_t value, int32_t const (&values)[N])
{
    requireValue(field, value, values, N);
}

//! Parses a flag field (0 or 1).
bool parseFlag(FieldReader const& reader, char const* name);

//! Parses an int field that must be positive; throws "field '<name>': expected a positive <what>,
//! found <value>".
int32_t parsePositive(FieldReader const& reader, char const* name, char const* what);

//! Parses activation_format against the values an op allows (docs/ops.md, Activation formats): the
//! code is the value's index in contract::kACTIVATION_FORMATS (MetraleActFormat).
int32_t parseActivationFormat(std::string const& value, char const* const* allowed, int32_t nbAllowed);

//! "a, b or c" for messages.
std::string listText(char const* const* values, int32_t nbValues);

//! The attribute spelling of an activation format code ("bf16").
char const* activationFormatName(int32_t format) noexcept;

} // namespace plugin
} // namespace metrale

#endif // METRALE_PLUGIN_COMMON_H
