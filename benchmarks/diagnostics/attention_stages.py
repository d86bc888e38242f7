"""The decode path's two kernels timed apart (torch.profiler's CUDA activity): the decode kernel and
the merge, at the cells of bench_attention where the target is missed, Qwen3-8B heads, bf16.

    python -m benchmarks.diagnostics.attention_stages [OUT_DIR]

Prints, per (batch, past), the mean device microseconds of each kernel a call and the KV bytes a
second of the decode kernel alone; writes attention-stages-<date>-<commit>.md into OUT_DIR.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.bench_kernels import _commit, write_markdown
from metrale_export.ops import attention as A
from metrale_export.ops import cuda as mcuda

HQ, HKV, D = 32, 8, 128
CELLS = [(1, 1024), (1, 4096), (1, 16384), (1, 32768), (8, 1024), (8, 4096), (8, 32768), (32, 1024), (64, 1024),
         (64, 16384)]
CALLS = 20


def stage_times(batch: int, past: int) -> dict:
    total = past + 1
    q = torch.randn(batch, HQ, 1, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(batch, HKV, total, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    scale = A.default_scale(D)
    for _ in range(3):
        mcuda.launch_attention(q, k, v, scale)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            mcuda.launch_attention(q, k, v, scale)
        torch.cuda.synchronize()
    us = defaultdict(float)
    for e in prof.events():
        if e.device_type.name == "CUDA":
            name = "decode" if "attentionDecodeKernel" in e.name else "merge" if "attentionMergeKernel" in e.name else None
            if name:
                us[name] += e.device_time / CALLS
    kv = 2 * batch * HKV * total * D * 2
    return dict(batch=batch, past=past, decode=us["decode"], merge=us["merge"], tbs=kv / us["decode"] / 1e6)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0]) if argv else Path(".")
    lines = [f"# Attention decode stages, {torch.cuda.get_device_name()}, {time.strftime('%Y-%m-%d %H:%M')}, "
             f"commit {_commit()[:7]}", "",
             f"torch.profiler device time a call (mean of {CALLS}), inputs in L2 where they fit "
             "(the small cells).", "",
             "| batch | past | decode kernel us | merge us | decode kernel TB/s (KV bytes) |", "|---:|---:|---:|---:|---:|"]
    for b, p in CELLS:
        r = stage_times(b, p)
        lines.append(f"| {b} | {p} | {r['decode']:.1f} | {r['merge']:.1f} | {r['tbs']:.2f} |")
        print(lines[-1], flush=True)
        torch.cuda.empty_cache()
    write_markdown(out, "attention-stages", time.strftime("%Y%m%d-%H%M"), lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
