/*
 * Launcher helpers shared by the three projection launchers: argument checks, workspace layout and
 * the activation pre-pass that produces the 16-bit A operand.
 *
 * Invariants: nothing here allocates, synchronizes or prints; errors are cudaError_t
 * (cudaErrorInvalidValue for bad arguments, cudaErrorNotSupported for combinations the op contract
 * or these kernels do not serve).
 */
#ifndef METRALE_PROJ_LAUNCH_CUH
#define METRALE_PROJ_LAUNCH_CUH

#include <cstdint>
#include <cuda_runtime.h>

#include "actQuant.cuh"
#include "metraleNumerics.cuh"
#include "projGemm.cuh"
#include "projStream.cuh"
#include "projWgmma.cuh"

namespace metrale
{

constexpr size_t kWS_ALIGN = 256;
constexpr int64_t kMAX_DIM = (1ll << 31) - 1;

inline bool validDtype(int32_t d)
{
    return d == kMETRALE_FLOAT32 || d == kMETRALE_FLOAT16 || d == kMETRALE_BFLOAT16;
}

inline bool aligned(const void* p, uintptr_t a)
{
    return (reinterpret_cast<uintptr_t>(p) % a) == 0;
}

/* Bytes of the 16-bit A operand [m, k] in the workspace. */
inline size_t operandBytes(int64_t m, int64_t k)
{
    return alignUp(static_cast<size_t>(m) * static_cast<size_t>(k) * 2, kWS_ALIGN);
}

/* Common shape checks: m >= 0, n, k >= 1, all within int range (the kernels index with int rows). */
inline bool validShape(int64_t m, int64_t n, int64_t k)
{
    return m >= 0 && n >= 1 && k >= 1 && m <= kMAX_DIM && n <= kMAX_DIM && k <= kMAX_DIM;
}

/* The bf16 A operand: x itself when it is 16-byte aligned bf16, else bf16(x) written to workspace. */
inline cudaError_t bf16Operand(const void* x, int32_t xDtype, int64_t m, int64_t k, void* workspace,
    size_t workspaceBytes, cudaStream_t stream, const uint16_t** out)
{
    if (xDtype == kMETRALE_BFLOAT16 && aligned(x, 16))
    {
        *out = static_cast<const uint16_t*>(x);
        return cudaSuccess;
    }
    const size_t total = static_cast<size_t>(m) * static_cast<size_t>(k);
    if (workspace == nullptr || workspaceBytes < operandBytes(m, k) || !aligned(workspace, 16))
    {
        return cudaErrorInvalidValue;
    }
    toBf16Kernel<<<elementwiseBlocks(total), kACT_THREADS, 0, stream>>>(
        x, xDtype, static_cast<__nv_bfloat16*>(workspace), total);
    *out = static_cast<const uint16_t*>(workspace);
    return cudaGetLastError();
}

/* Workspace bytes of the bf16 operand at m rows: row-major, or the wgmma tier's layout where that tier
 * may serve m (projTiers.h), whichever is larger. */
inline size_t bf16OperandBytes(int64_t m, int64_t k)
{
    const size_t rm = operandBytes(m, k);
    const size_t wg = wgmmaTierFor(m) ? wgOperandBytes(m, k) : 0;
    return rm > wg ? rm : wg;
}

/* Workspace bytes of the wgmma operand beside a pre-pass's row-major result, where the tier may serve m. */
inline size_t wgExtraBytes(int64_t m, int64_t k)
{
    return wgmmaTierFor(m) ? wgOperandBytes(m, k) : 0;
}

/* The bf16 operand of the tier that serves m rows: the wgmma layout in the workspace (wg, from x of
 * any dtype in one pass; the workspace then also holds partBytes at bf16OperandBytes), else
 * bf16Operand's. */
inline cudaError_t bf16OperandFor(bool wg, const void* x, int32_t xDtype, int64_t m, int64_t k, size_t partBytes,
    void* workspace, size_t workspaceBytes, cudaStream_t stream, const uint16_t** out)
{
    if (!wg)
    {
        return bf16Operand(x, xDtype, m, k, workspace, workspaceBytes, stream, out);
    }
    if (workspace == nullptr || workspaceBytes < bf16OperandBytes(m, k) + partBytes || !aligned(workspace, 16))
    {
        return cudaErrorInvalidValue;
    }
    *out = static_cast<const uint16_t*>(workspace);
    return wgOperand<false>(x, xDtype, m, k, workspace, stream);
}

/* The bf16-activation path of a dense launcher: the bf16 operand of the tier that serves m rows
 * (bf16OperandFor), then that tier (dispatchProjGemm), with the wgmma split's slice sums after the
 * operand in the workspace. */
template <class P>
inline cudaError_t projectBf16(const typename P::Params& p, const void* x, int32_t xDtype, int64_t m, int64_t n,
    int64_t k, void* workspace, size_t workspaceBytes, void* y, cudaStream_t stream)
{
    const bool wg = useWgmma<P>(m);
    const uint16_t* X = nullptr;
    cudaError_t e = bf16OperandFor(wg, x, xDtype, m, k, wgPartBytes(m, n, k), workspace, workspaceBytes, stream, &X);
    if (e != cudaSuccess)
    {
        return e;
    }
    return dispatchProjGemm<P>(p, X, wg, wg ? static_cast<uint8_t*>(workspace) + bf16OperandBytes(m, k) : nullptr, y,
        static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), xDtype, stream);
}

} // namespace metrale

#endif // METRALE_PROJ_LAUNCH_CUH
