/*
 * metrale_w8a8_proj: the C launcher of W8A8Proj (plugins/include/metrale/kernels.h).
 *
 * bf16 activations: the bf16 A operand (x or bf16(x)) and the W8A16 policy. fp8 activations: the
 * quantization pre-pass writes xq (as exact f16) and sx into the workspace, then the fp8 policy;
 * with the static scale (act_scale_granularity tensor) the pre-pass is one elementwise pass with
 * no amax, and the policy reads the one input_scale for every row.
 * W8A8Proj version 3 (docs/ops.md, fp8 activation format): fp8 activations with per-row (or the
 * static tensor) activation scales and per-channel weight scales run the FP8 wgmma kernel
 * (projWgmmaFp8.cuh) at every m. The exact f16 path (mma.sync, exact products) serves them only
 * where that kernel cannot run (a device without its sm_90a code) and under METRALE_W8A8_MMA=exact
 * (read at each call), kept for benchmarks/bench_w8a8_variants.py alone; either way a launch uses
 * one of the two at every m, so rows stay bitwise invariant. The FP8 kernel's default launch fuses
 * the quantization with its operand layout (wgFp8QuantKernel) and hoists the epilogue's scale reads
 * (wgFp8Epilogue); METRALE_W8A8_MMA=wg-base / wg-q keep the earlier launches, with the same bits. The block-scaled variants (block128
 * weights and/or row_block128 activations) run the same kernel with each 128-k block scaled at its
 * promotion (launchProjWgmmaFp8Blocks; their fused pre-pass wgFp8QuantBlock for row_block128), and
 * the exact path (per-block scales) under METRALE_W8A8_MMA=exact, without sm_90a code, or for
 * block128 weights past kFP8_SW_MAX blocks of K (a function of the shape).
 * K must be a multiple of 16 (16-byte weight rows); other K return cudaErrorNotSupported.
 */
#include "metrale/kernels.h"
#include "projLaunch.cuh"
#include "projStream.cuh"
#include "projWgmmaFp8.cuh"
#include "w8a8ProjKernel.cuh"

using namespace metrale;

namespace
{

int64_t actScaleColumns(int64_t k, int32_t actScaleGranularity)
{
    return actScaleGranularity == kMETRALE_ASCALE_ROW_BLOCK128 ? (k + kFP8_BLOCK - 1) / kFP8_BLOCK : 1;
}

size_t scaleBytes(int64_t m, int64_t k, int32_t actScaleGranularity)
{
    return alignUp(static_cast<size_t>(m) * static_cast<size_t>(actScaleColumns(k, actScaleGranularity)) * 4, kWS_ALIGN);
}

/* The operand region after xq and sx: the bf16 tier's wgmma operand, or the FP8 variant's followed
 * by the block-scaled variant's block-major token scales (the region holds the larger at every m). */
size_t fp8OperandRegion(int64_t m, int64_t k)
{
    const size_t a = wgExtraBytes(m, k);
    const size_t b = wgFp8OperandBytes(m, k) + wgFp8BlockScaleBytes(m, k);
    return a > b ? a : b;
}

/* Workspace of the fp8 path: xq (row-major f16), sx, the wgmma operand, then the split's slice sums. */
size_t fp8PartOffset(int64_t m, int64_t k, int32_t actScaleGranularity)
{
    return operandBytes(m, k) + scaleBytes(m, k, actScaleGranularity) + fp8OperandRegion(m, k);
}

/* How a call runs the FP8 wgmma kernel: the pre-pass fused with the operand layout or not, the
 * epilogue with its scales hoisted or not. Every variant gives the same bits (the same values in the
 * operand, the same instructions, k order, promotion and epilogue arithmetic in every tile). */
struct Fp8Variant
{
    bool wgmma;  // false: the exact f16 path
    bool fused;  // wgFp8QuantKernel instead of quantFp8Kernel + wgFp8OperandKernel
    bool hoist;  // wgFp8Epilogue instead of wgEpilogue
    bool fmaProbe = false;  // block128 x row_block128: the FFMA promotion probe (not the contract's bits)
    bool rows64 = true;     // CTAs of 64 weight rows at token tiles of 8 and 16 (wgFp8Consumers), the same bits
    bool pipe = false;      // two blocks' wgmma groups in flight at token tiles up to 32 (consumeWgmmaFp8's kPipe)
    bool persist = false;   // persistent CTAs (one an SM) walking the tiles at token tiles of 64 and 128 (kPersist)
    bool wave = false;      // the token tile at m > 64 from the SMs' waves (wgFp8TokenTile)
    bool pipeLarge = false; // kPipe at token tiles of 64 and 128 too, persistent or not (the default; wg-pipe32 without)
};

/* METRALE_W8A8_MMA (benchmarks and tests only; read at each call, so at each graph capture):
 * "exact" the exact f16 path; "wg-base" the split pre-pass and wgEpilogue (b94300f's kernel);
 * "wg-q" the fused pre-pass; "wg-qe" the fused pre-pass and the hoisted epilogue (each of the three with CTAs of
 * 128 weight rows at every m); "wg-plain" wg-qe with 64-row CTAs at m <= 16 (3c6e3ce's default); "wg-fma-probe" as
 * wg-plain, and block128 x row_block128 with the FFMA promotion probe (kSC_FMA_PROBE: other bits, a measurement only);
 * unset or anything else: the default, kFP8_DEFAULT: wg-plain with two blocks' wgmma groups in flight at m <= 32
 * (kPipe, the same bits; measured on the H200 against wg-plain, w8a8-variants-20261203-1730-e28ca9b.md: geomean
 * 0.66 / 0.66 / 0.69 / 0.79 of FP8 cuBLASLt at M = 1 / 8 / 16 / 32 against 0.68 / 0.68 / 0.70 / 0.82; block-scaled
 * 0.69 / 0.67 / 0.73 / 0.93 against 0.68 / 0.67 / 0.72 / 0.97), persistent CTAs at token tiles of 64 and 128 where
 * the tiles outnumber the SMs (kPersist: one CTA an SM walking the raster's tiles, its producer filling the next
 * tile's stages under the last blocks and the epilogue of the one before) and the token tile at m > 64 from the
 * SMs' rounds (wgFp8TokenTile's wave); the same bits. Measured on the H200 against wg-onetile (c0940e9's default;
 * w8a8-variants-20261203-2058-1723d97.md and -2059-: plugins/KERNELS.md): geomean of FP8 cuBLASLt at M = 64 /
 * 128 / 256 / 512 / 1024 / 2048 / 4096 1.00 / 1.23 / 1.48 / 1.55 / 1.56 / 1.52 / 1.50 against 1.01 / 1.26 / 1.64
 * / 1.68 / 1.70 / 1.63 / 1.52. "wg-onetile": a CTA a tile, the token tile 128 once it
 * fills the SMs; "wg-persist": persistent CTAs with that token tile. Since 5ad8fe6 the default also takes the paired
 * blocks (kPipe) at token tiles of 64 and 128, persistent or not (pipeLarge; not the 128 tile of block128 weights
 * x row activations, which spilled), the same bits; measured on the H200 against the paired blocks at token tiles
 * up to 32 alone ("wg-pipe32", 1723d97's default; w8a8-variants- and w8a8-block-variants-20261204-1444-5ad8fe6.md):
 * geomean of FP8 cuBLASLt at M = 64 / 128 / 256 / 512 / 1024 / 4096 1.00 / 1.21 / 1.43 / 1.45 / 1.50 / 1.46
 * against 1.00 / 1.22 / 1.48 / 1.53 / 1.58 / 1.52, block128 x row_block128 1.22 / 1.54 / 1.86 / 1.80 / 1.80 /
 * 1.78 against 1.27 / 1.68 / 2.14 / 2.16 / 2.28 / 2.08. No sm_90a code: the exact path whatever it says. Clusters
 * of 2 token tiles, 2 weight tiles or 2 x 2 sharing operand tiles by TMA multicast were built and
 * measured slower at every shape where they ran, M >= 64 (4a278e6, benchmarks/results/
 * w8a8-variants-20261202-1533-4a278e6.md) and removed. */
constexpr Fp8Variant kFP8_DEFAULT = {true, true, true, false, true, true, true, true, true};

Fp8Variant fp8VariantSelected()
{
    if (!wgFp8Available<W8A8Fp8Policy<false>>())
    {
        return {false, false, false};
    }
    const char* v = std::getenv("METRALE_W8A8_MMA");
    if (v == nullptr)
    {
        return kFP8_DEFAULT;
    }
    if (std::strcmp(v, "exact") == 0)
    {
        return {false, false, false};
    }
    if (std::strcmp(v, "wg-base") == 0)
    {
        return {true, false, false, false, false};
    }
    if (std::strcmp(v, "wg-q") == 0)
    {
        return {true, true, false, false, false};
    }
    if (std::strcmp(v, "wg-qe") == 0)
    {
        return {true, true, true, false, false};
    }
    if (std::strcmp(v, "wg-plain") == 0)
    {
        return {true, true, true, false, true, false};
    }
    if (std::strcmp(v, "wg-fma-probe") == 0)
    {
        return {true, true, true, true, true};  // a measurement of the promotion's cost, never a default
    }
    if (std::strcmp(v, "wg-onetile") == 0)
    {
        Fp8Variant var = kFP8_DEFAULT;  // c0940e9's default: a CTA a tile, the token tile 128 once it fills the SMs
        var.persist = false;
        var.wave = false;
        var.pipeLarge = false;
        return var;
    }
    if (std::strcmp(v, "wg-pipe32") == 0)
    {
        Fp8Variant var = kFP8_DEFAULT;  // 1723d97's default: the paired blocks at token tiles up to 32 only
        var.pipeLarge = false;
        return var;
    }
    if (std::strcmp(v, "wg-persist") == 0)
    {
        Fp8Variant var = kFP8_DEFAULT;  // persistent CTAs, the token tile as wg-onetile's
        var.wave = false;
        var.pipeLarge = false;
        return var;
    }
    return kFP8_DEFAULT;
}

} // namespace

extern "C" size_t metrale_w8a8_workspace_size(int64_t m, int64_t n, int64_t k, int32_t act_format,
    int32_t act_scale_granularity)
{
    if (m <= 0 || k <= 0)
    {
        return 0;
    }
    if (act_format == kMETRALE_ACT_FP8)
    {
        return fp8PartOffset(m, k, act_scale_granularity) + wgPartBytes(m, n, k);
    }
    return bf16OperandBytes(m, k) + wgPartBytes(m, n, k);
}

extern "C" cudaError_t metrale_w8a8_proj(const void* x, int32_t x_dtype, const int8_t* weight,
    const float* weight_scale, int32_t weight_scale_granularity, int32_t act_format, int32_t act_scale_granularity,
    const float* input_scale, const float* bias, void* y, int64_t m, int64_t n, int64_t k, void* workspace,
    size_t workspace_bytes, cudaStream_t stream)
{
    if (!validShape(m, n, k) || !validDtype(x_dtype))
    {
        return cudaErrorInvalidValue;
    }
    if (weight_scale_granularity != kMETRALE_WSCALE_CHANNEL && weight_scale_granularity != kMETRALE_WSCALE_BLOCK128)
    {
        return cudaErrorInvalidValue;
    }
    if (act_format != kMETRALE_ACT_BF16 && act_format != kMETRALE_ACT_FP8)
    {
        return cudaErrorNotSupported;
    }
    const bool staticScale = act_scale_granularity == kMETRALE_ASCALE_TENSOR;
    if (act_format == kMETRALE_ACT_FP8 && act_scale_granularity != kMETRALE_ASCALE_ROW
        && act_scale_granularity != kMETRALE_ASCALE_ROW_BLOCK128 && !staticScale)
    {
        return cudaErrorInvalidValue;
    }
    if (act_format == kMETRALE_ACT_FP8 && staticScale && (input_scale == nullptr || !aligned(input_scale, 4)))
    {
        return cudaErrorInvalidValue;
    }
    if (k % 16 != 0)
    {
        return cudaErrorNotSupported;
    }
    if (m == 0)
    {
        return cudaSuccess;
    }
    if (x == nullptr || weight == nullptr || weight_scale == nullptr || y == nullptr || !aligned(weight, 16)
        || !aligned(weight_scale, 4) || !aligned(y, x_dtype == kMETRALE_FLOAT32 ? 4 : 2))
    {
        return cudaErrorInvalidValue;
    }
    W8A8Params p = w8a8Params(weight, weight_scale, weight_scale_granularity, bias, k);
    const int mi = static_cast<int>(m);
    const int ni = static_cast<int>(n);
    const int ki = static_cast<int>(k);
    if (act_format == kMETRALE_ACT_BF16)
    {
        return projectBf16<W8A8Bf16Policy>(p, x, x_dtype, m, n, k, workspace, workspace_bytes, y, stream);
    }
    if (workspace == nullptr || !aligned(workspace, 16)
        || workspace_bytes < metrale_w8a8_workspace_size(m, n, k, act_format, act_scale_granularity))
    {
        return cudaErrorInvalidValue;
    }
    p.nbx = static_cast<int>(actScaleColumns(k, act_scale_granularity));
    __half* xq = static_cast<__half*>(workspace);
    float* sx = reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) + operandBytes(m, k));
    p.sx = sx;
    const bool rowChannel = p.blockScales == 0 && p.nbx == 1;  // the FP8 wgmma kernel's scales
    // The block-scaled FP8 kernel: per-block scales at the promotion (a function of the weight's shape:
    // block128 weights up to kFP8_SW_MAX blocks of K; beyond, the exact path at every m).
    const bool blocks = !rowChannel && wgFp8BlocksServe(p.blockScales != 0, k);
    const Fp8Variant var = rowChannel || blocks ? fp8VariantSelected() : Fp8Variant{false, false, false};
    void* xw = static_cast<uint8_t*>(workspace) + operandBytes(m, k) + scaleBytes(m, k, act_scale_granularity);
    float* sxT = reinterpret_cast<float*>(static_cast<uint8_t*>(xw) + wgFp8OperandBytes(m, k));
    const uint8_t* xwc = static_cast<const uint8_t*>(xw);
    if (var.wgmma && var.fused && aligned(x, 16))
    {
        // One pass from x to the e4m3 operand and sx (the same values as the two passes below).
        cudaError_t e = p.nbx > 1 ? wgFp8QuantBlock(x, x_dtype, m, k, xw, sxT, stream)
                                  : wgFp8Quant(x, x_dtype, staticScale ? input_scale : nullptr, m, k, xw, sx, stream);
        if (e != cudaSuccess)
        {
            return e;
        }
        if (!rowChannel)
        {
            return launchProjWgmmaFp8Blocks<W8A8Fp8Policy<false>>(p, xwc, sxT, y, mi, ni, ki, x_dtype, stream,
                var.fmaProbe, var.rows64, var.pipe, var.persist, var.wave, var.pipeLarge);
        }
        return launchProjWgmmaFp8<W8A8Fp8Policy<false>>(p, xwc, y, mi, ni, ki, x_dtype, stream, var.hoist,
            var.rows64, var.pipe, var.persist, var.wave, var.pipeLarge);
    }
    if (staticScale)
    {
        // No amax pre-pass: one elementwise pass, the static scale copied to every row's sx.
        const size_t total = static_cast<size_t>(m) * static_cast<size_t>(k);
        quantFp8StaticKernel<<<elementwiseBlocks(total), kACT_THREADS, 0, stream>>>(
            x, x_dtype, input_scale, xq, sx, total, mi);
    }
    else
    {
        quantFp8Kernel<<<actRowGrid(m, k), kACT_THREADS, 0, stream>>>(x, x_dtype, xq, sx, ki, p.nbx);
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
    {
        return e;
    }
    const uint16_t* X = reinterpret_cast<const uint16_t*>(xq);
    if (rowChannel)
    {
        if (var.wgmma)
        {
            // The FP8 wgmma kernel at every m, on the e4m3 bytes laid out for it.
            e = wgFp8Operand(xq, m, k, xw, stream);
            if (e != cudaSuccess)
            {
                return e;
            }
            return launchProjWgmmaFp8<W8A8Fp8Policy<false>>(p, xwc, y, mi, ni, ki, x_dtype, stream, var.hoist,
                var.rows64);
        }
        // The exact path (METRALE_W8A8_MMA=exact, or no sm_90a code): the bf16-format wgmma tier
        // where it serves m, on the f16 values laid out for it.
        const bool wg = useWgmma<W8A8Fp8Policy<false>>(m);
        if (wg)
        {
            e = wgOperand<true>(xq, kMETRALE_FLOAT16, m, k, xw, stream);
            if (e != cudaSuccess)
            {
                return e;
            }
            X = static_cast<const uint16_t*>(xw);
        }
        return dispatchProjGemm<W8A8Fp8Policy<false>>(p, X, wg,
            static_cast<uint8_t*>(workspace) + fp8PartOffset(m, k, act_scale_granularity), y, mi, ni, ki, x_dtype, stream);
    }
    if (var.wgmma)
    {
        // The block-scaled FP8 kernel on the split pre-pass's values (wg-base, or x not 16-byte
        // aligned): the same operand and scales as the fused pass, so the same bits.
        e = wgFp8Operand(xq, m, k, xw, stream);
        if (e == cudaSuccess && p.nbx > 1)
        {
            e = wgFp8BlockScales(sx, m, k, sxT, stream);
        }
        if (e != cudaSuccess)
        {
            return e;
        }
        return launchProjWgmmaFp8Blocks<W8A8Fp8Policy<false>>(p, xwc, sxT, y, mi, ni, ki, x_dtype, stream, false,
            var.rows64);
    }
    // The exact path of the block-scaled variants (METRALE_W8A8_MMA=exact, no sm_90a code, or block128
    // weights past kFP8_SW_MAX blocks of K).
    return dispatchProjGemm<W8A8Fp8Policy<true>>(p, X, false, nullptr, y, mi, ni, ki, x_dtype, stream);
}
