/*
 * Conformance harness of libmetrale_plugins.so, for machines with no TensorRT runtime.
 *
 * It does what TensorRT does with the library, through the public headers only: dlopen, the
 * getCreators/setLoggerFinder entry points, creating each plugin from the fields an exported ONNX
 * node carries (kBUILD), output types and shapes for a symbolic M (a minimal IExprBuilder of its
 * own), supportsFormatCombination, configurePlugin, getWorkspaceSize, the serialize ->
 * createPlugin(kRUNTIME) round trip, clone, attachToContext, and, with a GPU, onShapeChange and
 * enqueue on the inputs a manifest names, writing y for each row count so a Python step can compare
 * it bit for bit with the torch CUDA op.
 *
 * Usage: conformance LIBRARY MANIFEST OUTDIR [--no-gpu]
 *
 * Manifest (text, one directive a line; written by tests/plugins/conformance_driver.py):
 *   case ID OPTYPE
 *   field NAME int VALUE | field NAME str VALUE | field NAME float VALUE
 *   input NAME DTYPE D0,D1,... FILE [rows] [likex]
 *                                         (x first, with the largest row count; f32 f16 bf16 i8 i32;
 *                                          x's dimension 0 is M; "rows": this input's dimension 0
 *                                          is M too (the grouped ops' topk_ids, topk_weights);
 *                                          "likex": its type is x's type, whatever x's is)
 *   output D0,D1,... [DTYPE]              (an output's shape at the largest M, its dimension 0 is M,
 *                                          one line per output in order; DTYPE: its type, absent:
 *                                          x's; no output line: one y [M, n] of x's type)
 *   profiles MIN-MAX,MIN-MAX,...          (row ranges; enqueue runs at both ends of each)
 *   end
 * Output: OUTDIR/ID.m<M>.bin (the first output, raw, row-major), OUTDIR/ID.m<M>.out<i>.bin (output
 * i >= 1) and a summary on stdout; exit 0 only when every check passed.
 *
 * Invariants: every check prints one PASS/FAIL line naming the case and what was expected and
 * found; a plugin error reported through the logger or the error recorder when none was expected is
 * a failure; inputs are read from files, never generated here, so the comparison has one source
 * of truth.
 */
#include "NvInferRuntime.h"
#include "metrale/contract.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <algorithm>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace nvinfer1;

namespace
{

// ---------------------------------------------------------------------------------------------
// Reporting

int gFailures = 0;
int gPasses = 0;

void check(bool ok, std::string const& what)
{
    std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
    std::fflush(stdout);
    (ok ? gPasses : gFailures) += 1;
}

//! Logger given to the library through setLoggerFinder; counts errors so negative checks can
//! assert that a refusal was reported and positive ones that nothing was.
class Logger : public ILogger
{
public:
    void log(Severity severity, char const* msg) noexcept override
    {
        if (severity <= Severity::kERROR)
        {
            ++mErrors;
            mLast = msg;
        }
        if (severity <= Severity::kWARNING || mVerbose)
        {
            std::printf("  [library %s] %s\n", severity <= Severity::kERROR ? "error" : "warning", msg);
        }
    }
    int mErrors{0};
    std::string mLast;
    bool mVerbose{false};
};

class LoggerFinder : public ILoggerFinder
{
public:
    explicit LoggerFinder(ILogger* logger)
        : mLogger(logger)
    {
    }
    ILogger* findLogger() override
    {
        return mLogger;
    }

private:
    ILogger* mLogger;
};

//! The error recorder of the harness's "execution context".
class ErrorRecorder : public IErrorRecorder
{
public:
    int32_t getNbErrors() const noexcept override
    {
        return static_cast<int32_t>(mErrors.size());
    }
    ErrorCode getErrorCode(int32_t i) const noexcept override
    {
        return mErrors.at(i).first;
    }
    ErrorDesc getErrorDesc(int32_t i) const noexcept override
    {
        return mErrors.at(i).second.c_str();
    }
    bool hasOverflowed() const noexcept override
    {
        return false;
    }
    void clear() noexcept override
    {
        mErrors.clear();
    }
    bool reportError(ErrorCode code, ErrorDesc desc) noexcept override
    {
        std::printf("  [recorder] code %d: %s\n", static_cast<int>(code), desc);
        mErrors.emplace_back(code, desc);
        return true;
    }
    RefCount incRefCount() noexcept override
    {
        return ++mRefs;
    }
    RefCount decRefCount() noexcept override
    {
        return --mRefs;
    }

private:
    std::vector<std::pair<ErrorCode, std::string>> mErrors;
    RefCount mRefs{0};
};

class ResourceContext : public IPluginResourceContext
{
public:
    explicit ResourceContext(IErrorRecorder* recorder)
        : mRecorder(recorder)
    {
    }
    IGpuAllocator* getGpuAllocator() const noexcept override
    {
        return nullptr;
    }
    IErrorRecorder* getErrorRecorder() const noexcept override
    {
        return mRecorder;
    }

private:
    IErrorRecorder* mRecorder;
};

// ---------------------------------------------------------------------------------------------
// A minimal dimension-expression builder: constants fold, anything touching a symbol stays
// symbolic and carries its text, so a check can see that y's rows are x's rows.

class ExprImpl : public apiv::VDimensionExpr
{
public:
    ExprImpl(bool constant, int64_t value, std::string text)
        : mConstant(constant)
        , mValue(value)
        , mText(std::move(text))
    {
    }
    bool isConstant() const override
    {
        return mConstant;
    }
    int64_t getConstantValue() const override
    {
        return mConstant ? mValue : std::numeric_limits<int64_t>::min();
    }
    bool isSizeTensor() const override
    {
        return false;
    }
    bool mConstant;
    int64_t mValue;
    std::string mText;
};

class Expr : public IDimensionExpr
{
public:
    explicit Expr(ExprImpl* impl)
    {
        mImpl = impl;
    }
    ~Expr() noexcept override = default;
    ExprImpl const& impl() const
    {
        return *static_cast<ExprImpl const*>(mImpl);
    }
};

class ExprBuilderImpl : public apiv::VExprBuilder
{
public:
    IDimensionExpr const* constant(int64_t value) override
    {
        return make(true, value, std::to_string(value));
    }
    IDimensionExpr const* symbol(std::string const& name)
    {
        return make(false, 0, name);
    }
    IDimensionExpr const* operation(DimensionOperation op, IDimensionExpr const& a, IDimensionExpr const& b) override
    {
        auto const& x = static_cast<Expr const&>(a).impl();
        auto const& y = static_cast<Expr const&>(b).impl();
        static char const* const kNAMES[] = {"+", "*", "max", "min", "-", "==", "<", "floordiv", "ceildiv"};
        int32_t const i = static_cast<int32_t>(op);
        if (i < 0 || i > 8)
        {
            return nullptr;
        }
        if (x.mConstant && y.mConstant)
        {
            int64_t v = 0;
            switch (op)
            {
            case DimensionOperation::kSUM: v = x.mValue + y.mValue; break;
            case DimensionOperation::kPROD: v = x.mValue * y.mValue; break;
            case DimensionOperation::kMAX: v = std::max(x.mValue, y.mValue); break;
            case DimensionOperation::kMIN: v = std::min(x.mValue, y.mValue); break;
            case DimensionOperation::kSUB: v = x.mValue - y.mValue; break;
            case DimensionOperation::kEQUAL: v = x.mValue == y.mValue; break;
            case DimensionOperation::kLESS: v = x.mValue < y.mValue; break;
            case DimensionOperation::kFLOOR_DIV: v = y.mValue ? x.mValue / y.mValue : 0; break;
            case DimensionOperation::kCEIL_DIV: v = y.mValue ? (x.mValue + y.mValue - 1) / y.mValue : 0; break;
            }
            return constant(v);
        }
        return make(false, 0, "(" + x.mText + " " + kNAMES[i] + " " + y.mText + ")");
    }
    IDimensionExpr const* declareSizeTensor(int32_t, IDimensionExpr const&, IDimensionExpr const&) override
    {
        return nullptr;
    }

private:
    IDimensionExpr const* make(bool constant, int64_t value, std::string text)
    {
        mImpls.emplace_back(new ExprImpl(constant, value, std::move(text)));
        mExprs.emplace_back(new Expr(mImpls.back().get()));
        return mExprs.back().get();
    }
    std::deque<std::unique_ptr<ExprImpl>> mImpls;
    std::deque<std::unique_ptr<Expr>> mExprs;
};

class ExprBuilder : public IExprBuilder
{
public:
    ExprBuilder()
    {
        mImpl = &mBuilder;
    }
    ~ExprBuilder() noexcept override = default;
    IDimensionExpr const* symbol(std::string const& name)
    {
        return mBuilder.symbol(name);
    }

private:
    ExprBuilderImpl mBuilder;
};

std::string exprText(IDimensionExpr const* e)
{
    return e == nullptr ? "<null>" : static_cast<Expr const*>(e)->impl().mText;
}

// ---------------------------------------------------------------------------------------------
// Manifest

struct Field
{
    std::string name;
    bool isInt;
    int32_t intValue;
    std::string strValue;
    bool isFloat{false};
    float floatValue{0.0F};
};

struct Input
{
    std::string name;
    std::string dtype;
    std::vector<int64_t> dims;
    std::string file;
    bool rows{false};   // dimension 0 is M
    bool likeX{false};  // the type of x
};

struct Output
{
    std::vector<int64_t> dims;  // at the largest M
    std::string dtype;          // "x": x's type
};

struct Case
{
    std::string id;
    std::string op;
    std::vector<Field> fields;
    std::vector<Input> inputs;
    std::vector<Output> outputs;  // empty: one y [M, n] of x's type
    std::vector<std::pair<int64_t, int64_t>> profiles;
};

std::vector<int64_t> parseInts(std::string const& s, char sep)
{
    std::vector<int64_t> v;
    std::stringstream ss(s);
    std::string part;
    while (std::getline(ss, part, sep))
    {
        if (!part.empty())
        {
            v.push_back(std::stoll(part));
        }
    }
    return v;
}

std::vector<Case> readManifest(std::string const& path)
{
    std::ifstream in(path);
    if (!in)
    {
        throw std::runtime_error("cannot open manifest " + path);
    }
    std::vector<Case> cases;
    std::string line;
    while (std::getline(in, line))
    {
        std::istringstream ls(line);
        std::string word;
        if (!(ls >> word) || word[0] == '#')
        {
            continue;
        }
        if (word == "case")
        {
            cases.emplace_back();
            ls >> cases.back().id >> cases.back().op;
        }
        else if (word == "field")
        {
            Field f;
            std::string kind;
            ls >> f.name >> kind;
            f.isInt = kind == "int";
            f.isFloat = kind == "float";
            if (f.isInt)
            {
                ls >> f.intValue;
            }
            else if (f.isFloat)
            {
                std::string text;
                ls >> text;
                f.floatValue = std::strtof(text.c_str(), nullptr);
            }
            else
            {
                std::getline(ls >> std::ws, f.strValue);
            }
            cases.back().fields.push_back(f);
        }
        else if (word == "input")
        {
            Input t;
            std::string dims;
            ls >> t.name >> t.dtype >> dims >> t.file;
            t.dims = parseInts(dims, ',');
            t.rows = cases.back().inputs.empty();
            std::string flag;
            while (ls >> flag)
            {
                t.rows = t.rows || flag == "rows";
                t.likeX = t.likeX || flag == "likex";
            }
            cases.back().inputs.push_back(t);
        }
        else if (word == "output")
        {
            std::string dims;
            Output o;
            ls >> dims;
            o.dims = parseInts(dims, ',');
            if (!(ls >> o.dtype))
            {
                o.dtype = "x";
            }
            cases.back().outputs.push_back(o);
        }
        else if (word == "profiles")
        {
            std::string spec;
            ls >> spec;
            std::stringstream ss(spec);
            std::string range;
            while (std::getline(ss, range, ','))
            {
                auto const ends = parseInts(range, '-');
                cases.back().profiles.emplace_back(ends.at(0), ends.size() > 1 ? ends.at(1) : ends.at(0));
            }
        }
        else if (word != "end")
        {
            throw std::runtime_error("manifest " + path + ": unknown directive '" + word + "'");
        }
    }
    return cases;
}

DataType toDataType(std::string const& s)
{
    if (s == "f32")
        return DataType::kFLOAT;
    if (s == "f16")
        return DataType::kHALF;
    if (s == "bf16")
        return DataType::kBF16;
    if (s == "i8")
        return DataType::kINT8;
    if (s == "i32")
        return DataType::kINT32;
    throw std::runtime_error("unknown dtype " + s);
}

size_t elementSize(DataType t)
{
    switch (t)
    {
    case DataType::kFLOAT:
    case DataType::kINT32: return 4;
    case DataType::kHALF:
    case DataType::kBF16: return 2;
    case DataType::kINT8: return 1;
    default: return 0;
    }
}

char const* typeName(DataType t)
{
    switch (t)
    {
    case DataType::kFLOAT: return "kFLOAT";
    case DataType::kHALF: return "kHALF";
    case DataType::kBF16: return "kBF16";
    case DataType::kINT8: return "kINT8";
    case DataType::kINT32: return "kINT32";
    case DataType::kFP8: return "kFP8";
    case DataType::kINT64: return "kINT64";
    case DataType::kBOOL: return "kBOOL";
    case DataType::kUINT8: return "kUINT8";
    default: return "other";
    }
}

Dims toDims(std::vector<int64_t> const& v)
{
    Dims d{};
    d.nbDims = static_cast<int32_t>(v.size());
    for (size_t i = 0; i < v.size(); ++i)
    {
        d.d[i] = v[i];
    }
    return d;
}

//! The int field name of the case; throws when it has none.
int32_t intField(Case const& c, char const* name)
{
    for (Field const& f : c.fields)
    {
        if (f.isInt && f.name == name)
        {
            return f.intValue;
        }
    }
    throw std::runtime_error(c.id + ": no int field " + name);
}

//! The outputs of the case: the manifest's, or one y [M, n] of x's type.
std::vector<Output> outputsOf(Case const& c)
{
    return c.outputs.empty() ? std::vector<Output>{{{c.inputs[0].dims[0], intField(c, "n")}, "x"}} : c.outputs;
}

int32_t nbOutputs(Case const& c)
{
    return static_cast<int32_t>(outputsOf(c).size());
}

//! Output o's shape for m rows (dimension 0 is M).
std::vector<int64_t> outputShape(Case const& c, int32_t o, int64_t m)
{
    std::vector<int64_t> d = outputsOf(c)[o].dims;
    d[0] = m;
    return d;
}

//! The type input i has when x has type x (an input marked likex follows x).
DataType inputType(Case const& c, size_t i, DataType x)
{
    return i == 0 || c.inputs[i].likeX ? x : toDataType(c.inputs[i].dtype);
}

//! The type output o has when x has type x.
DataType outputType(Case const& c, int32_t o, DataType x)
{
    std::string const& t = outputsOf(c)[o].dtype;
    return t == "x" ? x : toDataType(t);
}

//! The output descriptions for m rows with x of type x.
std::vector<PluginTensorDesc> outputDescs(Case const& c, DataType x, int64_t m)
{
    std::vector<PluginTensorDesc> out(nbOutputs(c));
    for (int32_t o = 0; o < nbOutputs(c); ++o)
    {
        out[o].dims = toDims(outputShape(c, o, m));
        out[o].type = outputType(c, o, x);
        out[o].format = TensorFormat::kLINEAR;
        out[o].scale = -1.F;
    }
    return out;
}

//! The input descriptions for m rows with x of type x.
std::vector<PluginTensorDesc> inputDescs(Case const& c, DataType x, int64_t m)
{
    std::vector<PluginTensorDesc> in(c.inputs.size());
    for (size_t i = 0; i < c.inputs.size(); ++i)
    {
        in[i].dims = toDims(c.inputs[i].dims);
        if (c.inputs[i].rows)
        {
            in[i].dims.d[0] = m;
        }
        in[i].type = inputType(c, i, x);
        in[i].format = TensorFormat::kLINEAR;
        in[i].scale = -1.F;
    }
    return in;
}

//! Owns the data of a PluginFieldCollection (deep copy), so a collection can outlive its source.
struct OwnedFields
{
    std::deque<std::string> names;
    std::deque<std::vector<char>> data;
    std::vector<PluginField> fields;
    PluginFieldCollection fc{};

    void add(char const* name, void const* bytes, PluginFieldType type, int32_t length, size_t size)
    {
        names.emplace_back(name);
        data.emplace_back(static_cast<char const*>(bytes), static_cast<char const*>(bytes) + size);
        fields.emplace_back(names.back().c_str(), data.back().data(), type, length);
    }
    PluginFieldCollection const* collection()
    {
        fc.nbFields = static_cast<int32_t>(fields.size());
        fc.fields = fields.data();
        return &fc;
    }
};

size_t fieldBytes(PluginField const& f)
{
    switch (f.type)
    {
    case PluginFieldType::kINT32: return 4u * f.length;
    case PluginFieldType::kINT64: return 8u * f.length;
    case PluginFieldType::kCHAR:
    case PluginFieldType::kINT8: return 1u * f.length;
    case PluginFieldType::kFLOAT32: return 4u * f.length;
    default: return 0;
    }
}

OwnedFields copyFields(PluginFieldCollection const* fc)
{
    OwnedFields out;
    for (int32_t i = 0; fc != nullptr && i < fc->nbFields; ++i)
    {
        PluginField const& f = fc->fields[i];
        out.add(f.name, f.data, f.type, f.length, fieldBytes(f));
    }
    return out;
}

//! The fields as an ONNX node carries them: ints kINT32, strings kCHAR without a NUL.
OwnedFields onnxFields(Case const& c)
{
    OwnedFields out;
    for (Field const& f : c.fields)
    {
        if (f.isInt)
        {
            out.add(f.name.c_str(), &f.intValue, PluginFieldType::kINT32, 1, 4);
        }
        else if (f.isFloat)
        {
            out.add(f.name.c_str(), &f.floatValue, PluginFieldType::kFLOAT32, 1, 4);
        }
        else
        {
            out.add(f.name.c_str(), f.strValue.data(), PluginFieldType::kCHAR, static_cast<int32_t>(f.strValue.size()),
                f.strValue.size());
        }
    }
    return out;
}

std::string describeFields(PluginFieldCollection const* fc)
{
    std::string s;
    for (int32_t i = 0; fc != nullptr && i < fc->nbFields; ++i)
    {
        PluginField const& f = fc->fields[i];
        s += std::string(i ? " " : "") + f.name + "=";
        if (f.type == PluginFieldType::kINT32 && f.length == 1)
        {
            s += std::to_string(*static_cast<int32_t const*>(f.data));
        }
        else if (f.type == PluginFieldType::kCHAR)
        {
            s += "'" + std::string(static_cast<char const*>(f.data), f.length) + "'";
        }
        else if (f.type == PluginFieldType::kFLOAT32 && f.length == 1)
        {
            std::ostringstream v;
            v.precision(9);
            v << *static_cast<float const*>(f.data);
            s += v.str();
        }
        else
        {
            s += "<type " + std::to_string(static_cast<int>(f.type)) + ">";
        }
    }
    return s;
}

bool sameFields(PluginFieldCollection const* a, PluginFieldCollection const* b)
{
    if (a == nullptr || b == nullptr || a->nbFields != b->nbFields)
    {
        return false;
    }
    for (int32_t i = 0; i < a->nbFields; ++i)
    {
        PluginField const& x = a->fields[i];
        PluginField const& y = b->fields[i];
        if (std::strcmp(x.name, y.name) != 0 || x.type != y.type || x.length != y.length
            || std::memcmp(x.data, y.data, fieldBytes(x)) != 0)
        {
            return false;
        }
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Checks

struct Library
{
    void* handle{nullptr};
    std::map<std::string, IPluginCreatorV3One*> creators;
    std::vector<IPluginCreatorV3One*> retired;  // the contract's retired versions (W4A16Proj "1", ...)
    std::vector<IPluginCreatorV3One*> compatible;  // the contract's compatible versions (W8A8Proj "1", ...)
};

//! The contract's entry of op type (metrale/contract.h), or nullptr.
metrale::contract::OpInfo const* contractOp(std::string const& type)
{
    for (metrale::contract::OpInfo const& op : metrale::contract::kOPS)
    {
        if (type == op.type)
        {
            return &op;
        }
    }
    return nullptr;
}

//! The plugin version the contract gives op type ("?" for an op it does not know).
std::string contractVersion(std::string const& type)
{
    metrale::contract::OpInfo const* op = contractOp(type);
    return op == nullptr ? "?" : op->version;
}

using GetCreatorsFn = IPluginCreatorInterface* const* (*) (int32_t&);
using SetLoggerFinderFn = void (*)(ILoggerFinder*);

Library loadLibrary(std::string const& path, ILoggerFinder* finder)
{
    Library lib;
    lib.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    check(lib.handle != nullptr, "dlopen " + path + (lib.handle ? "" : std::string(": ") + dlerror()));
    if (lib.handle == nullptr)
    {
        return lib;
    }
    auto setLoggerFinder = reinterpret_cast<SetLoggerFinderFn>(dlsym(lib.handle, "setLoggerFinder"));
    auto getCreators = reinterpret_cast<GetCreatorsFn>(dlsym(lib.handle, "getCreators"));
    check(setLoggerFinder != nullptr, "entry point setLoggerFinder is exported");
    check(getCreators != nullptr, "entry point getCreators is exported");
    check(dlsym(lib.handle, "getInferLibVersion") == nullptr
            && dlsym(lib.handle, "createInferBuilder_INTERNAL") == nullptr,
        "the library defines no TensorRT runtime symbols (no libnvinfer linked in)");
    check(dlsym(lib.handle, "metrale_w4a16_proj") == nullptr,
        "the kernel launchers inside the library are not exported (no interposition with libmetrale_kernels.so)");
    if (setLoggerFinder != nullptr)
    {
        setLoggerFinder(finder);
    }
    if (getCreators == nullptr)
    {
        return lib;
    }
    int32_t n = -1;
    IPluginCreatorInterface* const* list = getCreators(n);
    // The plugin version of each op with a plugin, its retired version, whose creator refuses
    // every plugin (an older export: re-export), and its compatible version, whose creator builds
    // the older nodes as they are (the newer version only added a value), from the contract
    // (metrale/contract.h).
    std::string const ns = metrale::contract::kDOMAIN;
    int32_t nbPlugins = 0;
    int32_t nbRetired = 0;
    int32_t nbCompatible = 0;
    for (metrale::contract::OpInfo const& op : metrale::contract::kOPS)
    {
        nbPlugins += op.hasPlugin ? 1 : 0;
        nbRetired += op.hasPlugin ? op.nbRetired : 0;
        nbCompatible += op.hasPlugin && op.compatibleVersion != nullptr ? 1 : 0;
    }
    int32_t const nbCreators = nbPlugins + nbRetired + nbCompatible;
    check(list != nullptr && n == nbCreators,
        "getCreators returns " + std::to_string(nbCreators) + " creators (found " + std::to_string(n) + ")");
    for (int32_t i = 0; list != nullptr && i < n; ++i)
    {
        InterfaceInfo const info = list[i]->getInterfaceInfo();
        bool const isV3One = std::strcmp(info.kind, "PLUGIN CREATOR_V3ONE") == 0 && info.major == 1;
        check(isV3One,
            std::string("creator ") + std::to_string(i) + " is an IPluginCreatorV3One (kind '" + info.kind + "')");
        if (!isV3One)
        {
            continue;
        }
        auto* creator = static_cast<IPluginCreatorV3One*>(list[i]);
        std::string const name = creator->getPluginName();
        metrale::contract::OpInfo const* op = contractOp(name);
        char const* retired = nullptr;
        for (int32_t r = 0; op != nullptr && r < op->nbRetired; ++r)
        {
            retired = std::strcmp(creator->getPluginVersion(), op->retired[r].version) == 0 ? op->retired[r].version
                                                                                           : retired;
        }
        if (retired != nullptr)
        {
            PluginFieldCollection const empty{0, nullptr};
            IPluginV3* const refused = creator->createPlugin("old", &empty, TensorRTPhase::kBUILD);
            check(refused == nullptr, name + " version " + retired + " (an older op contract) is refused");
            lib.retired.push_back(creator);
            continue;
        }
        if (op != nullptr && op->compatibleVersion != nullptr
            && std::strcmp(creator->getPluginVersion(), op->compatibleVersion) == 0)
        {
            lib.compatible.push_back(creator);
            continue;
        }
        std::string const want = contractVersion(name);
        check(ns == creator->getPluginNamespace() && want == creator->getPluginVersion(),
            "creator " + name + ": namespace '" + ns + "', version '" + want + "' (found '"
                + creator->getPluginNamespace() + "', '" + creator->getPluginVersion() + "')");
        lib.creators[name] = creator;
        // The advertised fields are the contract's, in its order, with its types.
        PluginFieldCollection const* names = creator->getFieldNames();
        bool same = op != nullptr && names != nullptr && names->nbFields == op->nbFields;
        for (int32_t f = 0; same && f < op->nbFields; ++f)
        {
            PluginFieldType const want = op->fields[f].type == metrale::contract::FieldType::kINT ? PluginFieldType::kINT32
                : op->fields[f].type == metrale::contract::FieldType::kFLOAT                   ? PluginFieldType::kFLOAT32
                                                                                                : PluginFieldType::kCHAR;
            same = std::strcmp(names->fields[f].name, op->fields[f].name) == 0 && names->fields[f].type == want;
        }
        check(same, "creator " + name + ": getFieldNames lists the contract's fields in order, with their types");
    }
    for (metrale::contract::OpInfo const& op : metrale::contract::kOPS)
    {
        if (op.hasPlugin)
        {
            check(lib.creators.count(op.type) == 1, std::string("a creator for ") + op.type + " version " + op.version);
        }
        else
        {
            check(lib.creators.count(op.type) == 0,
                std::string("no creator for ") + op.type + " (the contract says it has no plugin yet)");
        }
    }
    check(static_cast<int32_t>(lib.retired.size()) == nbRetired, "retired creators for the contract's "
            + std::to_string(nbRetired) + " retired op versions (found " + std::to_string(lib.retired.size()) + ")");
    check(static_cast<int32_t>(lib.compatible.size()) == nbCompatible, "compatible creators for the contract's "
            + std::to_string(nbCompatible) + " compatible op versions (found " + std::to_string(lib.compatible.size())
            + ")");
    return lib;
}

//! Advertised field names and types match the fields an exported node carries.
void checkFieldNames(IPluginCreatorV3One* creator, Case const& c)
{
    PluginFieldCollection const* names = creator->getFieldNames();
    bool ok = names != nullptr;
    std::string detail;
    for (Field const& f : c.fields)
    {
        bool found = false;
        for (int32_t i = 0; ok && i < names->nbFields; ++i)
        {
            if (f.name == names->fields[i].name)
            {
                PluginFieldType const want = f.isInt ? PluginFieldType::kINT32
                    : f.isFloat                      ? PluginFieldType::kFLOAT32
                                                     : PluginFieldType::kCHAR;
                found = names->fields[i].type == want;
            }
        }
        if (!found)
        {
            detail += " " + f.name;
        }
        ok = ok && found;
    }
    check(ok, c.id + ": getFieldNames advertises every attribute with its type (kINT32/kFLOAT32/kCHAR)"
            + (detail.empty() ? "" : "; missing or mistyped:" + detail));
}

struct PluginHandle
{
    IPluginV3* plugin{nullptr};
    IPluginV3OneCore* core{nullptr};
    IPluginV3OneBuild* build{nullptr};
    IPluginV3OneRuntime* runtime{nullptr};
};

PluginHandle capabilities(IPluginV3* p)
{
    PluginHandle h;
    h.plugin = p;
    if (p != nullptr)
    {
        h.core = static_cast<IPluginV3OneCore*>(p->getCapabilityInterface(PluginCapabilityType::kCORE));
        h.build = static_cast<IPluginV3OneBuild*>(p->getCapabilityInterface(PluginCapabilityType::kBUILD));
        h.runtime = static_cast<IPluginV3OneRuntime*>(p->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
    }
    return h;
}

void checkShapes(PluginHandle const& h, Case const& c, Logger& logger)
{
    ExprBuilder builder;
    std::vector<DimsExprs> in(c.inputs.size());
    for (size_t i = 0; i < c.inputs.size(); ++i)
    {
        in[i].nbDims = static_cast<int32_t>(c.inputs[i].dims.size());
        for (int32_t j = 0; j < in[i].nbDims; ++j)
        {
            in[i].d[j] = (c.inputs[i].rows && j == 0) ? builder.symbol("M") : builder.constant(c.inputs[i].dims[j]);
        }
    }
    int32_t const nbOut = nbOutputs(c);
    std::vector<DimsExprs> outs(nbOut);
    int const errorsBefore = logger.mErrors;
    int32_t const status = h.build->getOutputShapes(
        in.data(), static_cast<int32_t>(in.size()), nullptr, 0, outs.data(), nbOut, builder);
    for (int32_t o = 0; o < nbOut; ++o)
    {
        DimsExprs const& out = outs[o];
        std::vector<int64_t> const want = outputShape(c, o, -1);
        bool ok = status == 0 && out.nbDims == static_cast<int32_t>(want.size()) && out.d[0] != nullptr
            && !out.d[0]->isConstant() && exprText(out.d[0]) == "M" && logger.mErrors == errorsBefore;
        std::string wantText = "[M", found = "[";
        for (size_t j = 1; j < want.size(); ++j)
        {
            ok = ok && out.d[j] != nullptr && out.d[j]->isConstant() && out.d[j]->getConstantValue() == want[j];
            wantText += ", " + std::to_string(want[j]);
        }
        for (int32_t j = 0; status == 0 && j < out.nbDims && j < 8; ++j)
        {
            found += (j ? ", " : "") + exprText(out.d[j]);
        }
        check(ok, c.id + ": getOutputShapes gives output " + std::to_string(o) + " " + wantText
                + "] for symbolic M (found status " + std::to_string(status) + ", " + found + "])");
    }

    // A K that disagrees with the field must be refused with a reported error, not accepted.
    size_t const kDim = c.inputs[0].dims.size() - 1;
    in[0].d[kDim] = builder.constant(c.inputs[0].dims[kDim] + 2);
    int const before = logger.mErrors;
    int32_t const bad
        = h.build->getOutputShapes(in.data(), static_cast<int32_t>(in.size()), nullptr, 0, outs.data(), nbOut, builder);
    check(bad != 0 && logger.mErrors > before, c.id + ": getOutputShapes refuses x with the wrong K and reports why");

    // One input too few (an ONNX node whose has_* flag disagrees with its inputs).
    in[0].d[kDim] = builder.constant(c.inputs[0].dims[kDim]);
    int const before2 = logger.mErrors;
    int32_t const few = h.build->getOutputShapes(
        in.data(), static_cast<int32_t>(in.size()) - 1, nullptr, 0, outs.data(), nbOut, builder);
    check(few != 0 && logger.mErrors > before2, c.id + ": getOutputShapes refuses a missing input and reports why");
}

void checkTypes(PluginHandle const& h, Case const& c, Logger& logger)
{
    std::vector<DataType> types;
    for (Input const& t : c.inputs)
    {
        types.push_back(toDataType(t.dtype));
    }
    for (DataType x : {DataType::kFLOAT, DataType::kHALF, DataType::kBF16})
    {
        for (size_t i = 0; i < types.size(); ++i)
        {
            types[i] = inputType(c, i, x);
        }
        std::vector<DataType> out(nbOutputs(c), DataType::kINT64);
        int32_t const status
            = h.build->getOutputDataTypes(out.data(), nbOutputs(c), types.data(), static_cast<int32_t>(types.size()));
        for (int32_t o = 0; o < nbOutputs(c); ++o)
        {
            check(status == 0 && out[o] == outputType(c, o, x), c.id + ": getOutputDataTypes gives output "
                    + std::to_string(o) + " = " + typeName(outputType(c, o, x)) + " for x = " + typeName(x)
                    + " (found " + typeName(out[o]) + ")");
        }
    }
    // A weight of the wrong type (kFLOAT where the contract says int8 bytes, bf16 or x's type):
    // the first input after x that is not kFLOAT when x is kBF16.
    for (size_t i = 0; i < types.size(); ++i)
    {
        types[i] = inputType(c, i, DataType::kBF16);
    }
    size_t weight = 1;
    while (weight < types.size() && types[weight] == DataType::kFLOAT)
    {
        ++weight;
    }
    if (weight == types.size())
    {
        return;  // no input after x (Router): nothing to mistype
    }
    types[weight] = DataType::kFLOAT;
    std::vector<DataType> out(nbOutputs(c), DataType::kINT64);
    int const before = logger.mErrors;
    int32_t const status
        = h.build->getOutputDataTypes(out.data(), nbOutputs(c), types.data(), static_cast<int32_t>(types.size()));
    check(status != 0 && logger.mErrors > before,
        c.id + ": getOutputDataTypes refuses a kFLOAT weight and reports why");
}

void checkFormats(PluginHandle const& h, Case const& c)
{
    int32_t const nbIn = static_cast<int32_t>(c.inputs.size());
    int32_t const nbOut = nbOutputs(c);
    std::vector<DynamicPluginTensorDesc> io(nbIn + nbOut);
    for (int32_t i = 0; i < nbIn; ++i)
    {
        io[i].desc.dims = toDims(c.inputs[i].dims);
        io[i].desc.type = toDataType(c.inputs[i].dtype);
        io[i].desc.format = TensorFormat::kLINEAR;
    }
    for (int32_t o = 0; o < nbOut; ++o)
    {
        io[nbIn + o].desc.dims = toDims(outputsOf(c)[o].dims);
        io[nbIn + o].desc.format = TensorFormat::kLINEAR;
    }
    DataType const all[] = {DataType::kFLOAT, DataType::kHALF, DataType::kINT8, DataType::kINT32, DataType::kBOOL,
        DataType::kUINT8, DataType::kFP8, DataType::kBF16, DataType::kINT64};
    bool ok = true;
    std::string detail;
    for (DataType x : {DataType::kFLOAT, DataType::kHALF, DataType::kBF16})
    {
        for (int32_t i = 0; i < nbIn; ++i)
        {
            io[i].desc.type = inputType(c, i, x);
        }
        for (int32_t o = 0; o < nbOut; ++o)
        {
            io[nbIn + o].desc.type = outputType(c, o, x);
        }
        for (int32_t pos = 0; pos < nbIn + nbOut; ++pos)
        {
            for (DataType t : all)
            {
                for (TensorFormat f : {TensorFormat::kLINEAR, TensorFormat::kCHW32, TensorFormat::kHWC8})
                {
                    DynamicPluginTensorDesc saved = io[pos];
                    io[pos].desc.type = t;
                    io[pos].desc.format = f;
                    bool expected = f == TensorFormat::kLINEAR;
                    if (pos == 0)
                    {
                        expected = expected && (t == DataType::kFLOAT || t == DataType::kHALF || t == DataType::kBF16);
                    }
                    else if (pos >= nbIn)
                    {
                        expected = expected && t == outputType(c, pos - nbIn, x);
                    }
                    else
                    {
                        expected = expected && t == inputType(c, pos, x);
                    }
                    bool const got = h.build->supportsFormatCombination(pos, io.data(), nbIn, nbOut);
                    if (got != expected)
                    {
                        ok = false;
                        detail += " pos " + std::to_string(pos) + " " + typeName(t) + "/" + std::to_string(int(f))
                            + (got ? " accepted" : " refused") + ";";
                    }
                    io[pos] = saved;
                }
            }
        }
    }
    check(ok, c.id + ": supportsFormatCombination accepts exactly x in {kFLOAT,kHALF,kBF16}, the contract's"
                     " weight types,"
                     " outputs of the contract's types, all linear" + detail);
}

//! configurePlugin and getWorkspaceSize for one profile [lo, hi]; returns the workspace size.
size_t configure(PluginHandle const& h, Case const& c, DataType x, int64_t lo, int64_t hi, bool& ok)
{
    int32_t const nbIn = static_cast<int32_t>(c.inputs.size());
    std::vector<DynamicPluginTensorDesc> in(nbIn);
    for (int32_t i = 0; i < nbIn; ++i)
    {
        in[i].desc.dims = toDims(c.inputs[i].dims);
        in[i].desc.type = inputType(c, i, x);
        in[i].desc.format = TensorFormat::kLINEAR;
        in[i].min = in[i].opt = in[i].max = in[i].desc.dims;
        if (c.inputs[i].rows)
        {
            in[i].desc.dims.d[0] = -1;
            in[i].min.d[0] = lo;
            in[i].opt.d[0] = hi;
            in[i].max.d[0] = hi;
        }
    }
    int32_t const nbOut = nbOutputs(c);
    std::vector<DynamicPluginTensorDesc> out(nbOut);
    for (int32_t o = 0; o < nbOut; ++o)
    {
        out[o].desc.dims = toDims(outputShape(c, o, -1));
        out[o].desc.type = outputType(c, o, x);
        out[o].desc.format = TensorFormat::kLINEAR;
        out[o].min = toDims(outputShape(c, o, lo));
        out[o].opt = out[o].max = toDims(outputShape(c, o, hi));
    }
    ok = h.build->configurePlugin(in.data(), nbIn, out.data(), nbOut) == 0;
    return h.build->getWorkspaceSize(in.data(), nbIn, out.data(), nbOut);
}

std::vector<char> readFile(std::string const& path, size_t expected)
{
    std::ifstream in(path, std::ios::binary);
    std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (data.size() != expected)
    {
        throw std::runtime_error(path + ": expected " + std::to_string(expected) + " bytes, found "
            + std::to_string(data.size()));
    }
    return data;
}

bool cudaOk(cudaError_t e, std::string const& what)
{
    if (e != cudaSuccess)
    {
        check(false, what + ": " + cudaGetErrorString(e));
        return false;
    }
    return true;
}

//! The GPU part: the runtime plugin (from serialized fields, attached to a context) runs enqueue at
//! both ends of every profile, with the workspace getWorkspaceSize gave for the profile's max.
void runOnGpu(PluginHandle const& runtime, Case const& c, std::string const& dir, std::string const& outDir)
{
    int32_t const nbIn = static_cast<int32_t>(c.inputs.size());
    int32_t const nbOut = nbOutputs(c);
    DataType const x = toDataType(c.inputs[0].dtype);
    int64_t const maxRows = c.inputs[0].dims[0];

    std::vector<void*> dev(nbIn, nullptr);
    for (int32_t i = 0; i < nbIn; ++i)
    {
        size_t bytes = elementSize(toDataType(c.inputs[i].dtype));
        for (int64_t d : c.inputs[i].dims)
        {
            bytes *= d;
        }
        std::vector<char> host = readFile(dir + "/" + c.inputs[i].file, bytes);
        if (!cudaOk(cudaMalloc(&dev[i], bytes), c.id + ": cudaMalloc " + c.inputs[i].name)
            || !cudaOk(cudaMemcpy(dev[i], host.data(), bytes, cudaMemcpyHostToDevice),
                c.id + ": copy " + c.inputs[i].name))
        {
            return;
        }
    }
    cudaStream_t stream{};
    cudaOk(cudaStreamCreate(&stream), "cudaStreamCreate");

    for (auto const& [lo, hi] : c.profiles)
    {
        bool configured = false;
        size_t const workspaceBytes = configure(runtime, c, x, lo, hi, configured);
        check(configured,
            c.id + ": configurePlugin for the profile [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
        void* workspace = nullptr;
        if (workspaceBytes > 0 && !cudaOk(cudaMalloc(&workspace, workspaceBytes), c.id + ": cudaMalloc workspace"))
        {
            continue;
        }
        std::vector<int64_t> rows{lo};
        if (hi != lo)
        {
            rows.push_back(hi);
        }
        for (int64_t m : rows)
        {
            if (m > maxRows)
            {
                check(false, c.id + ": the manifest's x has " + std::to_string(maxRows) + " rows, fewer than M="
                        + std::to_string(m));
                continue;
            }
            std::string const tag = c.id + " M=" + std::to_string(m) + " (profile " + std::to_string(lo) + "-"
                + std::to_string(hi) + ", workspace " + std::to_string(workspaceBytes) + " B)";
            std::vector<PluginTensorDesc> in = inputDescs(c, x, m);
            std::vector<PluginTensorDesc> out = outputDescs(c, x, m);
            check(runtime.runtime->onShapeChange(in.data(), nbIn, out.data(), nbOut) == 0, tag + ": onShapeChange");

            std::vector<size_t> bytes(nbOut);
            std::vector<void*> outputs(nbOut, nullptr);
            bool allocated = true;
            for (int32_t o = 0; o < nbOut; ++o)
            {
                bytes[o] = elementSize(out[o].type);
                for (int64_t d : outputShape(c, o, m))
                {
                    bytes[o] *= static_cast<size_t>(d);
                }
                allocated = allocated && cudaOk(cudaMalloc(&outputs[o], bytes[o]), tag + ": cudaMalloc output");
                // Poison every output so an op that writes nothing cannot pass.
                allocated = allocated && cudaOk(cudaMemset(outputs[o], 0xFF, bytes[o]), tag + ": poison output");
            }
            if (allocated)
            {
                std::vector<void const*> inputs(dev.begin(), dev.end());
                int32_t const status
                    = runtime.runtime->enqueue(in.data(), out.data(), inputs.data(), outputs.data(), workspace, stream);
                cudaError_t const sync = cudaStreamSynchronize(stream);
                check(status == 0 && sync == cudaSuccess,
                    tag + ": enqueue returns 0 and the stream completes (" + cudaGetErrorString(sync) + ")");
                for (int32_t o = 0; o < nbOut; ++o)
                {
                    std::vector<char> host(bytes[o]);
                    cudaMemcpy(host.data(), outputs[o], bytes[o], cudaMemcpyDeviceToHost);
                    std::string const path = outDir + "/" + c.id + ".m" + std::to_string(m)
                        + (o == 0 ? "" : ".out" + std::to_string(o)) + ".bin";
                    std::ofstream(path, std::ios::binary).write(host.data(), static_cast<std::streamsize>(bytes[o]));
                }
            }
            for (void* p : outputs)
            {
                cudaFree(p);
            }
        }
        cudaFree(workspace);
    }
    cudaStreamDestroy(stream);
    for (void* p : dev)
    {
        cudaFree(p);
    }
}

void runCase(
    Library const& lib, Case const& c, std::string const& dir, std::string const& outDir, bool gpu, Logger& logger)
{
    auto it = lib.creators.find(c.op);
    check(it != lib.creators.end(), c.id + ": creator for " + c.op);
    if (it == lib.creators.end())
    {
        return;
    }
    IPluginCreatorV3One* creator = it->second;
    checkFieldNames(creator, c);

    OwnedFields fields = onnxFields(c);
    int const errorsBefore = logger.mErrors;
    std::unique_ptr<IPluginV3> built(creator->createPlugin(c.id.c_str(), fields.collection(), TensorRTPhase::kBUILD));
    check(built != nullptr && logger.mErrors == errorsBefore,
        c.id + ": createPlugin(kBUILD) from the ONNX fields " + describeFields(fields.collection()));
    if (!built)
    {
        return;
    }
    PluginHandle const h = capabilities(built.get());
    check(h.core && h.build && h.runtime, c.id + ": core, build and runtime capabilities");
    if (!(h.core && h.build && h.runtime))
    {
        return;
    }
    check(c.op == h.core->getPluginName() && std::string(metrale::contract::kDOMAIN) == h.core->getPluginNamespace()
            && contractVersion(c.op) == h.core->getPluginVersion(),
        c.id + ": plugin name/namespace/version " + h.core->getPluginName() + "/" + h.core->getPluginNamespace() + "/"
            + h.core->getPluginVersion());
    check(h.build->getNbOutputs() == nbOutputs(c), c.id + ": " + std::to_string(nbOutputs(c)) + " outputs (found "
            + std::to_string(h.build->getNbOutputs()) + ")");

    checkTypes(h, c, logger);
    checkShapes(h, c, logger);
    checkFormats(h, c);

    DataType const x = toDataType(c.inputs[0].dtype);
    for (auto const& [lo, hi] : c.profiles)
    {
        bool configured = false;
        size_t const ws = configure(h, c, x, lo, hi, configured);
        check(configured, c.id + ": configurePlugin for the profile [" + std::to_string(lo) + ", " + std::to_string(hi)
                + "], workspace " + std::to_string(ws) + " B");
    }

    // Serialization round trip: the serialized fields recreate an equal plugin in kRUNTIME.
    OwnedFields serialized = copyFields(h.runtime->getFieldsToSerialize());
    check(sameFields(serialized.collection(), fields.collection()),
        c.id + ": getFieldsToSerialize gives back the ONNX fields (" + describeFields(serialized.collection()) + ")");
    std::unique_ptr<IPluginV3> restored(
        creator->createPlugin(c.id.c_str(), serialized.collection(), TensorRTPhase::kRUNTIME));
    check(restored != nullptr, c.id + ": createPlugin(kRUNTIME) from the serialized fields");
    if (!restored)
    {
        return;
    }
    PluginHandle const r = capabilities(restored.get());
    OwnedFields reserialized = copyFields(r.runtime->getFieldsToSerialize());
    check(sameFields(reserialized.collection(), serialized.collection()), c.id + ": the round trip is stable");
    std::string const idBuilt = h.build->getTimingCacheID() ? h.build->getTimingCacheID() : "";
    std::string const idRestored = r.build->getTimingCacheID() ? r.build->getTimingCacheID() : "";
    check(!idBuilt.empty() && idBuilt == idRestored, c.id + ": equal timing-cache IDs ('" + idBuilt + "')");

    // Clone: must not share state with the original, which is destroyed first.
    std::unique_ptr<IPluginV3> cloned(built->clone());
    built.reset();
    check(cloned != nullptr, c.id + ": clone");
    if (cloned)
    {
        PluginHandle const cl = capabilities(cloned.get());
        OwnedFields clonedFields = copyFields(cl.runtime->getFieldsToSerialize());
        check(sameFields(clonedFields.collection(), serialized.collection()),
            c.id + ": the clone serializes the same fields after the original is destroyed");
    }

    // attachToContext: a per-context copy that reports to the context's recorder.
    ErrorRecorder recorder;
    ResourceContext context(&recorder);
    std::unique_ptr<IPluginV3> attached(r.runtime->attachToContext(&context));
    check(attached != nullptr, c.id + ": attachToContext");
    if (!attached)
    {
        return;
    }
    PluginHandle const a = capabilities(attached.get());
    {
        // A wrong shape at run time goes to the context's recorder, not to the logger.
        int32_t const nbIn = static_cast<int32_t>(c.inputs.size());
        std::vector<PluginTensorDesc> in = inputDescs(c, x, c.inputs[0].dims[0]);
        // The second input one row too long, or, for an op with x alone (Router), x one column short.
        Dims& wrong = nbIn > 1 ? in[1].dims : in[0].dims;
        wrong.d[nbIn > 1 ? 0 : wrong.nbDims - 1] += nbIn > 1 ? 1 : -1;
        std::vector<PluginTensorDesc> out = outputDescs(c, x, c.inputs[0].dims[0]);
        int const loggerBefore = logger.mErrors;
        int32_t const status = a.runtime->onShapeChange(in.data(), nbIn, out.data(), nbOutputs(c));
        check(status != 0 && recorder.getNbErrors() == 1 && logger.mErrors == loggerBefore,
            c.id + ": onShapeChange refuses an input of the wrong shape and reports to the context's error recorder");
        recorder.clear();
    }
    if (gpu)
    {
        runOnGpu(a, c, dir, outDir);
        check(recorder.getNbErrors() == 0, c.id + ": no error reported to the context's recorder during enqueue");
    }
}

//! Creation must fail, report why, and return nullptr for fields the contract does not allow.
void checkRefusals(Library const& lib, Logger& logger)
{
    struct Bad
    {
        char const* op;
        char const* what;
        std::vector<Field> fields;
    };
    auto i = [](char const* name, int32_t v) { return Field{name, true, v, "", false, 0.0F}; };
    auto s = [](char const* name, char const* v) { return Field{name, false, 0, v, false, 0.0F}; };
    auto f = [](char const* name, float v) { return Field{name, false, 0, "", true, v}; };
    std::vector<Bad> const bad = {
        {"W4A16Proj", "group_size 96", {i("n", 64), i("k", 192), i("group_size", 96)}},
        {"W4A16Proj", "odd K (two codes a byte)", {i("n", 64), i("k", 201), i("group_size", 128)}},
        {"W4A16Proj", "activation_format fp8",
            {i("n", 64), i("k", 256), i("group_size", 128), s("activation_format", "fp8")}},
        {"W4A16Proj", "missing n", {i("k", 256), i("group_size", 128)}},
        {"W4A16Proj", "has_bias 2", {i("n", 64), i("k", 256), i("group_size", 128), i("has_bias", 2)}},
        {"W4A16Proj", "unknown field", {i("n", 64), i("k", 256), i("group_size", 128), i("groupsize", 128)}},
        {"W4A16Proj", "n as a string", {s("n", "64"), i("k", 256), i("group_size", 128)}},
        {"W8A8Proj", "weight_scale_granularity tensor",
            {i("n", 64), i("k", 256), s("weight_scale_granularity", "tensor")}},
        {"W8A8Proj", "activation_format nvfp4", {i("n", 64), i("k", 256), s("activation_format", "nvfp4")}},
        {"W8A8Proj", "activation_scale_granularity column",
            {i("n", 64), i("k", 256), s("activation_scale_granularity", "column")}},
        {"W4A4Proj", "K not a multiple of 16", {i("n", 64), i("k", 40)}},
        {"W4A4Proj", "activation_format fp8", {i("n", 64), i("k", 64), s("activation_format", "fp8")}},
        {"W4A4Proj", "family unknown", {i("n", 64), i("k", 64), s("family", "mlp")}},
        {"W4A4Proj", "negative n", {i("n", -1), i("k", 64)}},
        {"W4A16MoEProj", "top_k > num_experts",
            {i("n", 64), i("k", 256), i("num_experts", 4), i("top_k", 8), i("combine", 0), i("group_size", 128)}},
        {"W4A16MoEProj", "top_k 33 (the kernels serve <= 32)",
            {i("n", 64), i("k", 256), i("num_experts", 64), i("top_k", 33), i("combine", 0), i("group_size", 128)}},
        {"W8A8MoEProj", "missing num_experts", {i("n", 64), i("k", 256), i("top_k", 2), i("combine", 1)}},
        {"W8A8MoEProj", "num_experts 0", {i("n", 64), i("k", 256), i("num_experts", 0), i("top_k", 1)}},
        {"W4A4MoEProj", "combine 2", {i("n", 64), i("k", 64), i("num_experts", 8), i("top_k", 2), i("combine", 2)}},
        {"W4A4MoEProj", "K not a multiple of 16",
            {i("n", 64), i("k", 40), i("num_experts", 8), i("top_k", 2), i("combine", 0)}},
        {"FloatProj", "activation_format (FloatProj has none)", {i("n", 64), i("k", 64), s("activation_format", "bf16")}},
        {"FloatProj", "missing k", {i("n", 64)}},
        {"RMSNorm", "missing epsilon", {i("k", 128)}},
        {"RMSNorm", "epsilon as an int", {i("k", 128), i("epsilon", 0)}},
        {"RMSNorm", "k 0", {i("k", 0), f("epsilon", 1e-6F)}},
        {"RMSNorm", "has_gate 2", {i("k", 128), f("epsilon", 1e-6F), i("has_gate", 2)}},
        {"Router", "top_k > num_experts", {i("num_experts", 4), i("top_k", 8)}},
        {"Router", "normalize 2", {i("num_experts", 8), i("top_k", 2), i("normalize", 2)}},
        {"Attention", "q_heads not a multiple of kv_heads",
            {i("q_heads", 6), i("kv_heads", 4), i("head_dim", 64), f("scale", 0.125F)}},
        {"Attention", "missing scale", {i("q_heads", 8), i("kv_heads", 2), i("head_dim", 64)}},
        {"CausalConv1d", "missing channels", {i("kernel_size", 4)}},
        {"CausalConv1d", "kernel_size 9 (the kernel serves up to 8 taps)",
            {i("channels", 64), i("kernel_size", 9)}},
        {"CausalConv1d", "kernel_size 1", {i("channels", 64), i("kernel_size", 1)}},
        {"GatedDeltaRule", "num_v_heads not a multiple of num_k_heads",
            {i("num_k_heads", 2), i("num_v_heads", 3), i("head_k_dim", 64), i("head_v_dim", 64)}},
        {"GatedDeltaRule", "head_k_dim 96 (the kernel serves 64 and 128)",
            {i("num_k_heads", 1), i("num_v_heads", 2), i("head_k_dim", 96), i("head_v_dim", 64)}},
        {"GatedDeltaRule", "head_v_dim 48 (not a multiple of 32)",
            {i("num_k_heads", 1), i("num_v_heads", 2), i("head_k_dim", 64), i("head_v_dim", 48)}},
        {"GatedDeltaRule", "missing head_v_dim", {i("num_k_heads", 1), i("num_v_heads", 2), i("head_k_dim", 64)}},
    };
    for (Bad const& b : bad)
    {
        auto it = lib.creators.find(b.op);
        if (it == lib.creators.end())
        {
            continue;
        }
        Case c;
        c.fields = b.fields;
        OwnedFields fields = onnxFields(c);
        int const before = logger.mErrors;
        std::unique_ptr<IPluginV3> p(it->second->createPlugin("refused", fields.collection(), TensorRTPhase::kBUILD));
        check(p == nullptr && logger.mErrors > before,
            std::string(b.op) + ": createPlugin refuses " + b.what + " and reports why"
                + (logger.mErrors > before ? " ('" + logger.mLast + "')" : ""));
    }
    auto it = lib.creators.find("W4A16Proj");
    if (it != lib.creators.end())
    {
        int const before = logger.mErrors;
        std::unique_ptr<IPluginV3> p(it->second->createPlugin("refused", nullptr, TensorRTPhase::kRUNTIME));
        check(p == nullptr && logger.mErrors > before, "W4A16Proj: createPlugin refuses a null field collection");

        // Strings given with their NUL counted in the length (some writers do) parse the same.
        int32_t const n = 64, k = 256, g = 128;
        char const act[] = "bf16";
        PluginField const f[] = {{"n", &n, PluginFieldType::kINT32, 1}, {"k", &k, PluginFieldType::kINT32, 1},
            {"group_size", &g, PluginFieldType::kINT32, 1}, {"activation_format", act, PluginFieldType::kCHAR, 5}};
        PluginFieldCollection fc{4, f};
        std::unique_ptr<IPluginV3> q(it->second->createPlugin("nul", &fc, TensorRTPhase::kBUILD));
        check(q != nullptr, "W4A16Proj: a kCHAR field whose length counts the NUL is accepted");
    }
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 4)
    {
        std::fprintf(stderr, "usage: %s LIBRARY MANIFEST OUTDIR [--no-gpu] [--verbose]\n", argv[0]);
        return 2;
    }
    std::string const library = argv[1];
    std::string const manifest = argv[2];
    std::string const outDir = argv[3];
    bool gpu = true;
    Logger logger;
    for (int i = 4; i < argc; ++i)
    {
        gpu = gpu && std::strcmp(argv[i], "--no-gpu") != 0;
        logger.mVerbose = logger.mVerbose || std::strcmp(argv[i], "--verbose") == 0;
    }
    std::string const dir = manifest.find('/') == std::string::npos ? "." : manifest.substr(0, manifest.rfind('/'));
    try
    {
        LoggerFinder finder(&logger);
        Library const lib = loadLibrary(library, &finder);
        if (lib.handle == nullptr)
        {
            std::printf("SUMMARY passed=%d failed=%d\n", gPasses, gFailures);
            return 1;
        }
        if (gpu)
        {
            int count = 0;
            gpu = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
            check(gpu, "a CUDA device is present (" + std::to_string(count) + ")");
        }
        checkRefusals(lib, logger);
        for (Case const& c : readManifest(manifest))
        {
            runCase(lib, c, dir, outDir, gpu, logger);
        }
    }
    catch (std::exception const& e)
    {
        check(false, std::string("harness exception: ") + e.what());
    }
    std::printf("SUMMARY passed=%d failed=%d\n", gPasses, gFailures);
    return gFailures == 0 ? 0 : 1;
}
