/*
 * Error reporting and plugin-field parsing shared by the metrale plugins (see pluginCommon.h).
 */
#include "pluginCommon.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <limits>

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

FieldReader::FieldReader(nvinfer1::PluginFieldCollection const* fc, nvinfer1::PluginFieldCollection const& known)
    : mFc(fc)
{
    METRALE_REQUIRE(fc != nullptr, "the plugin field collection is null");
    METRALE_REQUIRE(fc->nbFields >= 0 && (fc->nbFields == 0 || fc->fields != nullptr), 
        "the plugin field collection has ", fc->nbFields, " fields but no field array");
    for (int32_t i = 0; i < fc->nbFields; ++i)
    {
        char const* name = fc->fields[i].name;
        METRALE_REQUIRE(name != nullptr, "plugin field ", i, " has no name");
        bool isKnown = false;
        for (int32_t k = 0; k < known.nbFields; ++k)
        {
            isKnown = isKnown || std::strcmp(known.fields[k].name, name) == 0;
        }
        if (!isKnown)
        {
            std::string expected;
            for (int32_t k = 0; k < known.nbFields; ++k)
            {
                expected += expected.empty() ? known.fields[k].name : cat(", ", known.fields[k].name);
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

int32_t FieldReader::toInt(nvinfer1::PluginField const& field) const
{
    using nvinfer1::PluginFieldType;
    METRALE_REQUIRE(field.data != nullptr && field.length == 1, "field '", field.name,
        "': expected one integer, found length ", field.length, field.data == nullptr ? " and no data" : "");
    int64_t value = 0;
    switch (field.type)
    {
    case PluginFieldType::kINT32: value = *static_cast<int32_t const*>(field.data); break;
    case PluginFieldType::kINT64: value = *static_cast<int64_t const*>(field.data); break;
    case PluginFieldType::kINT16: value = *static_cast<int16_t const*>(field.data); break;
    case PluginFieldType::kINT8: value = *static_cast<int8_t const*>(field.data); break;
    default:
        throw PluginError(cat("field '", field.name, "': expected kINT32, found PluginFieldType ",
            static_cast<int32_t>(field.type)));
    }
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

int32_t FieldReader::getInt(char const* name) const
{
    nvinfer1::PluginField const* field = find(name);
    METRALE_REQUIRE(field != nullptr, "required field '", name, "' (kINT32) is missing");
    return toInt(*field);
}

int32_t FieldReader::getInt(char const* name, int32_t defaultValue) const
{
    nvinfer1::PluginField const* field = find(name);
    return field == nullptr ? defaultValue : toInt(*field);
}

std::string FieldReader::getString(char const* name) const
{
    nvinfer1::PluginField const* field = find(name);
    METRALE_REQUIRE(field != nullptr, "required field '", name, "' (kCHAR) is missing");
    return toString(*field);
}

std::string FieldReader::getString(char const* name, std::string const& defaultValue) const
{
    nvinfer1::PluginField const* field = find(name);
    return field == nullptr ? defaultValue : toString(*field);
}

bool parseFlag(FieldReader const& reader, char const* name)
{
    int32_t const value = reader.getInt(name, 0);
    METRALE_REQUIRE(value == 0 || value == 1, "field '", name, "': expected 0 or 1, found ", value);
    return value == 1;
}

int32_t parseChoice(char const* field, std::string const& value,
    std::initializer_list<std::pair<char const*, int32_t>> choices)
{
    std::string expected;
    for (auto const& c : choices)
    {
        if (value == c.first)
        {
            return c.second;
        }
        expected += expected.empty() ? c.first : cat(" or ", c.first);
    }
    throw PluginError(cat("field '", field, "': expected ", expected, ", found '", value, "'"));
}

char const* activationFormatName(int32_t format) noexcept
{
    switch (format)
    {
    case kMETRALE_ACT_BF16: return "bf16";
    case kMETRALE_ACT_FP8: return "fp8";
    case kMETRALE_ACT_NVFP4: return "nvfp4";
    default: return "unknown";
    }
}

int32_t parseActivationFormat(std::string const& value, char const* const* allowed, int32_t nbAllowed)
{
    std::string expected;
    for (int32_t i = 0; i < nbAllowed; ++i)
    {
        char const* a = allowed[i];
        if (value == a)
        {
            for (int32_t code : {kMETRALE_ACT_BF16, kMETRALE_ACT_FP8, kMETRALE_ACT_NVFP4})
            {
                if (value == activationFormatName(code))
                {
                    return code;
                }
            }
        }
        expected += expected.empty() ? a : cat(" or ", a);
    }
    throw PluginError(cat("field 'activation_format': expected ", expected, ", found '", value,
        "' (docs/ops.md, Activation formats)"));
}

} // namespace plugin
} // namespace metrale
