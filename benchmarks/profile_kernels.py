"""Run a few projection launches once each, for Nsight Compute (ncu) to profile.

    ncu --kernel-name regex:projGemm --launch-skip 0 python -m benchmarks.profile_kernels

Cases: W4A16 and W8A8 at M=1 (the weight-streaming tiers) and M=4096 (the large tier) on the
Qwen3-8B up projection (n=12288, k=4096).
"""

from __future__ import annotations

import torch

from metrale_export.ops import cuda as mcuda
from metrale_export.ops import w4a16, w8a8


def main() -> None:
    n, k = 12288, 4096
    w = torch.randn(n, k) * 0.02
    q4 = w4a16.quantize(w, 128, True)
    q8 = w8a8.quantize(w, "channel")
    dev = torch.device("cuda")
    w4, s4 = q4.weight.to(dev), q4.weight_scale.to(dev)
    w8, s8 = q8.weight.to(dev), q8.weight_scale.to(dev)
    for m in (1, 4096):
        x = torch.randn(m, k, device=dev).to(torch.bfloat16)
        y = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
        torch.cuda.nvtx.range_push(f"w4a16 m={m}")
        mcuda.launch_w4a16(x, w4, s4, None, None, y, n, k, 128)
        torch.cuda.nvtx.range_pop()
        mcuda.launch_w8a8(x, w8, s8, None, y, n, k, "channel", "fp8", "row")
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
