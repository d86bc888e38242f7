/*
 * The TensorRT methods of the non-projection plugins (see opPlugin.h): counts, types and formats
 * from the contract's tables, shapes from the op's policy.
 */
#include "opPlugin.h"

#include <cuda_runtime_api.h>

namespace metrale
{
namespace plugin
{

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::DimsExprs;
using nvinfer1::DynamicPluginTensorDesc;
using nvinfer1::PluginTensorDesc;
using nvinfer1::TensorFormat;

DataType tensorType(contract::TensorType type, DataType x)
{
    return type == contract::TensorType::kLIKE_X ? x : dataType(type);
}

OpPlugin::OpPlugin(
    OpIdentity op, std::string layerName, std::vector<TensorSpec> inputs, std::vector<TensorSpec> outputs)
    : PluginCore(op, std::move(layerName))
    , mInputs(std::move(inputs))
    , mOutputs(std::move(outputs))
{
}

namespace
{
std::string names(std::vector<TensorSpec> const& specs)
{
    std::string s;
    for (TensorSpec const& t : specs)
    {
        s += s.empty() ? t.name : cat(", ", t.name);
    }
    return s;
}
} // namespace

void OpPlugin::checkCounts(int32_t nbInputs, int32_t nbOutputs) const
{
    METRALE_REQUIRE(nbInputs == static_cast<int32_t>(mInputs.size()), "expected ", mInputs.size(), " inputs (",
        names(mInputs), ") for the op's has_* fields, found ", nbInputs);
    METRALE_REQUIRE(nbOutputs == static_cast<int32_t>(mOutputs.size()), "expected ", mOutputs.size(), " outputs (",
        names(mOutputs), ") for the op's has_* fields, found ", nbOutputs);
}

void OpPlugin::checkTypes(DataType const* types, int32_t nbInputs) const
{
    METRALE_REQUIRE(isActivationType(types[kX_IDX]), mInputs[kX_IDX].name, ": expected kFLOAT, kHALF or kBF16, found ",
        dataTypeName(types[kX_IDX]));
    for (int32_t i = 1; i < nbInputs; ++i)
    {
        DataType const want = tensorType(mInputs[i].type, types[kX_IDX]);
        METRALE_REQUIRE(types[i] == want, mInputs[i].name, " (input ", i, "): expected ", dataTypeName(want),
            ", found ", dataTypeName(types[i]));
    }
}

int32_t OpPlugin::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept
{
    METRALE_GUARDED("configurePlugin", -1, {
        checkDescriptions(in, nbInputs, out, nbOutputs, true);
        for (int32_t o = 0; o < nbOutputs; ++o)
        {
            DataType const want = tensorType(mOutputs[o].type, in[kX_IDX].desc.type);
            METRALE_REQUIRE(out[o].desc.type == want, mOutputs[o].name, ": expected ", dataTypeName(want), ", found ",
                dataTypeName(out[o].desc.type));
        }
        return 0;
    })
}

int32_t OpPlugin::getOutputDataTypes(
    DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes, int32_t nbInputs) const noexcept
{
    METRALE_GUARDED("getOutputDataTypes", -1, {
        checkCounts(nbInputs, nbOutputs);
        METRALE_REQUIRE(outputTypes != nullptr && inputTypes != nullptr, "null type arrays");
        checkTypes(inputTypes, nbInputs);
        for (int32_t o = 0; o < nbOutputs; ++o)
        {
            outputTypes[o] = tensorType(mOutputs[o].type, inputTypes[kX_IDX]);
        }
        return 0;
    })
}

int32_t OpPlugin::getOutputShapes(DimsExprs const* inputs, int32_t nbInputs, DimsExprs const* /*shapeInputs*/,
    int32_t nbShapeInputs, DimsExprs* outputs, int32_t nbOutputs, nvinfer1::IExprBuilder& exprBuilder) noexcept
{
    METRALE_GUARDED("getOutputShapes", -1, {
        checkCounts(nbInputs, nbOutputs);
        METRALE_REQUIRE(nbShapeInputs == 0, "expected no shape inputs, found ", nbShapeInputs);
        METRALE_REQUIRE(inputs != nullptr && outputs != nullptr, "null shape arrays");
        // The constant dimensions are checked here, where the layer is added.
        std::vector<Dims> dims(nbInputs);
        for (int32_t i = 0; i < nbInputs; ++i)
        {
            METRALE_REQUIRE(inputs[i].nbDims >= 0 && inputs[i].nbDims <= Dims::MAX_DIMS, mInputs[i].name,
                ": bad rank ", inputs[i].nbDims);
            dims[i].nbDims = inputs[i].nbDims;
            for (int32_t j = 0; j < inputs[i].nbDims; ++j)
            {
                nvinfer1::IDimensionExpr const* e = inputs[i].d[j];
                METRALE_REQUIRE(e != nullptr, mInputs[i].name, ": dimension ", j, " has no expression");
                METRALE_REQUIRE(e->isConstant() || isDynamic(i, j, inputs[i].nbDims), mInputs[i].name, ": dimension ", j,
                    " must be static (", mInputs[i].name, " ", getPluginName(), " takes it from the fields)");
                dims[i].d[j] = e->isConstant() ? e->getConstantValue() : -1;
            }
        }
        checkDims(dims.data(), nbInputs, true);
        outputShapes(inputs, outputs, exprBuilder);
        for (int32_t o = 0; o < nbOutputs; ++o)
        {
            for (int32_t j = 0; j < outputs[o].nbDims; ++j)
            {
                METRALE_REQUIRE(outputs[o].d[j] != nullptr, "the expression builder gave no expression for ",
                    mOutputs[o].name, "'s dimension ", j);
            }
        }
        return 0;
    })
}

bool OpPlugin::supportsFormatCombination(
    int32_t pos, DynamicPluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    METRALE_GUARDED("supportsFormatCombination", false, {
        if (nbInputs != static_cast<int32_t>(mInputs.size()) || nbOutputs != static_cast<int32_t>(mOutputs.size())
            || pos < 0 || pos >= nbInputs + nbOutputs || inOut == nullptr)
        {
            return false;
        }
        PluginTensorDesc const& d = inOut[pos].desc;
        if (d.format != TensorFormat::kLINEAR)
        {
            return false;
        }
        if (pos == kX_IDX)
        {
            return isActivationType(d.type);
        }
        DataType const x = inOut[kX_IDX].desc.type;
        TensorSpec const& spec = pos < nbInputs ? mInputs[pos] : mOutputs[pos - nbInputs];
        return d.type == tensorType(spec.type, x);
    })
}

size_t OpPlugin::getWorkspaceSize(DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
    DynamicPluginTensorDesc const* /*outputs*/, int32_t nbOutputs) const noexcept
{
    METRALE_GUARDED("getWorkspaceSize", 0, {
        checkCounts(nbInputs, nbOutputs);
        METRALE_REQUIRE(inputs != nullptr, "null tensor descriptions");
        // The profile's largest shapes: every op's workspace grows with each dynamic dimension.
        std::vector<Dims> maxDims(nbInputs);
        for (int32_t i = 0; i < nbInputs; ++i)
        {
            maxDims[i] = inputs[i].max;
        }
        checkDims(maxDims.data(), nbInputs, false);
        return workspaceSize(maxDims.data(), activationDType(inputs[kX_IDX].desc.type));
    })
}

char const* OpPlugin::getTimingCacheID() noexcept
{
    METRALE_GUARDED("getTimingCacheID", nullptr, {
        // The checkpoint name is left out: ops of equal shape share timings.
        mTimingCacheId = cat(getPluginName(), ";", describe());
        return mTimingCacheId.c_str();
    })
}

char const* OpPlugin::getMetadataString() noexcept
{
    METRALE_GUARDED("getMetadataString", nullptr, {
        mMetadata = cat(getPluginName(), " name=", nodeName(), " ", describe());
        return mMetadata.c_str();
    })
}

int32_t OpPlugin::onShapeChange(
    PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* out, int32_t nbOutputs) noexcept
{
    METRALE_GUARDED("onShapeChange", -1, {
        checkDescriptions(in, nbInputs, out, nbOutputs, false);
        std::vector<Dims> inDims(nbInputs);
        for (int32_t i = 0; i < nbInputs; ++i)
        {
            inDims[i] = in[i].dims;
        }
        std::vector<Dims> const want = outputDims(inDims.data());
        for (int32_t o = 0; o < nbOutputs; ++o)
        {
            Dims const& y = out[o].dims;
            bool same = y.nbDims == want[o].nbDims;
            for (int32_t j = 0; same && j < y.nbDims; ++j)
            {
                same = y.d[j] == want[o].d[j];
            }
            METRALE_REQUIRE(same, mOutputs[o].name, ": expected ", dimsToString(want[o]), ", found ", dimsToString(y));
            DataType const type = tensorType(mOutputs[o].type, in[kX_IDX].type);
            METRALE_REQUIRE(out[o].type == type, mOutputs[o].name, ": expected ", dataTypeName(type));
        }
        return 0;
    })
}

int32_t OpPlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* outputDesc,
    void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept
{
    METRALE_GUARDED("enqueue", -1, {
        METRALE_REQUIRE(inputDesc != nullptr && outputDesc != nullptr && inputs != nullptr && outputs != nullptr,
            "null tensor descriptions or pointers");
        int32_t const nbInputs = static_cast<int32_t>(mInputs.size());
        std::vector<Dims> dims(nbInputs);
        for (int32_t i = 0; i < nbInputs; ++i)
        {
            dims[i] = inputDesc[i].dims;
        }
        checkDims(dims.data(), nbInputs, false);
        int64_t const m = rows(dims.data());
        if (m == 0)
        {
            return 0;
        }
        for (size_t o = 0; o < mOutputs.size(); ++o)
        {
            METRALE_REQUIRE(outputDesc[o].type == tensorType(mOutputs[o].type, inputDesc[kX_IDX].type),
                mOutputs[o].name, ": expected ", dataTypeName(tensorType(mOutputs[o].type, inputDesc[kX_IDX].type)));
        }
        OpTensors t;
        t.inDesc = inputDesc;
        t.in = inputs;
        t.out = outputs;
        t.xDType = activationDType(inputDesc[kX_IDX].type);
        t.workspace = workspace;
        t.stream = stream;
        t.workspaceBytes = workspaceSize(dims.data(), t.xDType);
        METRALE_REQUIRE(t.workspaceBytes == 0 || workspace != nullptr, "no workspace given; ", t.workspaceBytes,
            " bytes are needed for ", m, " rows");
        checkLaunch(launch(t), m);
        return 0;
    })
}

} // namespace plugin
} // namespace metrale
