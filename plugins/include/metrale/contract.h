/*
 * GENERATED from the package metrale_export/contract/ (the ops in contract/ops.py, the scalar
 * formats and blocks in contract/numerics.py, the retired versions in contract/versions.py) by
 * `python -m metrale_export.contract --write`:
 * do not edit (tests/contract fails when this file differs from what the contract generates).
 *
 * The metrale op contract (docs/ops.md) for the C++ side: the kernels' argument codes (C), and in
 * metrale::contract (C++17) the domain, the scalar-format constants, and per op its type, version,
 * activation formats, fields with types and defaults, enumerated values and inputs.
 */
#ifndef METRALE_CONTRACT_H
#define METRALE_CONTRACT_H

/* The kernels' enum codes: a value's code is its index in the contract's list. */
enum MetraleDType { kMETRALE_FLOAT32 = 0, kMETRALE_FLOAT16 = 1, kMETRALE_BFLOAT16 = 2 };
enum MetraleActFormat { kMETRALE_ACT_BF16 = 0, kMETRALE_ACT_FP8 = 1, kMETRALE_ACT_NVFP4 = 2 };
enum MetraleWeightScale { kMETRALE_WSCALE_CHANNEL = 0, kMETRALE_WSCALE_BLOCK128 = 1 };
enum MetraleActScale { kMETRALE_ASCALE_ROW = 0, kMETRALE_ASCALE_ROW_BLOCK128 = 1, kMETRALE_ASCALE_TENSOR = 2 };

#ifdef __cplusplus
#include <cstdint>

namespace metrale
{
namespace contract
{

constexpr char const* kDOMAIN{"metrale"};
constexpr int32_t kDOMAIN_VERSION{3};
constexpr char const* kFAMILIES[]{"attn", "ffn", "gdn", "moe", "head"};
constexpr char const* kX_DTYPES[]{"float32", "float16", "bfloat16"};
constexpr char const* kACTIVATION_FORMATS[]{"bf16", "fp8", "nvfp4"};

// Scalar formats and blocks (docs/ops.md, Arithmetic).
constexpr float kE4M3_MAX{448.0f};
constexpr float kE2M1_MAX{6.0f};
constexpr float kE2M1_VALUES[]{0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
constexpr float kNVFP4_GLOBAL_DIVISOR{2688.0f};
constexpr int32_t kFP8_BLOCK{128};
constexpr int32_t kNVFP4_BLOCK{16};
constexpr int32_t kRMSNORM_BLOCK{256};  // RMSNorm: threads a row beyond one warp
constexpr double kLOG2E{1.4426950408889634};  // Attention: scale_log2 = float32(float32(scale) * kLOG2E)
constexpr float kGDN_L2NORM_EPS{1e-06f};  // GatedDeltaRule: q, k l2norm epsilon
constexpr float kGDN_SOFTPLUS_THRESHOLD{20.0f};  // softplus(u) = u above it
constexpr int32_t kGDN_HEAD_V_BLOCK{32};  // GatedDeltaRule: dv a multiple of it on CUDA
constexpr int32_t kGDN_STATE_PART{64};  // GatedDeltaRule: dk elements a part of the state sums
constexpr int32_t kGDN_MAX_CONV_KERNEL{8};  // CausalConv1d: the most taps on CUDA
constexpr int32_t kGDN_CONV_KERNELS[]{2, 3, 4, 5, 6, 7, 8};  // CausalConv1d: kernel_size on CUDA
constexpr int32_t kGDN_HEAD_K_DIMS[]{64, 128};  // GatedDeltaRule: head_k_dim on CUDA

// What the CUDA kernels serve beyond the contract: K a multiple of this (KERNEL_K_MULTIPLE).
constexpr int32_t kW4A16_KERNEL_K_MULTIPLE{32};

enum class FieldType : int32_t { kINT, kSTRING, kFLOAT };
enum class TensorType : int32_t
{
    kFLOAT32, kFLOAT16, kBFLOAT16, kINT8, kUINT8, kINT32, kINT64, kBOOL, kLIKE_X
};

//! One field: required ones have no default; otherwise the default of its type applies.
struct Field
{
    char const* name;
    FieldType type;
    bool required;
    int32_t intDefault;
    float floatDefault;
    char const* stringDefault;
};

//! One input after x: gate is the field that says whether an optional one is present (nullptr:
//! always present): an int gate (has_*) when it is 1 (gateValue nullptr), an enumerated one when it
//! has the value gateValue; shape is the contract's expression of the fields, for messages.
struct Input
{
    char const* name;
    TensorType type;
    char const* gate;
    char const* gateValue;
    char const* shape;
};

//! One output: gate is the int field that says whether an optional one is present (nullptr:
//! always present); shape is the contract's expression ("...": x's leading dimensions), for messages.
struct Output
{
    char const* name;
    TensorType type;
    char const* gate;
    char const* shape;
};

//! A retired op version: the plugin version a graph may name and what changed since (refused).
struct Retired
{
    char const* version;
    char const* change;
};

//! The number of entries of a contract array.
template <typename T, int32_t N>
constexpr int32_t count(T const (&)[N])
{
    return N;
}

//! W4A16Proj: int4 weights (w4a16). x: [M, K], float32, float16 or bfloat16; y: [M, N], the dtype of x
struct W4A16Proj
{
    static constexpr char const* kOP_TYPE{"W4A16Proj"};
    static constexpr int32_t kVERSION_NUMBER{2};
    //! The TensorRT plugin version: the op version as a string.
    static constexpr char const* kVERSION{"2"};
    static constexpr char const* kKIND{"w4a16"};
    //! The name of the first input (x, the router's logits, attention's q), for messages.
    static constexpr char const* kX_NAME{"x"};
    static constexpr bool kHAS_PLUGIN{true};
    //! The dense op each expert computes (grouped-expert ops), else nullptr.
    static constexpr char const* kGROUPED_OF{nullptr};
    //! The older versions a graph may name, each refused with what changed since (kNB_RETIRED
    //! of them, oldest first, then a null entry).
    static constexpr Retired kRETIRED[]{{"1", "float32 group scales; version 2 stores them as bfloat16"}, {nullptr, nullptr}};
    static constexpr int32_t kNB_RETIRED{1};
    //! The older version whose nodes this version reads as they are (only new attribute values
    //! since), registered as a second creator (nullptr: none).
    static constexpr char const* kCOMPATIBLE_VERSION{nullptr};
    static constexpr char const* kACTIVATION_FORMATS[]{"bf16"};
    static constexpr char const* kDEFAULT_ACTIVATION{"bf16"};
    //! The fields (ONNX attributes) in contract order: the plugins' field list.
    static constexpr Field kFIELDS[]{
        {"n", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"k", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"group_size", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"has_zero_point", FieldType::kINT, false, 0, 0.0f, nullptr},
        {"activation_format", FieldType::kSTRING, false, 0, 0.0f, "bf16"},
        {"has_bias", FieldType::kINT, false, 0, 0.0f, nullptr},
        {"family", FieldType::kSTRING, false, 0, 0.0f, ""},
        {"name", FieldType::kSTRING, false, 0, 0.0f, ""},
    };
    //! Each enumerated field's values, in the order of its code (the kernels' enum).
    static constexpr int32_t kGROUP_SIZE_VALUES[]{32, 64, 128};
    static constexpr int32_t kHAS_ZERO_POINT_VALUES[]{0, 1};
    static constexpr char const* kACTIVATION_FORMAT_VALUES[]{"bf16"};
    static constexpr int32_t kHAS_BIAS_VALUES[]{0, 1};
    static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    //! The inputs after x, positional; an optional one is present when its gate field is 1
    //! (gateValue nullptr) or has the value gateValue (an enumerated gate).
    static constexpr Input kINPUTS[]{
        {"weight", TensorType::kINT8, nullptr, nullptr, "[n, k/2]"},
        {"weight_scale", TensorType::kBFLOAT16, nullptr, nullptr, "[n, ceil(k/group_size)]"},
        {"zero_point", TensorType::kINT8, "has_zero_point", nullptr, "[n, ceil(k/group_size)]"},
        {"bias", TensorType::kFLOAT32, "has_bias", nullptr, "[n]"},
    };
    //! The outputs, positional; an optional one is present when its gate field is 1.
    static constexpr Output kOUTPUTS[]{
        {"y", TensorType::kLIKE_X, nullptr, "[m, n]"},
    };
};

//! W8A8Proj: FP8 weights (w8a8). x: [M, K], float32, float16 or bfloat16; y: [M, N], the dtype of x; fp8 activations: FP8 e4m3 products summed in the FP8 tensor core's accumulator within each 128-k block, promoted to float32 every 128 k, per-row x per-channel scales in the epilogue
struct W8A8Proj
{
    static constexpr char const* kOP_TYPE{"W8A8Proj"};
    static constexpr int32_t kVERSION_NUMBER{3};
    //! The TensorRT plugin version: the op version as a string.
    static constexpr char const* kVERSION{"3"};
    static constexpr char const* kKIND{"w8a8"};
    //! The name of the first input (x, the router's logits, attention's q), for messages.
    static constexpr char const* kX_NAME{"x"};
    static constexpr bool kHAS_PLUGIN{true};
    //! The dense op each expert computes (grouped-expert ops), else nullptr.
    static constexpr char const* kGROUPED_OF{nullptr};
    //! The older versions a graph may name, each refused with what changed since (kNB_RETIRED
    //! of them, oldest first, then a null entry).
    static constexpr Retired kRETIRED[]{{"1", "exact f16 products summed in float32; version 3 multiplies on the FP8 tensor core"}, {"2", "exact f16 products summed in float32; version 3 multiplies on the FP8 tensor core"}, {nullptr, nullptr}};
    static constexpr int32_t kNB_RETIRED{2};
    //! The older version whose nodes this version reads as they are (only new attribute values
    //! since), registered as a second creator (nullptr: none).
    static constexpr char const* kCOMPATIBLE_VERSION{nullptr};
    static constexpr char const* kACTIVATION_FORMATS[]{"bf16", "fp8"};
    static constexpr char const* kDEFAULT_ACTIVATION{"fp8"};
    //! The fields (ONNX attributes) in contract order: the plugins' field list.
    static constexpr Field kFIELDS[]{
        {"n", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"k", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"weight_scale_granularity", FieldType::kSTRING, false, 0, 0.0f, "channel"},
        {"activation_format", FieldType::kSTRING, false, 0, 0.0f, "fp8"},
        {"activation_scale_granularity", FieldType::kSTRING, false, 0, 0.0f, "row"},
        {"has_bias", FieldType::kINT, false, 0, 0.0f, nullptr},
        {"family", FieldType::kSTRING, false, 0, 0.0f, ""},
        {"name", FieldType::kSTRING, false, 0, 0.0f, ""},
    };
    //! Each enumerated field's values, in the order of its code (the kernels' enum).
    static constexpr char const* kWEIGHT_SCALE_GRANULARITY_VALUES[]{"channel", "block128"};
    static constexpr char const* kACTIVATION_FORMAT_VALUES[]{"bf16", "fp8"};
    static constexpr char const* kACTIVATION_SCALE_GRANULARITY_VALUES[]{"row", "row_block128", "tensor"};
    static constexpr int32_t kHAS_BIAS_VALUES[]{0, 1};
    static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    //! The inputs after x, positional; an optional one is present when its gate field is 1
    //! (gateValue nullptr) or has the value gateValue (an enumerated gate).
    static constexpr Input kINPUTS[]{
        {"weight", TensorType::kINT8, nullptr, nullptr, "[n, k]"},
        {"weight_scale", TensorType::kFLOAT32, nullptr, nullptr, "[n]"},
        {"input_scale", TensorType::kFLOAT32, "activation_scale_granularity", "tensor", "[1]"},
        {"bias", TensorType::kFLOAT32, "has_bias", nullptr, "[n]"},
    };
    //! The outputs, positional; an optional one is present when its gate field is 1.
    static constexpr Output kOUTPUTS[]{
        {"y", TensorType::kLIKE_X, nullptr, "[m, n]"},
    };
};

//! W4A4Proj: NVFP4 weights (w4a4). x: [M, K], float32, float16 or bfloat16; y: [M, N], the dtype of x
struct W4A4Proj
{
    static constexpr char const* kOP_TYPE{"W4A4Proj"};
    static constexpr int32_t kVERSION_NUMBER{1};
    //! The TensorRT plugin version: the op version as a string.
    static constexpr char const* kVERSION{"1"};
    static constexpr char const* kKIND{"w4a4"};
    //! The name of the first input (x, the router's logits, attention's q), for messages.
    static constexpr char const* kX_NAME{"x"};
    static constexpr bool kHAS_PLUGIN{true};
    //! The dense op each expert computes (grouped-expert ops), else nullptr.
    static constexpr char const* kGROUPED_OF{nullptr};
    //! The older versions a graph may name, each refused with what changed since (kNB_RETIRED
    //! of them, oldest first, then a null entry).
    static constexpr Retired kRETIRED[]{{nullptr, nullptr}};
    static constexpr int32_t kNB_RETIRED{0};
    //! The older version whose nodes this version reads as they are (only new attribute values
    //! since), registered as a second creator (nullptr: none).
    static constexpr char const* kCOMPATIBLE_VERSION{nullptr};
    static constexpr char const* kACTIVATION_FORMATS[]{"bf16", "nvfp4"};
    static constexpr char const* kDEFAULT_ACTIVATION{"nvfp4"};
    //! The fields (ONNX attributes) in contract order: the plugins' field list.
    static constexpr Field kFIELDS[]{
        {"n", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"k", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"activation_format", FieldType::kSTRING, false, 0, 0.0f, "nvfp4"},
        {"has_input_scale", FieldType::kINT, false, 0, 0.0f, nullptr},
        {"has_bias", FieldType::kINT, false, 0, 0.0f, nullptr},
        {"family", FieldType::kSTRING, false, 0, 0.0f, ""},
        {"name", FieldType::kSTRING, false, 0, 0.0f, ""},
    };
    //! Each enumerated field's values, in the order of its code (the kernels' enum).
    static constexpr char const* kACTIVATION_FORMAT_VALUES[]{"bf16", "nvfp4"};
    static constexpr int32_t kHAS_INPUT_SCALE_VALUES[]{0, 1};
    static constexpr int32_t kHAS_BIAS_VALUES[]{0, 1};
    static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    //! The inputs after x, positional; an optional one is present when its gate field is 1
    //! (gateValue nullptr) or has the value gateValue (an enumerated gate).
    static constexpr Input kINPUTS[]{
        {"weight", TensorType::kINT8, nullptr, nullptr, "[n, k/2]"},
        {"weight_scale", TensorType::kINT8, nullptr, nullptr, "[n, k/16]"},
        {"weight_global_scale", TensorType::kFLOAT32, nullptr, nullptr, "[1]"},
        {"input_scale", TensorType::kFLOAT32, "has_input_scale", nullptr, "[1]"},
        {"bias", TensorType::kFLOAT32, "has_bias", nullptr, "[n]"},
    };
    //! The outputs, positional; an optional one is present when its gate field is 1.
    static constexpr Output kOUTPUTS[]{
        {"y", TensorType::kLIKE_X, nullptr, "[m, n]"},
    };
};

//! W4A16MoEProj: int4 weights (w4a16). x: [M, K] (combine=0) or [M, top_k, K] (combine=1); y: [M, top_k, N] or [M, N]
struct W4A16MoEProj
{
    static constexpr char const* kOP_TYPE{"W4A16MoEProj"};
    static constexpr int32_t kVERSION_NUMBER{2};
    //! The TensorRT plugin version: the op version as a string.
    static constexpr char const* kVERSION{"2"};
    static constexpr char const* kKIND{"w4a16"};
    //! The name of the first input (x, the router's logits, attention's q), for messages.
    static constexpr char const* kX_NAME{"x"};
    static constexpr bool kHAS_PLUGIN{true};
    //! The dense op each expert computes (grouped-expert ops), else nullptr.
    static constexpr char const* kGROUPED_OF{"W4A16Proj"};
    //! The older versions a graph may name, each refused with what changed since (kNB_RETIRED
    //! of them, oldest first, then a null entry).
    static constexpr Retired kRETIRED[]{{"1", "float32 group scales; version 2 stores them as bfloat16"}, {nullptr, nullptr}};
    static constexpr int32_t kNB_RETIRED{1};
    //! The older version whose nodes this version reads as they are (only new attribute values
    //! since), registered as a second creator (nullptr: none).
    static constexpr char const* kCOMPATIBLE_VERSION{nullptr};
    static constexpr char const* kACTIVATION_FORMATS[]{"bf16"};
    static constexpr char const* kDEFAULT_ACTIVATION{"bf16"};
    //! The fields (ONNX attributes) in contract order: the plugins' field list.
    static constexpr Field kFIELDS[]{
        {"n", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"k", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"num_experts", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"top_k", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"combine", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"group_size", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"has_zero_point", FieldType::kINT, false, 0, 0.0f, nullptr},
        {"activation_format", FieldType::kSTRING, false, 0, 0.0f, "bf16"},
        {"has_bias", FieldType::kINT, false, 0, 0.0f, nullptr},
        {"family", FieldType::kSTRING, false, 0, 0.0f, ""},
        {"name", FieldType::kSTRING, false, 0, 0.0f, ""},
    };
    //! Each enumerated field's values, in the order of its code (the kernels' enum).
    static constexpr int32_t kCOMBINE_VALUES[]{0, 1};
    static constexpr int32_t kGROUP_SIZE_VALUES[]{32, 64, 128};
    static constexpr int32_t kHAS_ZERO_POINT_VALUES[]{0, 1};
    static constexpr char const* kACTIVATION_FORMAT_VALUES[]{"bf16"};
    static constexpr int32_t kHAS_BIAS_VALUES[]{0, 1};
    static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    //! The inputs after x, positional; an optional one is present when its gate field is 1
    //! (gateValue nullptr) or has the value gateValue (an enumerated gate).
    static constexpr Input kINPUTS[]{
        {"topk_ids", TensorType::kINT32, nullptr, nullptr, "[m, top_k]"},
        {"weight", TensorType::kINT8, nullptr, nullptr, "[num_experts, n, k/2]"},
        {"weight_scale", TensorType::kBFLOAT16, nullptr, nullptr, "[num_experts, n, ceil(k/group_size)]"},
        {"zero_point", TensorType::kINT8, "has_zero_point", nullptr, "[num_experts, n, ceil(k/group_size)]"},
        {"bias", TensorType::kFLOAT32, "has_bias", nullptr, "[num_experts, n]"},
        {"topk_weights", TensorType::kLIKE_X, "combine", nullptr, "[m, top_k]"},
    };
    //! The outputs, positional; an optional one is present when its gate field is 1.
    static constexpr Output kOUTPUTS[]{
        {"y", TensorType::kLIKE_X, nullptr, "[m, n]"},
    };
};

//! W8A8MoEProj: FP8 weights (w8a8). x: [M, K] (combine=0) or [M, top_k, K] (combine=1); y: [M, top_k, N] or [M, N]
struct W8A8MoEProj
{
    static constexpr char const* kOP_TYPE{"W8A8MoEProj"};
    static constexpr int32_t kVERSION_NUMBER{2};
    //! The TensorRT plugin version: the op version as a string.
    static constexpr char const* kVERSION{"2"};
    static constexpr char const* kKIND{"w8a8"};
    //! The name of the first input (x, the router's logits, attention's q), for messages.
    static constexpr char const* kX_NAME{"x"};
    static constexpr bool kHAS_PLUGIN{true};
    //! The dense op each expert computes (grouped-expert ops), else nullptr.
    static constexpr char const* kGROUPED_OF{"W8A8Proj"};
    //! The older versions a graph may name, each refused with what changed since (kNB_RETIRED
    //! of them, oldest first, then a null entry).
    static constexpr Retired kRETIRED[]{{nullptr, nullptr}};
    static constexpr int32_t kNB_RETIRED{0};
    //! The older version whose nodes this version reads as they are (only new attribute values
    //! since), registered as a second creator (nullptr: none).
    static constexpr char const* kCOMPATIBLE_VERSION{"1"};
    static constexpr char const* kACTIVATION_FORMATS[]{"bf16", "fp8"};
    static constexpr char const* kDEFAULT_ACTIVATION{"fp8"};
    //! The fields (ONNX attributes) in contract order: the plugins' field list.
    static constexpr Field kFIELDS[]{
        {"n", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"k", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"num_experts", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"top_k", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"combine", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"weight_scale_granularity", FieldType::kSTRING, false, 0, 0.0f, "channel"},
        {"activation_format", FieldType::kSTRING, false, 0, 0.0f, "fp8"},
        {"activation_scale_granularity", FieldType::kSTRING, false, 0, 0.0f, "row"},
        {"has_bias", FieldType::kINT, false, 0, 0.0f, nullptr},
        {"family", FieldType::kSTRING, false, 0, 0.0f, ""},
        {"name", FieldType::kSTRING, false, 0, 0.0f, ""},
    };
    //! Each enumerated field's values, in the order of its code (the kernels' enum).
    static constexpr int32_t kCOMBINE_VALUES[]{0, 1};
    static constexpr char const* kWEIGHT_SCALE_GRANULARITY_VALUES[]{"channel", "block128"};
    static constexpr char const* kACTIVATION_FORMAT_VALUES[]{"bf16", "fp8"};
    static constexpr char const* kACTIVATION_SCALE_GRANULARITY_VALUES[]{"row", "row_block128", "tensor"};
    static constexpr int32_t kHAS_BIAS_VALUES[]{0, 1};
    static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    //! The inputs after x, positional; an optional one is present when its gate field is 1
    //! (gateValue nullptr) or has the value gateValue (an enumerated gate).
    static constexpr Input kINPUTS[]{
        {"topk_ids", TensorType::kINT32, nullptr, nullptr, "[m, top_k]"},
        {"weight", TensorType::kINT8, nullptr, nullptr, "[num_experts, n, k]"},
        {"weight_scale", TensorType::kFLOAT32, nullptr, nullptr, "[num_experts, n]"},
        {"input_scale", TensorType::kFLOAT32, "activation_scale_granularity", "tensor", "[num_experts]"},
        {"bias", TensorType::kFLOAT32, "has_bias", nullptr, "[num_experts, n]"},
        {"topk_weights", TensorType::kLIKE_X, "combine", nullptr, "[m, top_k]"},
    };
    //! The outputs, positional; an optional one is present when its gate field is 1.
    static constexpr Output kOUTPUTS[]{
        {"y", TensorType::kLIKE_X, nullptr, "[m, n]"},
    };
};

//! W4A4MoEProj: NVFP4 weights (w4a4). x: [M, K] (combine=0) or [M, top_k, K] (combine=1); y: [M, top_k, N] or [M, N]
struct W4A4MoEProj
{
    static constexpr char const* kOP_TYPE{"W4A4MoEProj"};
    static constexpr int32_t kVERSION_NUMBER{1};
    //! The TensorRT plugin version: the op version as a string.
    static constexpr char const* kVERSION{"1"};
    static constexpr char const* kKIND{"w4a4"};
    //! The name of the first input (x, the router's logits, attention's q), for messages.
    static constexpr char const* kX_NAME{"x"};
    static constexpr bool kHAS_PLUGIN{true};
    //! The dense op each expert computes (grouped-expert ops), else nullptr.
    static constexpr char const* kGROUPED_OF{"W4A4Proj"};
    //! The older versions a graph may name, each refused with what changed since (kNB_RETIRED
    //! of them, oldest first, then a null entry).
    static constexpr Retired kRETIRED[]{{nullptr, nullptr}};
    static constexpr int32_t kNB_RETIRED{0};
    //! The older version whose nodes this version reads as they are (only new attribute values
    //! since), registered as a second creator (nullptr: none).
    static constexpr char const* kCOMPATIBLE_VERSION{nullptr};
    static constexpr char const* kACTIVATION_FORMATS[]{"bf16", "nvfp4"};
    static constexpr char const* kDEFAULT_ACTIVATION{"nvfp4"};
    //! The fields (ONNX attributes) in contract order: the plugins' field list.
    static constexpr Field kFIELDS[]{
        {"n", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"k", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"num_experts", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"top_k", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"combine", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"activation_format", FieldType::kSTRING, false, 0, 0.0f, "nvfp4"},
        {"has_input_scale", FieldType::kINT, false, 0, 0.0f, nullptr},
        {"has_bias", FieldType::kINT, false, 0, 0.0f, nullptr},
        {"family", FieldType::kSTRING, false, 0, 0.0f, ""},
        {"name", FieldType::kSTRING, false, 0, 0.0f, ""},
    };
    //! Each enumerated field's values, in the order of its code (the kernels' enum).
    static constexpr int32_t kCOMBINE_VALUES[]{0, 1};
    static constexpr char const* kACTIVATION_FORMAT_VALUES[]{"bf16", "nvfp4"};
    static constexpr int32_t kHAS_INPUT_SCALE_VALUES[]{0, 1};
    static constexpr int32_t kHAS_BIAS_VALUES[]{0, 1};
    static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    //! The inputs after x, positional; an optional one is present when its gate field is 1
    //! (gateValue nullptr) or has the value gateValue (an enumerated gate).
    static constexpr Input kINPUTS[]{
        {"topk_ids", TensorType::kINT32, nullptr, nullptr, "[m, top_k]"},
        {"weight", TensorType::kINT8, nullptr, nullptr, "[num_experts, n, k/2]"},
        {"weight_scale", TensorType::kINT8, nullptr, nullptr, "[num_experts, n, k/16]"},
        {"weight_global_scale", TensorType::kFLOAT32, nullptr, nullptr, "[num_experts]"},
        {"input_scale", TensorType::kFLOAT32, "has_input_scale", nullptr, "[num_experts]"},
        {"bias", TensorType::kFLOAT32, "has_bias", nullptr, "[num_experts, n]"},
        {"topk_weights", TensorType::kLIKE_X, "combine", nullptr, "[m, top_k]"},
    };
    //! The outputs, positional; an optional one is present when its gate field is 1.
    static constexpr Output kOUTPUTS[]{
        {"y", TensorType::kLIKE_X, nullptr, "[m, n]"},
    };
};

//! RMSNorm:  weights (rms_norm). x: [..., K] (rows: the leading dimensions, e.g. [B, S, H] or the q/k norm's [B, S, heads, D]); y: x's shape and dtype
struct RMSNorm
{
    static constexpr char const* kOP_TYPE{"RMSNorm"};
    static constexpr int32_t kVERSION_NUMBER{1};
    //! The TensorRT plugin version: the op version as a string.
    static constexpr char const* kVERSION{"1"};
    static constexpr char const* kKIND{"rms_norm"};
    //! The name of the first input (x, the router's logits, attention's q), for messages.
    static constexpr char const* kX_NAME{"x"};
    static constexpr bool kHAS_PLUGIN{true};
    //! The dense op each expert computes (grouped-expert ops), else nullptr.
    static constexpr char const* kGROUPED_OF{nullptr};
    //! The older versions a graph may name, each refused with what changed since (kNB_RETIRED
    //! of them, oldest first, then a null entry).
    static constexpr Retired kRETIRED[]{{nullptr, nullptr}};
    static constexpr int32_t kNB_RETIRED{0};
    //! The older version whose nodes this version reads as they are (only new attribute values
    //! since), registered as a second creator (nullptr: none).
    static constexpr char const* kCOMPATIBLE_VERSION{nullptr};
    static constexpr char const* kACTIVATION_FORMATS[]{};
    static constexpr char const* kDEFAULT_ACTIVATION{""};
    //! The fields (ONNX attributes) in contract order: the plugins' field list.
    static constexpr Field kFIELDS[]{
        {"k", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"epsilon", FieldType::kFLOAT, true, 0, 0.0f, nullptr},
        {"weight_offset", FieldType::kINT, false, 0, 0.0f, nullptr},
        {"has_residual", FieldType::kINT, false, 0, 0.0f, nullptr},
        {"has_gate", FieldType::kINT, false, 0, 0.0f, nullptr},
        {"family", FieldType::kSTRING, false, 0, 0.0f, ""},
        {"name", FieldType::kSTRING, false, 0, 0.0f, ""},
    };
    //! Each enumerated field's values, in the order of its code (the kernels' enum).
    static constexpr int32_t kWEIGHT_OFFSET_VALUES[]{0, 1};
    static constexpr int32_t kHAS_RESIDUAL_VALUES[]{0, 1};
    static constexpr int32_t kHAS_GATE_VALUES[]{0, 1};
    static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    //! The inputs after x, positional; an optional one is present when its gate field is 1
    //! (gateValue nullptr) or has the value gateValue (an enumerated gate).
    static constexpr Input kINPUTS[]{
        {"weight", TensorType::kLIKE_X, nullptr, nullptr, "[k]"},
        {"residual", TensorType::kLIKE_X, "has_residual", nullptr, "[..., k]"},
        {"gate", TensorType::kLIKE_X, "has_gate", nullptr, "[..., k]"},
    };
    //! The outputs, positional; an optional one is present when its gate field is 1.
    static constexpr Output kOUTPUTS[]{
        {"y", TensorType::kLIKE_X, nullptr, "[..., k]"},
        {"residual_out", TensorType::kLIKE_X, "has_residual", "[..., k]"},
    };
};

//! FloatProj: bf16 weights (float). x: [M, K], float32, float16 or bfloat16; y: [M, N], the dtype of x
struct FloatProj
{
    static constexpr char const* kOP_TYPE{"FloatProj"};
    static constexpr int32_t kVERSION_NUMBER{1};
    //! The TensorRT plugin version: the op version as a string.
    static constexpr char const* kVERSION{"1"};
    static constexpr char const* kKIND{"float"};
    //! The name of the first input (x, the router's logits, attention's q), for messages.
    static constexpr char const* kX_NAME{"x"};
    static constexpr bool kHAS_PLUGIN{true};
    //! The dense op each expert computes (grouped-expert ops), else nullptr.
    static constexpr char const* kGROUPED_OF{nullptr};
    //! The older versions a graph may name, each refused with what changed since (kNB_RETIRED
    //! of them, oldest first, then a null entry).
    static constexpr Retired kRETIRED[]{{nullptr, nullptr}};
    static constexpr int32_t kNB_RETIRED{0};
    //! The older version whose nodes this version reads as they are (only new attribute values
    //! since), registered as a second creator (nullptr: none).
    static constexpr char const* kCOMPATIBLE_VERSION{nullptr};
    static constexpr char const* kACTIVATION_FORMATS[]{};
    static constexpr char const* kDEFAULT_ACTIVATION{""};
    //! The fields (ONNX attributes) in contract order: the plugins' field list.
    static constexpr Field kFIELDS[]{
        {"n", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"k", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"has_bias", FieldType::kINT, false, 0, 0.0f, nullptr},
        {"family", FieldType::kSTRING, false, 0, 0.0f, ""},
        {"name", FieldType::kSTRING, false, 0, 0.0f, ""},
    };
    //! Each enumerated field's values, in the order of its code (the kernels' enum).
    static constexpr int32_t kHAS_BIAS_VALUES[]{0, 1};
    static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    //! The inputs after x, positional; an optional one is present when its gate field is 1
    //! (gateValue nullptr) or has the value gateValue (an enumerated gate).
    static constexpr Input kINPUTS[]{
        {"weight", TensorType::kBFLOAT16, nullptr, nullptr, "[n, k]"},
        {"bias", TensorType::kFLOAT32, "has_bias", nullptr, "[n]"},
    };
    //! The outputs, positional; an optional one is present when its gate field is 1.
    static constexpr Output kOUTPUTS[]{
        {"y", TensorType::kLIKE_X, nullptr, "[m, n]"},
    };
};

//! Router:  weights (router). logits: [M, E]; topk_ids: [M, top_k] int32; topk_weights: [M, top_k], the dtype of logits
struct Router
{
    static constexpr char const* kOP_TYPE{"Router"};
    static constexpr int32_t kVERSION_NUMBER{1};
    //! The TensorRT plugin version: the op version as a string.
    static constexpr char const* kVERSION{"1"};
    static constexpr char const* kKIND{"router"};
    //! The name of the first input (x, the router's logits, attention's q), for messages.
    static constexpr char const* kX_NAME{"logits"};
    static constexpr bool kHAS_PLUGIN{true};
    //! The dense op each expert computes (grouped-expert ops), else nullptr.
    static constexpr char const* kGROUPED_OF{nullptr};
    //! The older versions a graph may name, each refused with what changed since (kNB_RETIRED
    //! of them, oldest first, then a null entry).
    static constexpr Retired kRETIRED[]{{nullptr, nullptr}};
    static constexpr int32_t kNB_RETIRED{0};
    //! The older version whose nodes this version reads as they are (only new attribute values
    //! since), registered as a second creator (nullptr: none).
    static constexpr char const* kCOMPATIBLE_VERSION{nullptr};
    static constexpr char const* kACTIVATION_FORMATS[]{};
    static constexpr char const* kDEFAULT_ACTIVATION{""};
    //! The fields (ONNX attributes) in contract order: the plugins' field list.
    static constexpr Field kFIELDS[]{
        {"num_experts", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"top_k", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"normalize", FieldType::kINT, false, 0, 0.0f, nullptr},
        {"family", FieldType::kSTRING, false, 0, 0.0f, ""},
        {"name", FieldType::kSTRING, false, 0, 0.0f, ""},
    };
    //! Each enumerated field's values, in the order of its code (the kernels' enum).
    static constexpr int32_t kNORMALIZE_VALUES[]{0, 1};
    static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    //! The inputs after x, positional; an optional one is present when its gate field is 1
    //! (gateValue nullptr) or has the value gateValue (an enumerated gate).
    static constexpr Input kINPUTS[]{
    };
    //! The outputs, positional; an optional one is present when its gate field is 1.
    static constexpr Output kOUTPUTS[]{
        {"topk_ids", TensorType::kINT32, nullptr, "[m, top_k]"},
        {"topk_weights", TensorType::kLIKE_X, nullptr, "[m, top_k]"},
    };
};

//! Attention:  weights (attention). q: [B, Hq, S, D]; key, value: [B, Hkv, T, D]; y: [B, S, Hq, D], the dtype of q; causal, query i at position T - S + i
struct Attention
{
    static constexpr char const* kOP_TYPE{"Attention"};
    static constexpr int32_t kVERSION_NUMBER{1};
    //! The TensorRT plugin version: the op version as a string.
    static constexpr char const* kVERSION{"1"};
    static constexpr char const* kKIND{"attention"};
    //! The name of the first input (x, the router's logits, attention's q), for messages.
    static constexpr char const* kX_NAME{"q"};
    static constexpr bool kHAS_PLUGIN{true};
    //! The dense op each expert computes (grouped-expert ops), else nullptr.
    static constexpr char const* kGROUPED_OF{nullptr};
    //! The older versions a graph may name, each refused with what changed since (kNB_RETIRED
    //! of them, oldest first, then a null entry).
    static constexpr Retired kRETIRED[]{{nullptr, nullptr}};
    static constexpr int32_t kNB_RETIRED{0};
    //! The older version whose nodes this version reads as they are (only new attribute values
    //! since), registered as a second creator (nullptr: none).
    static constexpr char const* kCOMPATIBLE_VERSION{nullptr};
    static constexpr char const* kACTIVATION_FORMATS[]{};
    static constexpr char const* kDEFAULT_ACTIVATION{""};
    //! The fields (ONNX attributes) in contract order: the plugins' field list.
    static constexpr Field kFIELDS[]{
        {"q_heads", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"kv_heads", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"head_dim", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"scale", FieldType::kFLOAT, true, 0, 0.0f, nullptr},
        {"family", FieldType::kSTRING, false, 0, 0.0f, ""},
        {"name", FieldType::kSTRING, false, 0, 0.0f, ""},
    };
    //! Each enumerated field's values, in the order of its code (the kernels' enum).
    static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    //! The inputs after x, positional; an optional one is present when its gate field is 1
    //! (gateValue nullptr) or has the value gateValue (an enumerated gate).
    static constexpr Input kINPUTS[]{
        {"key", TensorType::kLIKE_X, nullptr, nullptr, "[x.0, kv_heads, total, head_dim]"},
        {"value", TensorType::kLIKE_X, nullptr, nullptr, "[x.0, kv_heads, total, head_dim]"},
    };
    //! The outputs, positional; an optional one is present when its gate field is 1.
    static constexpr Output kOUTPUTS[]{
        {"y", TensorType::kLIKE_X, nullptr, "[x.0, x.2, q_heads, head_dim]"},
    };
};

//! CausalConv1d:  weights (causal_conv1d). x: [B, S, C]; conv_state: [B, C, K - 1]; y: [B, S, C], x's dtype; y[t] = silu(sum_j w[j] * u[t + j]) over u = cat(conv_state, x) along the tokens
struct CausalConv1d
{
    static constexpr char const* kOP_TYPE{"CausalConv1d"};
    static constexpr int32_t kVERSION_NUMBER{1};
    //! The TensorRT plugin version: the op version as a string.
    static constexpr char const* kVERSION{"1"};
    static constexpr char const* kKIND{"causal_conv1d"};
    //! The name of the first input (x, the router's logits, attention's q), for messages.
    static constexpr char const* kX_NAME{"x"};
    static constexpr bool kHAS_PLUGIN{true};
    //! The dense op each expert computes (grouped-expert ops), else nullptr.
    static constexpr char const* kGROUPED_OF{nullptr};
    //! The older versions a graph may name, each refused with what changed since (kNB_RETIRED
    //! of them, oldest first, then a null entry).
    static constexpr Retired kRETIRED[]{{nullptr, nullptr}};
    static constexpr int32_t kNB_RETIRED{0};
    //! The older version whose nodes this version reads as they are (only new attribute values
    //! since), registered as a second creator (nullptr: none).
    static constexpr char const* kCOMPATIBLE_VERSION{nullptr};
    static constexpr char const* kACTIVATION_FORMATS[]{};
    static constexpr char const* kDEFAULT_ACTIVATION{""};
    //! The fields (ONNX attributes) in contract order: the plugins' field list.
    static constexpr Field kFIELDS[]{
        {"channels", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"kernel_size", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"family", FieldType::kSTRING, false, 0, 0.0f, ""},
        {"name", FieldType::kSTRING, false, 0, 0.0f, ""},
    };
    //! Each enumerated field's values, in the order of its code (the kernels' enum).
    static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    //! The inputs after x, positional; an optional one is present when its gate field is 1
    //! (gateValue nullptr) or has the value gateValue (an enumerated gate).
    static constexpr Input kINPUTS[]{
        {"weight", TensorType::kLIKE_X, nullptr, nullptr, "[channels, 1, kernel_size]"},
        {"conv_state", TensorType::kLIKE_X, nullptr, nullptr, "[x.0, channels, kernel_size-1]"},
    };
    //! The outputs, positional; an optional one is present when its gate field is 1.
    static constexpr Output kOUTPUTS[]{
        {"y", TensorType::kLIKE_X, nullptr, "[x.0, x.1, channels]"},
        {"conv_state_out", TensorType::kLIKE_X, nullptr, "[x.0, channels, kernel_size-1]"},
    };
};

//! GatedDeltaRule:  weights (gated_delta_rule). x: [B, S, 2 Hk dk + Hv dv] = [q | k | v] (the conv's output); ba: [B, S, 2 Hv]; state: [B, Hv, dk, dv] float32; y: [B, S, Hv, dv], x's dtype; state_out like state
struct GatedDeltaRule
{
    static constexpr char const* kOP_TYPE{"GatedDeltaRule"};
    static constexpr int32_t kVERSION_NUMBER{1};
    //! The TensorRT plugin version: the op version as a string.
    static constexpr char const* kVERSION{"1"};
    static constexpr char const* kKIND{"gated_delta_rule"};
    //! The name of the first input (x, the router's logits, attention's q), for messages.
    static constexpr char const* kX_NAME{"x"};
    static constexpr bool kHAS_PLUGIN{true};
    //! The dense op each expert computes (grouped-expert ops), else nullptr.
    static constexpr char const* kGROUPED_OF{nullptr};
    //! The older versions a graph may name, each refused with what changed since (kNB_RETIRED
    //! of them, oldest first, then a null entry).
    static constexpr Retired kRETIRED[]{{nullptr, nullptr}};
    static constexpr int32_t kNB_RETIRED{0};
    //! The older version whose nodes this version reads as they are (only new attribute values
    //! since), registered as a second creator (nullptr: none).
    static constexpr char const* kCOMPATIBLE_VERSION{nullptr};
    static constexpr char const* kACTIVATION_FORMATS[]{};
    static constexpr char const* kDEFAULT_ACTIVATION{""};
    //! The fields (ONNX attributes) in contract order: the plugins' field list.
    static constexpr Field kFIELDS[]{
        {"num_k_heads", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"num_v_heads", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"head_k_dim", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"head_v_dim", FieldType::kINT, true, 0, 0.0f, nullptr},
        {"family", FieldType::kSTRING, false, 0, 0.0f, ""},
        {"name", FieldType::kSTRING, false, 0, 0.0f, ""},
    };
    //! Each enumerated field's values, in the order of its code (the kernels' enum).
    static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    //! The inputs after x, positional; an optional one is present when its gate field is 1
    //! (gateValue nullptr) or has the value gateValue (an enumerated gate).
    static constexpr Input kINPUTS[]{
        {"ba", TensorType::kLIKE_X, nullptr, nullptr, "[x.0, x.1, 2*num_v_heads]"},
        {"A_log", TensorType::kLIKE_X, nullptr, nullptr, "[num_v_heads]"},
        {"dt_bias", TensorType::kLIKE_X, nullptr, nullptr, "[num_v_heads]"},
        {"state", TensorType::kFLOAT32, nullptr, nullptr, "[x.0, num_v_heads, head_k_dim, head_v_dim]"},
    };
    //! The outputs, positional; an optional one is present when its gate field is 1.
    static constexpr Output kOUTPUTS[]{
        {"y", TensorType::kLIKE_X, nullptr, "[x.0, x.1, num_v_heads, head_v_dim]"},
        {"state_out", TensorType::kFLOAT32, nullptr, "[x.0, num_v_heads, head_k_dim, head_v_dim]"},
    };
};

//! Which op is which: type, plugin version, whether a plugin exists, the retired versions
//! (nbRetired of them), the compatible version (nullptr: none) and the fields in contract order.
struct OpInfo
{
    char const* type;
    char const* version;
    bool hasPlugin;
    Retired const* retired;
    int32_t nbRetired;
    char const* compatibleVersion;
    Field const* fields;
    int32_t nbFields;
};

//! Every op of the contract.
constexpr OpInfo kOPS[]{
    {W4A16Proj::kOP_TYPE, W4A16Proj::kVERSION, W4A16Proj::kHAS_PLUGIN, W4A16Proj::kRETIRED, W4A16Proj::kNB_RETIRED, W4A16Proj::kCOMPATIBLE_VERSION, W4A16Proj::kFIELDS, count(W4A16Proj::kFIELDS)},
    {W8A8Proj::kOP_TYPE, W8A8Proj::kVERSION, W8A8Proj::kHAS_PLUGIN, W8A8Proj::kRETIRED, W8A8Proj::kNB_RETIRED, W8A8Proj::kCOMPATIBLE_VERSION, W8A8Proj::kFIELDS, count(W8A8Proj::kFIELDS)},
    {W4A4Proj::kOP_TYPE, W4A4Proj::kVERSION, W4A4Proj::kHAS_PLUGIN, W4A4Proj::kRETIRED, W4A4Proj::kNB_RETIRED, W4A4Proj::kCOMPATIBLE_VERSION, W4A4Proj::kFIELDS, count(W4A4Proj::kFIELDS)},
    {W4A16MoEProj::kOP_TYPE, W4A16MoEProj::kVERSION, W4A16MoEProj::kHAS_PLUGIN, W4A16MoEProj::kRETIRED, W4A16MoEProj::kNB_RETIRED, W4A16MoEProj::kCOMPATIBLE_VERSION, W4A16MoEProj::kFIELDS, count(W4A16MoEProj::kFIELDS)},
    {W8A8MoEProj::kOP_TYPE, W8A8MoEProj::kVERSION, W8A8MoEProj::kHAS_PLUGIN, W8A8MoEProj::kRETIRED, W8A8MoEProj::kNB_RETIRED, W8A8MoEProj::kCOMPATIBLE_VERSION, W8A8MoEProj::kFIELDS, count(W8A8MoEProj::kFIELDS)},
    {W4A4MoEProj::kOP_TYPE, W4A4MoEProj::kVERSION, W4A4MoEProj::kHAS_PLUGIN, W4A4MoEProj::kRETIRED, W4A4MoEProj::kNB_RETIRED, W4A4MoEProj::kCOMPATIBLE_VERSION, W4A4MoEProj::kFIELDS, count(W4A4MoEProj::kFIELDS)},
    {RMSNorm::kOP_TYPE, RMSNorm::kVERSION, RMSNorm::kHAS_PLUGIN, RMSNorm::kRETIRED, RMSNorm::kNB_RETIRED, RMSNorm::kCOMPATIBLE_VERSION, RMSNorm::kFIELDS, count(RMSNorm::kFIELDS)},
    {FloatProj::kOP_TYPE, FloatProj::kVERSION, FloatProj::kHAS_PLUGIN, FloatProj::kRETIRED, FloatProj::kNB_RETIRED, FloatProj::kCOMPATIBLE_VERSION, FloatProj::kFIELDS, count(FloatProj::kFIELDS)},
    {Router::kOP_TYPE, Router::kVERSION, Router::kHAS_PLUGIN, Router::kRETIRED, Router::kNB_RETIRED, Router::kCOMPATIBLE_VERSION, Router::kFIELDS, count(Router::kFIELDS)},
    {Attention::kOP_TYPE, Attention::kVERSION, Attention::kHAS_PLUGIN, Attention::kRETIRED, Attention::kNB_RETIRED, Attention::kCOMPATIBLE_VERSION, Attention::kFIELDS, count(Attention::kFIELDS)},
    {CausalConv1d::kOP_TYPE, CausalConv1d::kVERSION, CausalConv1d::kHAS_PLUGIN, CausalConv1d::kRETIRED, CausalConv1d::kNB_RETIRED, CausalConv1d::kCOMPATIBLE_VERSION, CausalConv1d::kFIELDS, count(CausalConv1d::kFIELDS)},
    {GatedDeltaRule::kOP_TYPE, GatedDeltaRule::kVERSION, GatedDeltaRule::kHAS_PLUGIN, GatedDeltaRule::kRETIRED, GatedDeltaRule::kNB_RETIRED, GatedDeltaRule::kCOMPATIBLE_VERSION, GatedDeltaRule::kFIELDS, count(GatedDeltaRule::kFIELDS)},
};

} // namespace contract
} // namespace metrale
#endif /* __cplusplus */

#endif /* METRALE_CONTRACT_H */
