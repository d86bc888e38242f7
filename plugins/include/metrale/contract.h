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

//! An op's scalar facts, the first line of its struct below: kOP_TYPE, its ONNX op type;
//! kVERSION_NUMBER and kVERSION, the op version and as the TensorRT plugin version string; kKIND;
//! kX_NAME, the name of the first input (x, the router's logits, attention's q), for messages;
//! kHAS_PLUGIN; kGROUPED_OF, the dense op each expert computes (grouped-expert ops), else nullptr;
//! kNB_RETIRED, the entries of kRETIRED before its null one; kCOMPATIBLE_VERSION, the older version
//! whose nodes this version reads as they are (only new attribute values since), registered as a
//! second creator (nullptr: none); kDEFAULT_ACTIVATION. On the same line kRETIRED, the older
//! versions a graph may name, each refused with what changed since (oldest first, then a null
//! entry), and kACTIVATION_FORMATS. Then a line a table: kFIELDS, the fields (ONNX attributes) in
//! contract order, the plugins' field list; each enumerated field's values in the order of its code
//! (the kernels' enum), k<FIELD>_VALUES; kINPUTS, the inputs after x, positional (an optional one is
//! present when its gate field is 1, or has the value gateValue); kOUTPUTS, the outputs, positional
//! (an optional one is present when its gate field is 1).
#define METRALE_CONTRACT_OP(opType, versionNumber, version, kind, xName, hasPlugin, groupedOf, nbRetired, \
    compatibleVersion, defaultActivation)                                                               \
    static constexpr char const* kOP_TYPE{opType};                                                      \
    static constexpr int32_t kVERSION_NUMBER{versionNumber};                                            \
    static constexpr char const* kVERSION{version};                                                     \
    static constexpr char const* kKIND{kind};                                                           \
    static constexpr char const* kX_NAME{xName};                                                        \
    static constexpr bool kHAS_PLUGIN{hasPlugin};                                                       \
    static constexpr char const* kGROUPED_OF{groupedOf};                                                \
    static constexpr int32_t kNB_RETIRED{nbRetired};                                                    \
    static constexpr char const* kCOMPATIBLE_VERSION{compatibleVersion};                                \
    static constexpr char const* kDEFAULT_ACTIVATION{defaultActivation}

//! The number of entries of a contract array.
template <typename T, int32_t N>
constexpr int32_t count(T const (&)[N])
{
    return N;
}

//! W4A16Proj: int4 weights (w4a16). x: [M, K], float32, float16 or bfloat16; y: [M, N], the dtype of x
struct W4A16Proj
{
    METRALE_CONTRACT_OP("W4A16Proj", 2, "2", "w4a16", "x", true, nullptr, 1, nullptr, "bf16"); static constexpr Retired kRETIRED[]{{"1", "float32 group scales; version 2 stores them as bfloat16"}, {nullptr, nullptr}}; static constexpr char const* kACTIVATION_FORMATS[]{"bf16"};
    static constexpr Field kFIELDS[]{{"n", FieldType::kINT, true, 0, 0.0f, nullptr}, {"k", FieldType::kINT, true, 0, 0.0f, nullptr}, {"group_size", FieldType::kINT, true, 0, 0.0f, nullptr}, {"has_zero_point", FieldType::kINT, false, 0, 0.0f, nullptr}, {"activation_format", FieldType::kSTRING, false, 0, 0.0f, "bf16"}, {"has_bias", FieldType::kINT, false, 0, 0.0f, nullptr}, {"family", FieldType::kSTRING, false, 0, 0.0f, ""}, {"name", FieldType::kSTRING, false, 0, 0.0f, ""}};
    static constexpr int32_t kGROUP_SIZE_VALUES[]{32, 64, 128}; static constexpr int32_t kHAS_ZERO_POINT_VALUES[]{0, 1}; static constexpr char const* kACTIVATION_FORMAT_VALUES[]{"bf16"}; static constexpr int32_t kHAS_BIAS_VALUES[]{0, 1}; static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    static constexpr Input kINPUTS[]{{"weight", TensorType::kINT8, nullptr, nullptr, "[n, k/2]"}, {"weight_scale", TensorType::kBFLOAT16, nullptr, nullptr, "[n, ceil(k/group_size)]"}, {"zero_point", TensorType::kINT8, "has_zero_point", nullptr, "[n, ceil(k/group_size)]"}, {"bias", TensorType::kFLOAT32, "has_bias", nullptr, "[n]"}};
    static constexpr Output kOUTPUTS[]{{"y", TensorType::kLIKE_X, nullptr, "[m, n]"}};
};

//! W8A8Proj: FP8 weights (w8a8). x: [M, K], float32, float16 or bfloat16; y: [M, N], the dtype of x; fp8 activations: FP8 e4m3 products summed in the FP8 tensor core's accumulator within each 128-k block, promoted to float32 every 128 k, per-row x per-channel scales in the epilogue (block scales: each block scaled at its promotion)
struct W8A8Proj
{
    METRALE_CONTRACT_OP("W8A8Proj", 3, "3", "w8a8", "x", true, nullptr, 2, nullptr, "fp8"); static constexpr Retired kRETIRED[]{{"1", "exact f16 products summed in float32; version 3 multiplies on the FP8 tensor core"}, {"2", "exact f16 products summed in float32; version 3 multiplies on the FP8 tensor core"}, {nullptr, nullptr}}; static constexpr char const* kACTIVATION_FORMATS[]{"bf16", "fp8"};
    static constexpr Field kFIELDS[]{{"n", FieldType::kINT, true, 0, 0.0f, nullptr}, {"k", FieldType::kINT, true, 0, 0.0f, nullptr}, {"weight_scale_granularity", FieldType::kSTRING, false, 0, 0.0f, "channel"}, {"activation_format", FieldType::kSTRING, false, 0, 0.0f, "fp8"}, {"activation_scale_granularity", FieldType::kSTRING, false, 0, 0.0f, "row"}, {"has_bias", FieldType::kINT, false, 0, 0.0f, nullptr}, {"family", FieldType::kSTRING, false, 0, 0.0f, ""}, {"name", FieldType::kSTRING, false, 0, 0.0f, ""}};
    static constexpr char const* kWEIGHT_SCALE_GRANULARITY_VALUES[]{"channel", "block128"}; static constexpr char const* kACTIVATION_FORMAT_VALUES[]{"bf16", "fp8"}; static constexpr char const* kACTIVATION_SCALE_GRANULARITY_VALUES[]{"row", "row_block128", "tensor"}; static constexpr int32_t kHAS_BIAS_VALUES[]{0, 1}; static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    static constexpr Input kINPUTS[]{{"weight", TensorType::kINT8, nullptr, nullptr, "[n, k]"}, {"weight_scale", TensorType::kFLOAT32, nullptr, nullptr, "[n]"}, {"input_scale", TensorType::kFLOAT32, "activation_scale_granularity", "tensor", "[1]"}, {"bias", TensorType::kFLOAT32, "has_bias", nullptr, "[n]"}};
    static constexpr Output kOUTPUTS[]{{"y", TensorType::kLIKE_X, nullptr, "[m, n]"}};
};

//! W4A4Proj: NVFP4 weights (w4a4). x: [M, K], float32, float16 or bfloat16; y: [M, N], the dtype of x
struct W4A4Proj
{
    METRALE_CONTRACT_OP("W4A4Proj", 1, "1", "w4a4", "x", true, nullptr, 0, nullptr, "nvfp4"); static constexpr Retired kRETIRED[]{{nullptr, nullptr}}; static constexpr char const* kACTIVATION_FORMATS[]{"bf16", "nvfp4"};
    static constexpr Field kFIELDS[]{{"n", FieldType::kINT, true, 0, 0.0f, nullptr}, {"k", FieldType::kINT, true, 0, 0.0f, nullptr}, {"activation_format", FieldType::kSTRING, false, 0, 0.0f, "nvfp4"}, {"has_input_scale", FieldType::kINT, false, 0, 0.0f, nullptr}, {"has_bias", FieldType::kINT, false, 0, 0.0f, nullptr}, {"family", FieldType::kSTRING, false, 0, 0.0f, ""}, {"name", FieldType::kSTRING, false, 0, 0.0f, ""}};
    static constexpr char const* kACTIVATION_FORMAT_VALUES[]{"bf16", "nvfp4"}; static constexpr int32_t kHAS_INPUT_SCALE_VALUES[]{0, 1}; static constexpr int32_t kHAS_BIAS_VALUES[]{0, 1}; static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    static constexpr Input kINPUTS[]{{"weight", TensorType::kINT8, nullptr, nullptr, "[n, k/2]"}, {"weight_scale", TensorType::kINT8, nullptr, nullptr, "[n, k/16]"}, {"weight_global_scale", TensorType::kFLOAT32, nullptr, nullptr, "[1]"}, {"input_scale", TensorType::kFLOAT32, "has_input_scale", nullptr, "[1]"}, {"bias", TensorType::kFLOAT32, "has_bias", nullptr, "[n]"}};
    static constexpr Output kOUTPUTS[]{{"y", TensorType::kLIKE_X, nullptr, "[m, n]"}};
};

//! W4A16MoEProj: int4 weights (w4a16). x: [M, K] (combine=0) or [M, top_k, K] (combine=1); y: [M, top_k, N] or [M, N]
struct W4A16MoEProj
{
    METRALE_CONTRACT_OP("W4A16MoEProj", 2, "2", "w4a16", "x", true, "W4A16Proj", 1, nullptr, "bf16"); static constexpr Retired kRETIRED[]{{"1", "float32 group scales; version 2 stores them as bfloat16"}, {nullptr, nullptr}}; static constexpr char const* kACTIVATION_FORMATS[]{"bf16"};
    static constexpr Field kFIELDS[]{{"n", FieldType::kINT, true, 0, 0.0f, nullptr}, {"k", FieldType::kINT, true, 0, 0.0f, nullptr}, {"num_experts", FieldType::kINT, true, 0, 0.0f, nullptr}, {"top_k", FieldType::kINT, true, 0, 0.0f, nullptr}, {"combine", FieldType::kINT, true, 0, 0.0f, nullptr}, {"group_size", FieldType::kINT, true, 0, 0.0f, nullptr}, {"has_zero_point", FieldType::kINT, false, 0, 0.0f, nullptr}, {"activation_format", FieldType::kSTRING, false, 0, 0.0f, "bf16"}, {"has_bias", FieldType::kINT, false, 0, 0.0f, nullptr}, {"family", FieldType::kSTRING, false, 0, 0.0f, ""}, {"name", FieldType::kSTRING, false, 0, 0.0f, ""}};
    static constexpr int32_t kCOMBINE_VALUES[]{0, 1}; static constexpr int32_t kGROUP_SIZE_VALUES[]{32, 64, 128}; static constexpr int32_t kHAS_ZERO_POINT_VALUES[]{0, 1}; static constexpr char const* kACTIVATION_FORMAT_VALUES[]{"bf16"}; static constexpr int32_t kHAS_BIAS_VALUES[]{0, 1}; static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    static constexpr Input kINPUTS[]{{"topk_ids", TensorType::kINT32, nullptr, nullptr, "[m, top_k]"}, {"weight", TensorType::kINT8, nullptr, nullptr, "[num_experts, n, k/2]"}, {"weight_scale", TensorType::kBFLOAT16, nullptr, nullptr, "[num_experts, n, ceil(k/group_size)]"}, {"zero_point", TensorType::kINT8, "has_zero_point", nullptr, "[num_experts, n, ceil(k/group_size)]"}, {"bias", TensorType::kFLOAT32, "has_bias", nullptr, "[num_experts, n]"}, {"topk_weights", TensorType::kLIKE_X, "combine", nullptr, "[m, top_k]"}};
    static constexpr Output kOUTPUTS[]{{"y", TensorType::kLIKE_X, nullptr, "[m, n]"}};
};

//! W8A8MoEProj: FP8 weights (w8a8). x: [M, K] (combine=0) or [M, top_k, K] (combine=1); y: [M, top_k, N] or [M, N]
struct W8A8MoEProj
{
    METRALE_CONTRACT_OP("W8A8MoEProj", 2, "2", "w8a8", "x", true, "W8A8Proj", 0, "1", "fp8"); static constexpr Retired kRETIRED[]{{nullptr, nullptr}}; static constexpr char const* kACTIVATION_FORMATS[]{"bf16", "fp8"};
    static constexpr Field kFIELDS[]{{"n", FieldType::kINT, true, 0, 0.0f, nullptr}, {"k", FieldType::kINT, true, 0, 0.0f, nullptr}, {"num_experts", FieldType::kINT, true, 0, 0.0f, nullptr}, {"top_k", FieldType::kINT, true, 0, 0.0f, nullptr}, {"combine", FieldType::kINT, true, 0, 0.0f, nullptr}, {"weight_scale_granularity", FieldType::kSTRING, false, 0, 0.0f, "channel"}, {"activation_format", FieldType::kSTRING, false, 0, 0.0f, "fp8"}, {"activation_scale_granularity", FieldType::kSTRING, false, 0, 0.0f, "row"}, {"has_bias", FieldType::kINT, false, 0, 0.0f, nullptr}, {"family", FieldType::kSTRING, false, 0, 0.0f, ""}, {"name", FieldType::kSTRING, false, 0, 0.0f, ""}};
    static constexpr int32_t kCOMBINE_VALUES[]{0, 1}; static constexpr char const* kWEIGHT_SCALE_GRANULARITY_VALUES[]{"channel", "block128"}; static constexpr char const* kACTIVATION_FORMAT_VALUES[]{"bf16", "fp8"}; static constexpr char const* kACTIVATION_SCALE_GRANULARITY_VALUES[]{"row", "row_block128", "tensor"}; static constexpr int32_t kHAS_BIAS_VALUES[]{0, 1}; static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    static constexpr Input kINPUTS[]{{"topk_ids", TensorType::kINT32, nullptr, nullptr, "[m, top_k]"}, {"weight", TensorType::kINT8, nullptr, nullptr, "[num_experts, n, k]"}, {"weight_scale", TensorType::kFLOAT32, nullptr, nullptr, "[num_experts, n]"}, {"input_scale", TensorType::kFLOAT32, "activation_scale_granularity", "tensor", "[num_experts]"}, {"bias", TensorType::kFLOAT32, "has_bias", nullptr, "[num_experts, n]"}, {"topk_weights", TensorType::kLIKE_X, "combine", nullptr, "[m, top_k]"}};
    static constexpr Output kOUTPUTS[]{{"y", TensorType::kLIKE_X, nullptr, "[m, n]"}};
};

//! W4A4MoEProj: NVFP4 weights (w4a4). x: [M, K] (combine=0) or [M, top_k, K] (combine=1); y: [M, top_k, N] or [M, N]
struct W4A4MoEProj
{
    METRALE_CONTRACT_OP("W4A4MoEProj", 1, "1", "w4a4", "x", true, "W4A4Proj", 0, nullptr, "nvfp4"); static constexpr Retired kRETIRED[]{{nullptr, nullptr}}; static constexpr char const* kACTIVATION_FORMATS[]{"bf16", "nvfp4"};
    static constexpr Field kFIELDS[]{{"n", FieldType::kINT, true, 0, 0.0f, nullptr}, {"k", FieldType::kINT, true, 0, 0.0f, nullptr}, {"num_experts", FieldType::kINT, true, 0, 0.0f, nullptr}, {"top_k", FieldType::kINT, true, 0, 0.0f, nullptr}, {"combine", FieldType::kINT, true, 0, 0.0f, nullptr}, {"activation_format", FieldType::kSTRING, false, 0, 0.0f, "nvfp4"}, {"has_input_scale", FieldType::kINT, false, 0, 0.0f, nullptr}, {"has_bias", FieldType::kINT, false, 0, 0.0f, nullptr}, {"family", FieldType::kSTRING, false, 0, 0.0f, ""}, {"name", FieldType::kSTRING, false, 0, 0.0f, ""}};
    static constexpr int32_t kCOMBINE_VALUES[]{0, 1}; static constexpr char const* kACTIVATION_FORMAT_VALUES[]{"bf16", "nvfp4"}; static constexpr int32_t kHAS_INPUT_SCALE_VALUES[]{0, 1}; static constexpr int32_t kHAS_BIAS_VALUES[]{0, 1}; static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    static constexpr Input kINPUTS[]{{"topk_ids", TensorType::kINT32, nullptr, nullptr, "[m, top_k]"}, {"weight", TensorType::kINT8, nullptr, nullptr, "[num_experts, n, k/2]"}, {"weight_scale", TensorType::kINT8, nullptr, nullptr, "[num_experts, n, k/16]"}, {"weight_global_scale", TensorType::kFLOAT32, nullptr, nullptr, "[num_experts]"}, {"input_scale", TensorType::kFLOAT32, "has_input_scale", nullptr, "[num_experts]"}, {"bias", TensorType::kFLOAT32, "has_bias", nullptr, "[num_experts, n]"}, {"topk_weights", TensorType::kLIKE_X, "combine", nullptr, "[m, top_k]"}};
    static constexpr Output kOUTPUTS[]{{"y", TensorType::kLIKE_X, nullptr, "[m, n]"}};
};

//! RMSNorm:  weights (rms_norm). x: [..., K] (rows: the leading dimensions, e.g. [B, S, H] or the q/k norm's [B, S, heads, D]); y: x's shape and dtype
struct RMSNorm
{
    METRALE_CONTRACT_OP("RMSNorm", 1, "1", "rms_norm", "x", true, nullptr, 0, nullptr, ""); static constexpr Retired kRETIRED[]{{nullptr, nullptr}}; static constexpr char const* kACTIVATION_FORMATS[]{};
    static constexpr Field kFIELDS[]{{"k", FieldType::kINT, true, 0, 0.0f, nullptr}, {"epsilon", FieldType::kFLOAT, true, 0, 0.0f, nullptr}, {"weight_offset", FieldType::kINT, false, 0, 0.0f, nullptr}, {"has_residual", FieldType::kINT, false, 0, 0.0f, nullptr}, {"has_gate", FieldType::kINT, false, 0, 0.0f, nullptr}, {"family", FieldType::kSTRING, false, 0, 0.0f, ""}, {"name", FieldType::kSTRING, false, 0, 0.0f, ""}};
    static constexpr int32_t kWEIGHT_OFFSET_VALUES[]{0, 1}; static constexpr int32_t kHAS_RESIDUAL_VALUES[]{0, 1}; static constexpr int32_t kHAS_GATE_VALUES[]{0, 1}; static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    static constexpr Input kINPUTS[]{{"weight", TensorType::kLIKE_X, nullptr, nullptr, "[k]"}, {"residual", TensorType::kLIKE_X, "has_residual", nullptr, "[..., k]"}, {"gate", TensorType::kLIKE_X, "has_gate", nullptr, "[..., k]"}};
    static constexpr Output kOUTPUTS[]{{"y", TensorType::kLIKE_X, nullptr, "[..., k]"}, {"residual_out", TensorType::kLIKE_X, "has_residual", "[..., k]"}};
};

//! FloatProj: bf16 weights (float). x: [M, K], float32, float16 or bfloat16; y: [M, N], the dtype of x
struct FloatProj
{
    METRALE_CONTRACT_OP("FloatProj", 1, "1", "float", "x", true, nullptr, 0, nullptr, ""); static constexpr Retired kRETIRED[]{{nullptr, nullptr}}; static constexpr char const* kACTIVATION_FORMATS[]{};
    static constexpr Field kFIELDS[]{{"n", FieldType::kINT, true, 0, 0.0f, nullptr}, {"k", FieldType::kINT, true, 0, 0.0f, nullptr}, {"has_bias", FieldType::kINT, false, 0, 0.0f, nullptr}, {"family", FieldType::kSTRING, false, 0, 0.0f, ""}, {"name", FieldType::kSTRING, false, 0, 0.0f, ""}};
    static constexpr int32_t kHAS_BIAS_VALUES[]{0, 1}; static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    static constexpr Input kINPUTS[]{{"weight", TensorType::kBFLOAT16, nullptr, nullptr, "[n, k]"}, {"bias", TensorType::kFLOAT32, "has_bias", nullptr, "[n]"}};
    static constexpr Output kOUTPUTS[]{{"y", TensorType::kLIKE_X, nullptr, "[m, n]"}};
};

//! Router:  weights (router). logits: [M, E]; topk_ids: [M, top_k] int32; topk_weights: [M, top_k], the dtype of logits
struct Router
{
    METRALE_CONTRACT_OP("Router", 1, "1", "router", "logits", true, nullptr, 0, nullptr, ""); static constexpr Retired kRETIRED[]{{nullptr, nullptr}}; static constexpr char const* kACTIVATION_FORMATS[]{};
    static constexpr Field kFIELDS[]{{"num_experts", FieldType::kINT, true, 0, 0.0f, nullptr}, {"top_k", FieldType::kINT, true, 0, 0.0f, nullptr}, {"normalize", FieldType::kINT, false, 0, 0.0f, nullptr}, {"family", FieldType::kSTRING, false, 0, 0.0f, ""}, {"name", FieldType::kSTRING, false, 0, 0.0f, ""}};
    static constexpr int32_t kNORMALIZE_VALUES[]{0, 1}; static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    static constexpr Input kINPUTS[]{};
    static constexpr Output kOUTPUTS[]{{"topk_ids", TensorType::kINT32, nullptr, "[m, top_k]"}, {"topk_weights", TensorType::kLIKE_X, nullptr, "[m, top_k]"}};
};

//! Attention:  weights (attention). q: [B, Hq, S, D]; key, value: [B, Hkv, T, D]; y: [B, S, Hq, D], the dtype of q; causal, query i at position T - S + i
struct Attention
{
    METRALE_CONTRACT_OP("Attention", 1, "1", "attention", "q", true, nullptr, 0, nullptr, ""); static constexpr Retired kRETIRED[]{{nullptr, nullptr}}; static constexpr char const* kACTIVATION_FORMATS[]{};
    static constexpr Field kFIELDS[]{{"q_heads", FieldType::kINT, true, 0, 0.0f, nullptr}, {"kv_heads", FieldType::kINT, true, 0, 0.0f, nullptr}, {"head_dim", FieldType::kINT, true, 0, 0.0f, nullptr}, {"scale", FieldType::kFLOAT, true, 0, 0.0f, nullptr}, {"family", FieldType::kSTRING, false, 0, 0.0f, ""}, {"name", FieldType::kSTRING, false, 0, 0.0f, ""}};
    static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    static constexpr Input kINPUTS[]{{"key", TensorType::kLIKE_X, nullptr, nullptr, "[x.0, kv_heads, total, head_dim]"}, {"value", TensorType::kLIKE_X, nullptr, nullptr, "[x.0, kv_heads, total, head_dim]"}};
    static constexpr Output kOUTPUTS[]{{"y", TensorType::kLIKE_X, nullptr, "[x.0, x.2, q_heads, head_dim]"}};
};

//! CausalConv1d:  weights (causal_conv1d). x: [B, S, C]; conv_state: [B, C, K - 1]; y: [B, S, C], x's dtype; y[t] = silu(sum_j w[j] * u[t + j]) over u = cat(conv_state, x) along the tokens
struct CausalConv1d
{
    METRALE_CONTRACT_OP("CausalConv1d", 1, "1", "causal_conv1d", "x", true, nullptr, 0, nullptr, ""); static constexpr Retired kRETIRED[]{{nullptr, nullptr}}; static constexpr char const* kACTIVATION_FORMATS[]{};
    static constexpr Field kFIELDS[]{{"channels", FieldType::kINT, true, 0, 0.0f, nullptr}, {"kernel_size", FieldType::kINT, true, 0, 0.0f, nullptr}, {"family", FieldType::kSTRING, false, 0, 0.0f, ""}, {"name", FieldType::kSTRING, false, 0, 0.0f, ""}};
    static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    static constexpr Input kINPUTS[]{{"weight", TensorType::kLIKE_X, nullptr, nullptr, "[channels, 1, kernel_size]"}, {"conv_state", TensorType::kLIKE_X, nullptr, nullptr, "[x.0, channels, kernel_size-1]"}};
    static constexpr Output kOUTPUTS[]{{"y", TensorType::kLIKE_X, nullptr, "[x.0, x.1, channels]"}, {"conv_state_out", TensorType::kLIKE_X, nullptr, "[x.0, channels, kernel_size-1]"}};
};

//! GatedDeltaRule:  weights (gated_delta_rule). x: [B, S, 2 Hk dk + Hv dv] = [q | k | v] (the conv's output); ba: [B, S, 2 Hv]; state: [B, Hv, dk, dv] float32; y: [B, S, Hv, dv], x's dtype; state_out like state
struct GatedDeltaRule
{
    METRALE_CONTRACT_OP("GatedDeltaRule", 1, "1", "gated_delta_rule", "x", true, nullptr, 0, nullptr, ""); static constexpr Retired kRETIRED[]{{nullptr, nullptr}}; static constexpr char const* kACTIVATION_FORMATS[]{};
    static constexpr Field kFIELDS[]{{"num_k_heads", FieldType::kINT, true, 0, 0.0f, nullptr}, {"num_v_heads", FieldType::kINT, true, 0, 0.0f, nullptr}, {"head_k_dim", FieldType::kINT, true, 0, 0.0f, nullptr}, {"head_v_dim", FieldType::kINT, true, 0, 0.0f, nullptr}, {"family", FieldType::kSTRING, false, 0, 0.0f, ""}, {"name", FieldType::kSTRING, false, 0, 0.0f, ""}};
    static constexpr char const* kFAMILY_VALUES[]{"attn", "ffn", "gdn", "moe", "head"};
    static constexpr Input kINPUTS[]{{"ba", TensorType::kLIKE_X, nullptr, nullptr, "[x.0, x.1, 2*num_v_heads]"}, {"A_log", TensorType::kLIKE_X, nullptr, nullptr, "[num_v_heads]"}, {"dt_bias", TensorType::kLIKE_X, nullptr, nullptr, "[num_v_heads]"}, {"state", TensorType::kFLOAT32, nullptr, nullptr, "[x.0, num_v_heads, head_k_dim, head_v_dim]"}};
    static constexpr Output kOUTPUTS[]{{"y", TensorType::kLIKE_X, nullptr, "[x.0, x.1, num_v_heads, head_v_dim]"}, {"state_out", TensorType::kFLOAT32, nullptr, "[x.0, num_v_heads, head_k_dim, head_v_dim]"}};
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

//! An op's identity.
template <typename Op>
constexpr OpInfo opInfo()
{
    return {Op::kOP_TYPE, Op::kVERSION, Op::kHAS_PLUGIN, Op::kRETIRED, Op::kNB_RETIRED, Op::kCOMPATIBLE_VERSION, Op::kFIELDS, count(Op::kFIELDS)};
}

//! Every op of the contract.
constexpr OpInfo kOPS[]{opInfo<W4A16Proj>(), opInfo<W8A8Proj>(), opInfo<W4A4Proj>(), opInfo<W4A16MoEProj>(), opInfo<W8A8MoEProj>(), opInfo<W4A4MoEProj>(), opInfo<RMSNorm>(), opInfo<FloatProj>(), opInfo<Router>(), opInfo<Attention>(), opInfo<CausalConv1d>(), opInfo<GatedDeltaRule>()};

#undef METRALE_CONTRACT_OP

} // namespace contract
} // namespace metrale
#endif /* __cplusplus */

#endif /* METRALE_CONTRACT_H */
