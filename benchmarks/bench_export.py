"""Export benchmark: Qwen3-shaped random bf16 checkpoints exported to w4a16 and w8a8, beside the ONNX
Runtime GenAI model builder's int4 CPU path on the same checkpoint.

Each export runs in a child process; its wall time and peak RSS (``wait4``'s ``ru_maxrss``, which
counts file-backed pages too) are measured by this script, and a watchdog kills a child whose
resident memory passes ``--rss-limit-gib`` (the machine is shared: an out-of-memory peer must not
take other processes with it). One invocation may run several shapes (``--shape
qwen3-1.7b,qwen3-8b``); their tables go to one file, ``benchmarks/results/export-YYYYMMDD-HHMM-<commit>.md``
(no suffix for the default ``qwen3-8b`` alone), rewritten after every row.

Invariants: the checkpoint is written shard by shard and tensor by tensor (never held in memory);
everything is written under one temporary directory that is removed at the end, also on failure;
one shape's checkpoint is deleted before the next shape's is written (disk).

    python benchmarks/bench_export.py                                # Qwen3-8B (~16 GB on disk, long)
    python benchmarks/bench_export.py --shape qwen3-1.7b,qwen3-8b    # a shape the peer fits, and 8B
    python benchmarks/bench_export.py --shape small                  # a quick check of the script
    python benchmarks/bench_export.py --formats w4a16,w4a16+no-search,w4a16+symmetric --no-peer  # W4A16 modes
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]

SHAPES = {
    # Qwen/Qwen3-8B's config.json (dimensions only).
    "qwen3-8b": dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
    # Qwen/Qwen3-1.7B's: small enough for the peer builder to finish on a 24 GiB machine.
    "qwen3-1.7b": dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    # Qwen/Qwen3-32B's (Qwen publishes it as Qwen/Qwen3-32B-AWQ too: write_awq_checkpoint).
    "qwen3-32b": dict(vocab_size=151936, hidden_size=5120, intermediate_size=25600, num_hidden_layers=64,
                      num_attention_heads=64, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
    "small": dict(vocab_size=4096, hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=4, head_dim=64, tie_word_embeddings=False),
}
SHARD_BYTES = 4 << 30


def qwen3_config(dims: dict) -> dict:
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "tie_word_embeddings": False, **dims,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 40960,
        "attention_bias": False, "torch_dtype": "bfloat16",
        "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 1,
        "use_sliding_window": False, "attention_dropout": 0.0, "initializer_range": 0.02,
    }


def tensor_shapes(cfg: dict) -> list[tuple[str, tuple[int, ...]]]:
    """Names and shapes of a Qwen3 checkpoint, in the order Hugging Face shards them."""
    h, i, v, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    qn, kvn = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", (v, h))]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        out += [(f"{p}.input_layernorm.weight", (h,)), (f"{p}.post_attention_layernorm.weight", (h,)),
                (f"{p}.self_attn.q_proj.weight", (qn, h)), (f"{p}.self_attn.k_proj.weight", (kvn, h)),
                (f"{p}.self_attn.v_proj.weight", (kvn, h)), (f"{p}.self_attn.o_proj.weight", (h, qn)),
                (f"{p}.self_attn.q_norm.weight", (hd,)), (f"{p}.self_attn.k_norm.weight", (hd,)),
                (f"{p}.mlp.gate_proj.weight", (i, h)), (f"{p}.mlp.up_proj.weight", (i, h)),
                (f"{p}.mlp.down_proj.weight", (h, i))]
    out.append(("model.norm.weight", (h,)))
    if not cfg.get("tie_word_embeddings"):
        out.append(("lm_head.weight", (v, h)))
    return out


def _random_bf16(shape: tuple[int, ...], gen: torch.Generator, is_norm: bool, chunk_rows: int = 8192):
    """Yield the bytes of a random bf16 tensor a block of rows at a time."""
    if is_norm:
        t = (1.0 + 0.05 * torch.randn(shape, generator=gen)).to(torch.bfloat16)
        yield t.view(torch.int16).numpy().tobytes()
        return
    rows, cols = shape
    for r in range(0, rows, chunk_rows):
        n = min(chunk_rows, rows - r)
        t = (torch.randn(n, cols, generator=gen) * 0.02).to(torch.bfloat16)
        yield t.view(torch.int16).numpy().tobytes()


def _write_shards(out: Path, entries: list[tuple[str, str, tuple[int, ...]]], blocks) -> int:
    """Write ``entries`` (name, safetensors dtype, shape) as shards of at most SHARD_BYTES, each
    tensor's bytes from ``blocks(dtype, shape)`` a block at a time, plus the index; returns the
    total tensor bytes."""
    shards: list[list[tuple[str, str, tuple[int, ...]]]] = [[]]
    size = 0
    for entry in entries:
        nbytes = _ITEM[entry[1]] * _numel(entry[2])
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(entry)
        size += nbytes
    weight_map, total = {}, 0
    for s, tensors in enumerate(shards):
        fname = f"model-{s + 1:05d}-of-{len(shards):05d}.safetensors"
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for name, dtype, shape in tensors:
            n = _ITEM[dtype] * _numel(shape)
            header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
            off += n
            weight_map[name] = fname
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * ((-len(raw)) % 8)
        with (out / fname).open("wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            for name, dtype, shape in tensors:
                for block in blocks(dtype, shape):
                    f.write(block)
        total += off
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return total


def write_checkpoint(out: Path, cfg: dict, seed: int = 0) -> int:
    """Write a sharded bf16 safetensors checkpoint tensor by tensor; returns its size in bytes."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}) + "\n")
    gen = torch.Generator().manual_seed(seed)
    return _write_shards(out, [(name, "BF16", shape) for name, shape in tensor_shapes(cfg)],
                         lambda dtype, shape: _random_bf16(shape, gen, is_norm=len(shape) == 1))


AWQ_GROUP = 128
AWQ_CONFIG = {"quant_method": "awq", "bits": 4, "group_size": AWQ_GROUP, "zero_point": True, "version": "gemm",
              "modules_to_not_convert": None}


def awq_tensor_shapes(cfg: dict) -> list[tuple[str, str, tuple[int, ...]]]:
    """(name, safetensors dtype, shape) of an AutoAWQ GEMM checkpoint of ``cfg``: each projection's
    ``weight`` [N, K] becomes qweight int32 [K, N/8], qzeros int32 [K/g, N/8], scales fp16 [K/g, N]
    (exporter/formats/awq.py has the layout); the rest stays bf16."""
    out = []
    for name, shape in tensor_shapes(cfg):
        stem = name.removesuffix(".weight")
        if len(shape) == 2 and stem.rsplit(".", 1)[-1].endswith("_proj"):
            n, k = shape
            out += [(f"{stem}.qweight", "I32", (k, n // 8)), (f"{stem}.qzeros", "I32", (k // AWQ_GROUP, n // 8)),
                    (f"{stem}.scales", "F16", (k // AWQ_GROUP, n))]
        else:
            out.append((name, "BF16", shape))
    return out


_ITEM = {"BF16": 2, "F16": 2, "I32": 4}


def _random_awq(dtype: str, shape: tuple[int, ...], rng, gen: torch.Generator, chunk: int = 64 << 20):
    """Yield a random tensor's bytes in blocks: uniform int4 codes and zero points (every nibble of
    a word), fp16 scales in [0.002, 0.004] (weights of std ~0.02 like write_checkpoint's), bf16 as
    there."""
    if dtype == "BF16":
        yield from _random_bf16(shape, gen, is_norm=len(shape) == 1)
        return
    total = _ITEM[dtype] * _numel(shape)
    for off in range(0, total, chunk):
        n = min(chunk, total - off)
        if dtype == "I32":
            yield rng.bytes(n)
        else:
            yield rng.uniform(0.002, 0.004, n // 2).astype(np.float16).tobytes()


def write_awq_checkpoint(out: Path, cfg: dict, seed: int = 0) -> int:
    """Write a sharded AutoAWQ (GEMM, group 128) checkpoint of random weights tensor by tensor,
    never more than one block in memory; returns its size in bytes. What a user downloads as
    Qwen/Qwen3-32B-AWQ, at a quarter of the bf16 checkpoint's disk."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({**cfg, "torch_dtype": "float16",
                                                 "quantization_config": AWQ_CONFIG}, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}) + "\n")
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    return _write_shards(out, awq_tensor_shapes(cfg), lambda dtype, shape: _random_awq(dtype, shape, rng, gen))


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def write_tokenizer(out: Path) -> None:
    """A minimal byte-level BPE tokenizer (the peer builder copies the tokenizer into its output)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {f"<t{i}>": i for i in range(256)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<t0>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<t0>", "eos_token": "<t1>",
        "pad_token": "<t1>", "unk_token": "<t0>", "model_max_length": 40960}) + "\n")


# --- measuring a child ------------------------------------------------------------------------

def _rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` and its descendants, in KiB (0 once gone)."""
    total = 0
    pids = [pid]
    try:
        pids += [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        pass
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def run_measured(cmd: list[str], log: Path, rss_limit_kib: int, timeout_s: float) -> dict:
    """Run ``cmd``; wall time, peak RSS (ru_maxrss of the child), and why it stopped."""
    t0 = time.time()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:  # if memory runs out, the kernel's OOM killer takes the measured child, not a neighbour
        Path(f"/proc/{proc.pid}/oom_score_adj").write_text("1000")
    except OSError:
        pass
    killed: list[str] = []
    peak_polled = [0]

    def watch():
        while proc.poll() is None:
            rss = _rss_kib(proc.pid)
            peak_polled[0] = max(peak_polled[0], rss)
            if rss > rss_limit_kib:
                killed.append(f"killed by the benchmark at {rss / 2**20:.1f} GiB resident (limit {rss_limit_kib / 2**20:.0f} GiB)")
                proc.kill()
                return
            if time.time() - t0 > timeout_s:
                killed.append(f"killed by the benchmark after {timeout_s:.0f} s")
                proc.kill()
                return
            time.sleep(0.5)

    th = threading.Thread(target=watch, daemon=True)
    th.start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    th.join()
    wall = time.time() - t0
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_gib": max(usage.ru_maxrss, peak_polled[0]) / 2**20,
            "rc": proc.returncode, "note": "; ".join(killed), "log": log}


EXPORT_CHILD = """
import sys, time
from metrale_export.exporter.export import ExportOptions, export
from metrale_export.exporter.quantization import QuantRequest

class Progress:
    # export()'s progress protocol: note(text), start(total_bytes), update(n_bytes)
    def __init__(self): self.done, self.total, self.next = 0, 1, 0.0
    def note(self, text): print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)
    def start(self, total, *rest): self.total = max(total, 1); self.note("tracing done; writing weights")
    def __getattr__(self, name): return lambda *a, **k: None  # steps added to the protocol later
    def update(self, n):
        self.done += n
        if self.done / self.total >= self.next:
            print(f"{time.strftime('%H:%M:%S')} {100 * self.done / self.total:5.1f}% of weights written", flush=True)
            self.next += 0.1

# Stage timings and memory in the log (diagnostics only: the wrapped functions run unchanged).
import functools, onnx
import metrale_export.exporter.export as E

def _vm():
    return {k: int(v.split()[0]) >> 10 for k, v in (l.split(":", 1) for l in open("/proc/self/status"))
            if k in ("VmRSS", "VmHWM")}

def _timed(mod, name):
    f = getattr(mod, name)
    @functools.wraps(f)
    def g(*a, **k):
        t = time.time(); r = f(*a, **k)
        print(f"{time.strftime('%H:%M:%S')} stage {name}: {time.time() - t:.1f} s, MiB {_vm()}", flush=True)
        return r
    setattr(mod, name, g)

for _n in ("trace", "_optimize", "_cleanup", "build_manifest"):
    if hasattr(E, _n):
        _timed(E, _n)
_timed(onnx, "save_model"); _timed(onnx.checker, "check_model")

fmt, ckpt, out = sys.argv[1:4]
weight, *mods = fmt.split("+")  # e.g. w4a16+symmetric+no-search: the CLI's --symmetric, --no-scale-search
unknown = set(mods) - {"symmetric", "no-search"}
if unknown:
    sys.exit(f"unknown format modifiers {sorted(unknown)}: expected symmetric, no-search")
extra = {**({"symmetric": True} if "symmetric" in mods else {}),
         **({"scale_search": False} if "no-search" in mods else {})}
r = export(ckpt, out, ExportOptions(request=QuantRequest(weight=weight, **extra), dtype="bfloat16"),
           progress=Progress())
print(f"done in {r.seconds:.1f} s", flush=True)
"""


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "metrale_export"],
                               cwd=ROOT, capture_output=True, text=True).stdout.strip()
        return head + (" (with uncommitted changes in metrale_export/)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _peer_version() -> str | None:
    try:
        import onnxruntime_genai

        return onnxruntime_genai.__version__
    except ImportError:
        return None


def _tail(log: Path, n: int = 3) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " / ".join(lines[-n:])[-300:]


def _shapes(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in SHAPES]
    if not names or bad or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"expected one or more of {', '.join(sorted(SHAPES))}, comma-separated and each once; found {text!r}")
    return names


def _print_result(r: dict) -> None:
    print(f"  {r['wall_s']:.0f} s ({r['cpu_s']:.0f} s CPU), peak RSS {r['peak_rss_gib']:.2f} GiB, rc {r['rc']} {r['note']}",
          flush=True)
    if r["rc"] != 0:
        print(_tail(r["log"], 20), flush=True)


def run_shape(shape: str, args, work: Path, section: dict, save_table) -> None:
    """Write (or reuse) one shape's checkpoint, export it in every format, then run the peer."""
    cfg = qwen3_config(SHAPES[shape])
    t0 = time.time()
    if args.checkpoint is not None:
        ckpt = args.checkpoint
        size = json.loads((ckpt / "model.safetensors.index.json").read_text())["metadata"]["total_size"]
        cfg = json.loads((ckpt / "config.json").read_text())
    else:
        ckpt = work / f"checkpoint-{shape}"
        size = write_checkpoint(ckpt, cfg)
        write_tokenizer(ckpt)
    section.update(cfg=cfg, size=size, gen_s=time.time() - t0, reused=args.checkpoint is not None)
    print(f"{shape}: checkpoint {size / 2**30:.2f} GiB in {section['gen_s']:.0f} s at {ckpt}", flush=True)
    limit = int(args.rss_limit_gib * 2**20)
    rows = section["rows"]

    def measure(label: str, cmd: list[str], out: Path, log: Path) -> None:
        """One exporter run: time, memory and output size into a row; the output is then removed."""
        r = run_measured(cmd, log, limit, args.timeout_s)
        r["out_gib"] = dir_bytes(out) / 2**30 if out.exists() else 0.0
        rows.append((label, r))
        save_table()
        _print_result(r)
        shutil.rmtree(out, ignore_errors=True)

    for fmt in [f for f in args.formats.split(",") if f]:
        out = work / f"export-{shape}-{fmt}"
        print(f"{shape}: metrale-export {fmt} ...", flush=True)
        measure(f"metrale-export `{fmt}` (bf16 I/O)", [sys.executable, "-c", EXPORT_CHILD, fmt, str(ckpt), str(out)],
                out, work / f"{shape}-{fmt}.log")
    if not args.no_peer:
        ver = _peer_version()
        if ver is None:
            rows.append(("onnxruntime-genai builder int4 cpu",
                         {"note": "onnxruntime-genai is not installed (make bench-export installs the bench extra)"}))
        else:
            out = work / f"export-{shape}-peer"
            print(f"{shape}: onnxruntime-genai builder int4 cpu ...", flush=True)
            measure(f"onnxruntime-genai {ver} builder `-p int4 -e cpu`",
                    [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-o", str(out),
                     "-p", "int4", "-e", "cpu", "-c", str(work / f"peer-cache-{shape}")],
                    out, work / f"{shape}-peer.log")
            shutil.rmtree(work / f"peer-cache-{shape}", ignore_errors=True)
    save_table()
    if args.checkpoint is None and not args.keep:
        shutil.rmtree(ckpt, ignore_errors=True)  # the next shape's checkpoint needs the disk


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", type=_shapes, default=["qwen3-8b"],
                    help=f"one or more of {', '.join(sorted(SHAPES))}, comma-separated, run in that order")
    ap.add_argument("--workdir", type=Path, default=None, help="where the temporary checkpoint goes (default: the temporary directory)")
    ap.add_argument("--formats", default="w4a16,w8a8",
                    help="comma-separated weight formats, each optionally with +symmetric and/or +no-search "
                         "(the export's --symmetric / --no-scale-search), e.g. w4a16,w4a16+symmetric")
    ap.add_argument("--no-peer", action="store_true", help="skip the onnxruntime-genai model builder")
    ap.add_argument("--rss-limit-gib", type=float, default=16.0)
    ap.add_argument("--timeout-s", type=float, default=1800.0, help="per export")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--checkpoint", type=Path, default=None,
                    help="use this existing checkpoint (made by an earlier --keep run) instead of writing one "
                         "(one shape only)")
    args = ap.parse_args(argv)
    shapes = args.shape
    if args.checkpoint is not None and len(shapes) != 1:
        ap.error("--checkpoint goes with a single --shape")

    # Disk: the largest shape's checkpoint plus one export at a time (checkpoints are deleted
    # shape by shape).
    need = max(sum(2 * _numel(s) for _, s in tensor_shapes(qwen3_config(SHAPES[n]))) for n in shapes)
    base = args.workdir or Path(tempfile.gettempdir())
    free = shutil.disk_usage(base).free
    if args.checkpoint is not None:
        need = 0.6 * need  # only the exports' outputs
    if free < 2.5 * need:
        print(f"{base}: {free / 2**30:.1f} GiB free, the benchmark needs about {2.5 * need / 2**30:.1f} GiB "
              "(the checkpoint plus one export at a time); use --workdir", file=sys.stderr)
        return 2
    args.results.mkdir(parents=True, exist_ok=True)
    # benchmarks/results naming: <kind>-YYYYMMDD-HHMM-<commit> (the shapes are in the file).
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M")
    dest = args.results / f"export-{stamp}-{_commit().split()[0]}.md"
    sections = [{"shape": n, "cfg": qwen3_config(SHAPES[n]), "size": 0, "gen_s": 0.0, "rows": []} for n in shapes]

    def save_table():  # after every row: an interrupted run still leaves what it measured
        dest.write_text(render([sec for sec in sections if sec["size"]]))

    work = Path(tempfile.mkdtemp(prefix="metrale-bench-", dir=base))
    try:
        for section in sections:
            run_shape(section["shape"], args, work, section, save_table)
        print(dest.read_text())
        print(f"written to {dest}")
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _row_cells(r: dict) -> str:
    if "wall_s" not in r:
        return "- | - | - | - | " + r["note"]
    result = "ok" if r["rc"] == 0 else f"failed (exit {r['rc']}) {r['note']} {_tail(r['log'])}".strip()
    return (f"{r['wall_s']:.0f} | {r['cpu_s']:.0f} | {r['peak_rss_gib']:.2f} | {r['out_gib']:.2f} | "
            f"{result.replace('|', '/')}")


def render(sections: list[dict]) -> str:
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    lines = [
        f"# Export benchmark, {datetime.date.today().isoformat()}",
        "",
        f"- commit: {_commit()}",
        f"- machine: {os.cpu_count()} CPUs, {mem_gib:.0f} GiB memory, {platform.python_implementation()} "
        f"{platform.python_version()}, torch {torch.__version__}",
        "- peak RSS: the child's `ru_maxrss` (from `wait4`, file-backed pages included) or the highest "
        "polled VmRSS of it and its children, whichever is larger; CPU time: the child's user + system "
        "time (on a shared machine wall time includes waiting for a core)",
    ]
    for sec in sections:
        cfg, size, gen_s = sec["cfg"], sec["size"], sec["gen_s"]
        lines += [
            "",
            f"## `{sec['shape']}`",
            "",
            f"Random bf16 checkpoint: {cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, "
            f"intermediate {cfg['intermediate_size']}, vocab {cfg['vocab_size']}, "
            f"{'tied' if cfg.get('tie_word_embeddings') else 'untied'} embeddings; "
            f"{size / 2**30:.2f} GiB in shards of at most {SHARD_BYTES >> 30} GiB"
            + (" (written by an earlier run)" if sec.get("reused") else f", written in {gen_s:.0f} s") + ".",
            "",
            "| exporter | wall time (s) | CPU time (s) | peak RSS (GiB) | output (GiB) | result |",
            "|---|---:|---:|---:|---:|---|",
        ]
        lines += [f"| {label} | {_row_cells(r)} |" for label, r in sec["rows"]]
    lines += ["", "Reproduce: `make bench-export` (`python benchmarks/bench_export.py`).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
