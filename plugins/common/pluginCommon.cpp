/*
 * Error reporting and plugin-field parsing shared by the metrale plugins (see pluginCommon.h).
 */
#include "pluginCommon.h"

#include <cmath>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>

namespace metrale
{
namespace plugin
{

namespace
{
// Set once by TensorRT through setLoggerFinder(); read from any thread.
std::atomic<nvinfer1::ILoggerFinder*> gLoggerFinder{nullptr};
} // namespace

void setPluginLoggerFinder(nvinfer1::ILoggerFinder* finder) noexcept
{
    nvinfer1::ILoggerFinder* expected = nullptr;
    // The first finder wins: TensorRT may call the entry point again when a library is re-loaded.
    gLoggerFinder.compare_exchange_strong(expected, finder);
}

nvinfer1::ILogger* pluginLogger() noexcept
{
    nvinfer1::ILoggerFinder* finder = gLoggerFinder.load();
    if (finder == nullptr)
    {
        return nullptr;
    }
    try
    {
        return finder->findLogger();
    }
    catch (...)
    {
        return nullptr;
    }
}

void reportError(nvinfer1::IErrorRecorder* recorder, nvinfer1::ErrorCode code, std::string const& message) noexcept
{
    if (recorder != nullptr)
    {
        recorder->reportError(code, message.c_str());
        return;
    }
    if (nvinfer1::ILogger* logger = pluginLogger())
    {
        logger->log(nvinfer1::ILogger::Severity::kERROR, message.c_str());
        return;
    }
    std::fprintf(stderr, "[metrale plugin] error: %s\n", message.c_str());
}

void reportWarning(std::string const& message) noexcept
{
    if (nvinfer1::ILogger* logger = pluginLogger())
    {
        logger->log(nvinfer1::ILogger::Severity::kWARNING, message.c_str());
    }
}

char const* dataTypeName(nvinfer1::DataType type) noexcept
{
    using nvinfer1::DataType;
    switch (type)
    {
    case DataType::kFLOAT: return "kFLOAT";
    case DataType::kHALF: return "kHALF";
    case DataType::kINT8: return "kINT8";
    case DataType::kINT32: return "kINT32";
    case DataType::kBOOL: return "kBOOL";
    case DataType::kUINT8: return "kUINT8";
    case DataType::kFP8: return "kFP8";
    case DataType::kBF16: return "kBF16";
    case DataType::kINT64: return "kINT64";
    default: return "an unsupported type";
    }
}

bool isActivationType(nvinfer1::DataType type) noexcept
{
    using nvinfer1::DataType;
    return type == DataType::kFLOAT || type == DataType::kHALF || type == DataType::kBF16;
}

int32_t activationDType(nvinfer1::DataType type)
{
    using nvinfer1::DataType;
    switch (type)
    {
    case DataType::kFLOAT: return kMETRALE_FLOAT32;
    case DataType::kHALF: return kMETRALE_FLOAT16;
    case DataType::kBF16: return kMETRALE_BFLOAT16;
    default: break;
    }
    throw PluginError(cat("x: expected kFLOAT, kHALF or kBF16, found ", dataTypeName(type)));
}

FieldReader::FieldReader(nvinfer1::PluginFieldCollection const* fc, contract::Field const* fields, int32_t nbFields)
    : mFc(fc)
    , mFields(fields)
    , mNbFields(nbFields)
{
    METRALE_REQUIRE(fc != nullptr, "the plugin field collection is null");
    METRALE_REQUIRE(fc->nbFields >= 0 && (fc->nbFields == 0 || fc->fields != nullptr),
        "the plugin field collection has ", fc->nbFields, " fields but no field array");
    for (int32_t i = 0; i < fc->nbFields; ++i)
    {
        char const* name = fc->fields[i].name;
        METRALE_REQUIRE(name != nullptr, "plugin field ", i, " has no name");
        bool isKnown = false;
        for (int32_t k = 0; k < nbFields; ++k)
        {
            isKnown = isKnown || std::strcmp(fields[k].name, name) == 0;
        }
        if (!isKnown)
        {
            std::string expected;
            for (int32_t k = 0; k < nbFields; ++k)
            {
                expected += expected.empty() ? fields[k].name : cat(", ", fields[k].name);
            }
            throw PluginError(cat("unknown field '", name, "'; expected fields: ", expected,
                " (docs/ops.md, the metrale op contract)"));
        }
        for (int32_t j = 0; j < i; ++j)
        {
            METRALE_REQUIRE(std::strcmp(fc->fields[j].name, name) != 0, "field '", name, "' is given twice");
        }
    }
}

contract::Field const& FieldReader::field(char const* name, contract::FieldType type) const
{
    for (int32_t k = 0; k < mNbFields; ++k)
    {
        if (std::strcmp(mFields[k].name, name) == 0 && mFields[k].type == type)
        {
            return mFields[k];
        }
    }
    throw PluginError(cat("internal: the plugin reads field '", name, "', which metrale/contract.h does not give "
                          "this op with that type"),
        nvinfer1::ErrorCode::kINTERNAL_ERROR);
}

nvinfer1::PluginField const* FieldReader::find(char const* name) const
{
    for (int32_t i = 0; i < mFc->nbFields; ++i)
    {
        if (std::strcmp(mFc->fields[i].name, name) == 0)
        {
            return &mFc->fields[i];
        }
    }
    return nullptr;
}

namespace
{
//! The value of a one-element numeric field, widened to Wide: int64_t (kINT32, kINT64, kINT16,
//! kINT8; what "integer") or double (kFLOAT32, kFLOAT64; what "float"); throws "expected one <what>"
//! or "expected <expected>" (the type TensorRT writes) otherwise.
template <typename Wide>
Wide readOne(nvinfer1::PluginField const& field, char const* what, char const* expected)
{
    using nvinfer1::PluginFieldType;
    METRALE_REQUIRE(field.data != nullptr && field.length == 1, "field '", field.name, "': expected one ", what,
        ", found length ", field.length, field.data == nullptr ? " and no data" : "");
    void const* data = field.data;
    if constexpr (std::is_integral<Wide>::value)
    {
        switch (field.type)
        {
        case PluginFieldType::kINT32: return *static_cast<int32_t const*>(data);
        case PluginFieldType::kINT64: return *static_cast<int64_t const*>(data);
        case PluginFieldType::kINT16: return *static_cast<int16_t const*>(data);
        case PluginFieldType::kINT8: return *static_cast<int8_t const*>(data);
        default: break;
        }
    }
    else
    {
        if (field.type == PluginFieldType::kFLOAT32)
        {
            return *static_cast<float const*>(data);
        }
        if (field.type == PluginFieldType::kFLOAT64)
        {
            return *static_cast<double const*>(data);
        }
    }
    throw PluginError(cat("field '", field.name, "': expected ", expected, ", found PluginFieldType ",
        static_cast<int32_t>(field.type)));
}
} // namespace

int32_t FieldReader::toInt(nvinfer1::PluginField const& field) const
{
    int64_t const value = readOne<int64_t>(field, "integer", "kINT32");
    METRALE_REQUIRE(value >= std::numeric_limits<int32_t>::min() && value <= std::numeric_limits<int32_t>::max(),
        "field '", field.name, "': ", value, " does not fit in int32");
    return static_cast<int32_t>(value);
}

std::string FieldReader::toString(nvinfer1::PluginField const& field) const
{
    METRALE_REQUIRE(field.type == nvinfer1::PluginFieldType::kCHAR, "field '", field.name,
        "': expected kCHAR, found PluginFieldType ", static_cast<int32_t>(field.type));
    METRALE_REQUIRE(field.length >= 0 && (field.length == 0 || field.data != nullptr), "field '", field.name,
        "': bad string length ", field.length);
    if (field.length == 0)
    {
        return {};
    }
    char const* data = static_cast<char const*>(field.data);
    // Some writers count the terminating NUL in the length, some do not; stop at the first NUL.
    size_t length = 0;
    while (length < static_cast<size_t>(field.length) && data[length] != '\0')
    {
        ++length;
    }
    return std::string(data, length);
}

float FieldReader::toFloat(nvinfer1::PluginField const& field) const
{
    double const value = readOne<double>(field, "float", "kFLOAT32");
    float const rounded = static_cast<float>(value);
    METRALE_REQUIRE(std::isfinite(rounded), "field '", field.name, "': ", value, " is not a finite float32");
    return rounded;
}

float FieldReader::getFloat(char const* name) const
{
    contract::Field const& f = field(name, contract::FieldType::kFLOAT);
    nvinfer1::PluginField const* given = find(name);
    METRALE_REQUIRE(given != nullptr || !f.required, "required field '", name, "' (kFLOAT32) is missing");
    return given == nullptr ? f.floatDefault : toFloat(*given);
}

int32_t FieldReader::getInt(char const* name) const
{
    contract::Field const& f = field(name, contract::FieldType::kINT);
    nvinfer1::PluginField const* given = find(name);
    METRALE_REQUIRE(given != nullptr || !f.required, "required field '", name, "' (kINT32) is missing");
    return given == nullptr ? f.intDefault : toInt(*given);
}

std::string FieldReader::getString(char const* name) const
{
    contract::Field const& f = field(name, contract::FieldType::kSTRING);
    nvinfer1::PluginField const* given = find(name);
    METRALE_REQUIRE(given != nullptr || !f.required, "required field '", name, "' (kCHAR) is missing");
    return given == nullptr ? std::string(f.stringDefault) : toString(*given);
}

nvinfer1::PluginFieldType pluginFieldType(contract::FieldType type) noexcept
{
    switch (type)
    {
    case contract::FieldType::kINT: return nvinfer1::PluginFieldType::kINT32;
    case contract::FieldType::kFLOAT: return nvinfer1::PluginFieldType::kFLOAT32;
    case contract::FieldType::kSTRING: break;
    }
    return nvinfer1::PluginFieldType::kCHAR;
}

nvinfer1::DataType dataType(contract::TensorType type)
{
    using nvinfer1::DataType;
    switch (type)
    {
    case contract::TensorType::kFLOAT32: return DataType::kFLOAT;
    case contract::TensorType::kFLOAT16: return DataType::kHALF;
    case contract::TensorType::kBFLOAT16: return DataType::kBF16;
    case contract::TensorType::kINT8: return DataType::kINT8;
    case contract::TensorType::kUINT8: return DataType::kUINT8;
    case contract::TensorType::kINT32: return DataType::kINT32;
    case contract::TensorType::kINT64: return DataType::kINT64;
    case contract::TensorType::kBOOL: return DataType::kBOOL;
    case contract::TensorType::kLIKE_X: break;
    }
    throw PluginError("internal: a contract input typed like x has no fixed TensorRT type",
        nvinfer1::ErrorCode::kINTERNAL_ERROR);
}

void FieldListCheck::visit(char const* name, contract::FieldType type)
{
    mVisited += cat(mVisited.empty() ? "" : ", ", name);
    mOk = mOk && mNext < mNbFields && std::strcmp(mFields[mNext].name, name) == 0 && mFields[mNext].type == type;
    ++mNext;
}

void FieldListCheck::finish() const
{
    if (mOk && mNext == mNbFields)
    {
        return;
    }
    std::string want;
    for (int32_t k = 0; k < mNbFields; ++k)
    {
        want += cat(k == 0 ? "" : ", ", mFields[k].name);
    }
    throw PluginError(cat("internal: ", mOp, "'s visitFields binds [", mVisited, "], metrale/contract.h lists [",
                          want, "] (names, order and types must agree: fix visitFields or regenerate the header)"),
        nvinfer1::ErrorCode::kINTERNAL_ERROR);
}

int32_t FieldValues::at(char const* name) const
{
    for (auto const& [field, value] : mInts)
    {
        if (std::strcmp(field, name) == 0)
        {
            return value;
        }
    }
    throw PluginError(cat("internal: no int field '", name, "' in the op's field list"),
        nvinfer1::ErrorCode::kINTERNAL_ERROR);
}

std::string const& FieldValues::text(char const* name) const
{
    for (auto const& [field, value] : mStrings)
    {
        if (std::strcmp(field, name) == 0)
        {
            return value;
        }
    }
    throw PluginError(cat("internal: no string field '", name, "' in the op's field list"),
        nvinfer1::ErrorCode::kINTERNAL_ERROR);
}

std::string listText(char const* const* values, int32_t nbValues)
{
    std::string text;
    for (int32_t i = 0; i < nbValues; ++i)
    {
        text += cat(i == 0 ? "" : i + 1 == nbValues ? " or " : ", ", values[i]);
    }
    return text;
}

bool parseFlag(FieldReader const& reader, char const* name)
{
    int32_t const value = reader.getInt(name);
    METRALE_REQUIRE(value == 0 || value == 1, "field '", name, "': expected 0 or 1, found ", value);
    return value == 1;
}

int32_t parsePositive(FieldReader const& reader, char const* name, char const* what)
{
    int32_t const value = reader.getInt(name);
    METRALE_REQUIRE(value > 0, "field '", name, "': expected a positive ", what, ", found ", value);
    return value;
}

int32_t parseCode(char const* field, std::string const& value, char const* const* values, int32_t nbValues)
{
    for (int32_t code = 0; code < nbValues; ++code)
    {
        if (value == values[code])
        {
            return code;
        }
    }
    throw PluginError(cat("field '", field, "': expected ", listText(values, nbValues), ", found '", value, "'"));
}

void requireValue(char const* field, int32_t value, int32_t const* values, int32_t nbValues)
{
    std::vector<std::string> texts;
    for (int32_t i = 0; i < nbValues; ++i)
    {
        if (value == values[i])
        {
            return;
        }
        texts.push_back(std::to_string(values[i]));
    }
    std::vector<char const*> pointers;
    for (std::string const& t : texts)
    {
        pointers.push_back(t.c_str());
    }
    throw PluginError(cat("field '", field, "': expected ", listText(pointers.data(), nbValues), ", found ", value));
}

char const* activationFormatName(int32_t format) noexcept
{
    return format >= 0 && format < contract::count(contract::kACTIVATION_FORMATS)
        ? contract::kACTIVATION_FORMATS[format]
        : "unknown";
}

int32_t parseActivationFormat(std::string const& value, char const* const* allowed, int32_t nbAllowed)
{
    for (int32_t i = 0; i < nbAllowed; ++i)
    {
        if (value == allowed[i])
        {
            return parseCode("activation_format", value, contract::kACTIVATION_FORMATS);
        }
    }
    throw PluginError(cat("field 'activation_format': expected ", listText(allowed, nbAllowed), ", found '", value,
        "' (docs/ops.md, Activation formats)"));
}

} // namespace plugin
} // namespace metrale
