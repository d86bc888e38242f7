"""Benchmark of the Attention kernel (plugins/attention/) against torch's SDPA and a copy, one GPU.

    python -m benchmarks.bench_attention [--out DIR] [--quick]

Qwen3-8B attention (32 query heads, 8 KV heads of 128), bf16:
- decode (one query a sequence) at batch 1..256 and past 1k..32k: the median time, the KV cache's
  bytes read per second, and that rate as a fraction of the device-to-device copy bandwidth (the
  issue's target: >= 0.80), with ``scaled_dot_product_attention``'s flash and cuDNN backends timed on
  the same inputs;
- prefill (causal, no past) at seq 1k..8k, batch 1 and 4: TFLOP/s (4 S^2/2 D H flops a sequence)
  and the ratio to SDPA flash (target >= 0.8) and cuDNN.
Method as benchmarks/bench_kernels.py: calls captured into a CUDA graph, inputs rotated over copies
whose total exceeds twice the L2 (nothing timed from cache), median of the graph replays. Writes
``attention-<date>.md`` / ``.json`` into ``--out`` (default ``$OUT`` or benchmarks/results).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from benchmarks.bench_kernels import L2_BYTES, _commit, bench_parser, copy_bandwidth, require_cuda, time_graph
from metrale_export.ops import attention as A
from metrale_export.ops import cuda as mcuda

HQ, HKV, D = 32, 8, 128
DECODE_BATCHES = (1, 8, 32, 64, 128, 256)
DECODE_PASTS = (1024, 4096, 16384, 32768)
PREFILL = ((1, 1024), (1, 2048), (1, 4096), (1, 8192), (4, 1024), (4, 4096))
MAX_KV_BYTES = 40e9  # skip decode cells whose cache alone exceeds this


def _copies(nbytes: float) -> int:
    return max(2, min(64, math.ceil(2.2 * L2_BYTES / nbytes)))


def _input_sets(n: int, batch: int, seq: int, total: int) -> list:
    """n copies of (q [batch, HQ, seq, D], k, v [batch, HKV, total, D]), bf16 on the GPU."""
    sets = []
    for _ in range(n):
        q = torch.randn(batch, HQ, seq, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, HKV, total, D, device="cuda", dtype=torch.bfloat16)
        sets.append((q, k, torch.randn_like(k)))
    return sets


def _sdpa(backend, q, k, v, causal):
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def _time_or_none(fn, sets):
    try:
        fn(*sets[0])
        torch.cuda.synchronize()
        return time_graph(lambda i: fn(*sets[i % len(sets)]))
    except Exception as exc:  # an anchor the installed torch cannot run on these shapes
        print(f"  (anchor unavailable: {type(exc).__name__}: {str(exc).splitlines()[0][:100]})", flush=True)
        return None


def _time_all(row: dict, sets, n: int, scale: float, causal: bool, work: float, per_second: str) -> None:
    """``<impl>_s`` for ours, flash and cudnn (None where torch has no such kernel here) and
    ``<impl>_<per_second>``: ``work`` (bytes or flops) per second, in units of 1e12."""
    row["ours_s"] = time_graph(lambda i: mcuda.launch_attention(*sets[i % n], scale))
    row["flash_s"] = _time_or_none(lambda q, k, v: _sdpa(SDPBackend.FLASH_ATTENTION, q, k, v, causal), sets)
    row["cudnn_s"] = _time_or_none(lambda q, k, v: _sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v, causal), sets)
    for key in ("ours", "flash", "cudnn"):
        t = row[f"{key}_s"]
        row[f"{key}_{per_second}"] = None if t is None else work / t / 1e12


def bench_decode(batch: int, past: int, copy_tbs: float) -> dict:
    total = past + 1
    kv_bytes = 2 * batch * HKV * total * D * 2
    n = _copies(kv_bytes)
    sets = _input_sets(n, batch, 1, total)
    scale = A.default_scale(D)
    row = dict(kind="decode", batch=batch, past=past, kv_bytes=kv_bytes,
               path=mcuda.attention_path(batch, HQ, HKV, 1, total, D))
    _time_all(row, sets, n, scale, causal=False, work=kv_bytes, per_second="tbs")
    row["of_copy"] = row["ours_tbs"] / copy_tbs
    # The block-tile kernel's two paths forced (the bits are the same as the decode kernel's, which
    # 'ours' runs): split=0, one CTA per (sequence, KV head) over the whole past; split=1, per-chunk
    # CTAs and a merge.
    for key, split in (("nosplit", 0), ("split", 1)):
        row[f"{key}_s"] = time_graph(lambda i, split=split: mcuda.launch_attention(*sets[i % n], scale, split=split))
        row[f"{key}_of_copy"] = kv_bytes / row[f"{key}_s"] / 1e12 / copy_tbs
    del sets
    torch.cuda.empty_cache()
    return row


def bench_prefill(batch: int, seq: int) -> dict:
    flops = 4 * batch * HQ * D * seq * seq / 2
    nbytes = 2 * batch * (HQ + 2 * HKV) * seq * D
    n = _copies(nbytes)
    sets = _input_sets(n, batch, seq, seq)
    scale = A.default_scale(D)
    row = dict(kind="prefill", batch=batch, seq=seq, flops=flops)
    _time_all(row, sets, n, scale, causal=True, work=flops, per_second="tflops")
    row["vs_flash"] = None if row["flash_s"] is None else row["flash_s"] / row["ours_s"]
    row["vs_cudnn"] = None if row["cudnn_s"] is None else row["cudnn_s"] / row["ours_s"]
    del sets
    torch.cuda.empty_cache()
    return row


def _f(x, fmt):
    return "n/a" if x is None else format(x, fmt)


def decode_line(r: dict) -> str:
    return (f"| {r['batch']:>5} | {r['past']:>6} | {r['path']:>7} | {_f(r['ours_s'] * 1e6, '9.1f')} | "
            f"{_f(r['ours_tbs'], '5.2f')} | {_f(r['of_copy'], '5.2f')} | {_f(r['flash_tbs'], '5.2f')} | "
            f"{_f(r['cudnn_tbs'], '5.2f')} | {_f(r['nosplit_s'] * 1e6, '9.1f')} | {_f(r['nosplit_of_copy'], '5.2f')} | "
            f"{_f(r['split_s'] * 1e6, '9.1f')} | {_f(r['split_of_copy'], '5.2f')} |")


DECODE_HEAD = ["| batch | past | path | ours us | ours TB/s | of copy | flash TB/s | cuDNN TB/s | split=0 us | "
               "split=0 of copy | split=1 us | split=1 of copy |",
               "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
PREFILL_HEAD = ["| batch | seq | ours us | ours TFLOP/s | flash TFLOP/s | cuDNN TFLOP/s | vs flash | vs cuDNN |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|"]


def prefill_line(r: dict) -> str:
    return (f"| {r['batch']} | {r['seq']} | {_f(r['ours_s'] * 1e6, '9.1f')} | {_f(r['ours_tflops'], '6.1f')} | "
            f"{_f(r['flash_tflops'], '6.1f')} | {_f(r['cudnn_tflops'], '6.1f')} | {_f(r['vs_flash'], '5.2f')} | "
            f"{_f(r['vs_cudnn'], '5.2f')} |")


def main(argv=None) -> int:
    ap = bench_parser(__doc__)
    ap.add_argument("--quick", action="store_true", help="a few cells of each table")
    ap.add_argument("--decode-only", action="store_true", help="the decode table alone")
    args = ap.parse_args(argv)
    require_cuda("bench_attention")
    props = torch.cuda.get_device_properties(0)
    copy_tbs = copy_bandwidth()
    print(f"{props.name}, {props.multi_processor_count} SMs; device-to-device copy {copy_tbs:.2f} TB/s "
          f"(read + write); Qwen3-8B attention ({HQ} heads, {HKV} KV heads of {D}), bf16", flush=True)
    batches = (1, 64, 256) if args.quick else DECODE_BATCHES
    pasts = (1024, 16384) if args.quick else DECODE_PASTS
    prefill = () if args.decode_only else PREFILL[:2] + PREFILL[3:4] if args.quick else PREFILL
    rows = []
    print("\n".join(DECODE_HEAD), flush=True)
    for batch in batches:
        for past in pasts:
            if 2 * batch * HKV * (past + 1) * D * 2 * 2 > MAX_KV_BYTES:
                continue
            rows.append(bench_decode(batch, past, copy_tbs))
            print(decode_line(rows[-1]), flush=True)
    print("\n".join(PREFILL_HEAD), flush=True)
    for batch, seq in prefill:
        rows.append(bench_prefill(batch, seq))
        print(prefill_line(rows[-1]), flush=True)
    stamp = dt.datetime.now(dt.timezone.utc)
    result = dict(date=stamp.isoformat(timespec="seconds"), commit=_commit(), device=props.name,
                  torch=torch.__version__, copy_tbs=copy_tbs, rows=rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = out / f"attention-{stamp:%Y%m%d-%H%M}"
    base.with_suffix(".json").write_text(json.dumps(result, indent=1))
    dec = [r for r in rows if r["kind"] == "decode"]
    pre = [r for r in rows if r["kind"] == "prefill"]
    lines = [f"# Attention benchmark, {result['date']}, commit {result['commit']}", "",
             f"{props.name}; torch {torch.__version__}; copy {copy_tbs:.2f} TB/s (read + write). Decode: the KV "
             "cache's bytes over the time; 'of copy' is that over the copy bandwidth (target >= 0.80). Prefill: "
             "causal, no past; 'vs' is the anchor's time over ours (target >= 0.8 vs flash).", "",
             "## Decode", ""] + DECODE_HEAD + [decode_line(r) for r in dec] + ["", "## Prefill", ""] + PREFILL_HEAD + \
            [prefill_line(r) for r in pre] + [""]
    base.with_suffix(".md").write_text("\n".join(lines))
    print(f"wrote {base}.json and {base}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
