"""A whole routed-MoE layer at decode, eager and in a CUDA graph, beside its memory bound (issue 22).

The layer as the export runs it, timed eager and replayed in a CUDA graph, with the memory bound
measured in the same run.

    python -m benchmarks.bench_moe_layer [--out DIR] [--shapes 30B-A3B,...] [--formats w4a16,...]
                                         [--m 1,4,16,64] [--profile] [--variant NAME[,NAME...]]

The layer (SparseMoE.forward of a quantized export, its routed experts; the shared expert of
Qwen3-Next is not part of it): the router gate through ``metrale::float_proj`` (bf16 weight
[E, H], what ``use_float_ops`` runs), ``metrale::router`` (softmax, top-k, renormalized), the
fused ``gate_up_proj`` grouped op (per expert the rows [gate; up], N = 2I, combine=0), the SwiGLU
on its two halves (``silu(gate) * up``, GroupedExperts.forward) and ``down_proj`` with the
combine; ``unfused``: gate and up as two grouped ops (the export of experts that cannot fuse).
Every op is the torch op on its CUDA kernel (metrale_export.ops.cuda).

Routing under test: the router picks exactly the ids of ``bench_moe.routing`` (uniform, or Zipf
s = 1.2): the gate weight is one-hot (expert e reads x's column e), and x's columns of a row's
chosen experts hold logits 8, 7.5, 7, ... over noise in [-1, 1] (``router_input``); the router's
ids are checked against the routing once per row of the table (``router_ids_match``).

Timing, in the same run: ``eager``: REPS layer calls launched back to back from Python between two
CUDA events, per call, median of REPLAYS; ``graph``: the same REPS calls captured once into a CUDA
graph, per call, median of REPLAYS replays (bench_kernels.time_graph). Both rotate over layer
copies (weights and router) whose touched expert bytes at M = 1 exceed 2.2x the 60 MB L2, and over
REPS routings, so no replay reads its experts from L2. Bound: the distinct experts' gate, up and
down bytes (codes and scales, mean over the routings) over the device-to-device copy bandwidth
measured in this run (read + write, bench_kernels.copy_bandwidth); the target is graph fused /
bound <= 1.25. ``host_sync``: one eager call under ``torch.cuda.set_sync_debug_mode("error")``
(a synchronizing torch call raises); a capture that fails is reported in the row (an engine could
not capture the layer either) with the stages that fail alone. Writes
``moe-layer-YYYYMMDD-HHMM-<commit>.md`` / ``.json`` into ``--out`` (default $OUT or
benchmarks/results), rewritten after every shape and format.

``--profile``: per row, one torch.profiler pass over PROFILE_REPLAYS replays of the fused layer's
graph (REPS calls each; eager calls where the profiler sees no kernel in the replays, or the capture
failed), and a second table (and ``profile`` in the row's JSON): per kernel name, its device
microseconds per layer call and its launches per layer call, with the sum of the kernels' durations
(``busy``) and the first start to the last end (``span``) per call; span - busy is the device idle
between the kernels. ``--variant NAME``: each row measured a second time with
``METRALE_MOE_DECODE=NAME`` (read by the grouped launchers at each call, so at capture; the path
column shows ``path (NAME)``), in the same run; a comma list (``--variant wide,pdl,grid,all``)
measures each row once per name after the default (DECODE_VARIANTS: base = the kernels before the
variants, wide, pdl = wide + PDL within each grouped op, grid = wide + the sorted path's resident
grid, all = the three; the default, unset, is auto: wide, PDL on the slot path, the grid on the
sorted path for W4A16 and W8A8; ``fp8``: METRALE_MOE_FP8=1 instead, the W8A8 rows on the grouped FP8
wgmma kernel, moeProj/moeFp8Kernel.cuh, skipped for the other formats).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
from contextlib import contextmanager
from pathlib import Path

import torch

from benchmarks.bench_kernels import (REPLAYS, _commit, _copies, bench_parser, capture_graph, copy_bandwidth, require_cuda,
                                      time_graph)
from benchmarks.bench_moe import FORMATS, M_DECODE, REPS, ROUTINGS, SHAPES, SLOT_MAX, Proj, routing

LOGIT_TOP, LOGIT_STEP = 8.0, 0.5  # a row's chosen experts' logits: 8, 7.5, 7, ... (noise: [-1, 1])
TARGET = 1.25
PROFILE_REPLAYS = 3  # graph replays (of REPS layer calls each) under the profiler
VARIANT_ENV = "METRALE_MOE_DECODE"  # the grouped launchers' decode variant (moeProj/moeProjKernel.cuh)
DECODE_VARIANTS = ("base", "wide", "pdl", "grid", "all", "fp8")  # its values (moeDecodeVariant), and fp8:
# METRALE_MOE_FP8=1, the grouped W8A8 on the FP8 wgmma kernel (moeProj/moeFp8Kernel.cuh; W8A8 rows only)
OTHER_VARIANT_ENVS = {"fp8": ("METRALE_MOE_FP8", "1")}


def router_weight(e: int, h: int, device="cuda") -> torch.Tensor:
    """The one-hot router gate [E, H] bf16: expert e's logit is x's column e."""
    if e > h:
        raise ValueError(f"router_weight: {e} experts need a hidden size >= {e}, found {h}")
    w = torch.zeros(e, h, dtype=torch.bfloat16, device=device)
    w[torch.arange(e), torch.arange(e)] = 1.0
    return w


def router_input(ids: torch.Tensor, h: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """x [M, H] bf16 whose logits through ``router_weight`` rank row r's experts ``ids[r]`` first, in
    that order (LOGIT_TOP - j * LOGIT_STEP for slot j), every other column noise in [-1, 1]."""
    m, k = ids.shape
    if LOGIT_TOP - (k - 1) * LOGIT_STEP <= 1.0:
        raise ValueError(f"router_input: top_k={k} leaves the last chosen logit within the noise")
    x = torch.rand(m, h, generator=generator, device=ids.device) * 2 - 1
    top = LOGIT_TOP - LOGIT_STEP * torch.arange(k, device=ids.device, dtype=torch.float32)
    x.scatter_(1, ids.to(torch.int64), top.expand(m, k))
    return x.to(torch.bfloat16)


def distinct_experts(ids: torch.Tensor) -> int:
    """How many different experts the routing ``ids`` [M, top_k] touches."""
    return int(torch.unique(ids).numel())


def bound_seconds(distinct: float, expert_bytes: int, copy_tbs: float) -> float:
    """The memory bound of one layer call: the distinct experts' bytes at the copy bandwidth
    (TB/s, read + write, as bench_kernels.copy_bandwidth measures it and bench_moe divides)."""
    return distinct * expert_bytes / (copy_tbs * 1e12)


def layer_copies(expert_bytes: int, top_k: int) -> int:
    """Layer copies to rotate over so that the experts one M = 1 call touches exceed 2.2x the L2."""
    return _copies(expert_bytes * top_k)


def path_of(m: int, top_k: int) -> str:
    return "slots" if m * top_k <= SLOT_MAX else "sorted"


class Layer:
    """One MoE layer's routed experts in one format: router gate, fused gate|up, gate and up, down."""

    def __init__(self, fmt: str, h: int, inter: int, e: int, top_k: int, seed: int):
        self.h, self.e, self.top_k = h, e, top_k
        self.router_w = router_weight(e, h)
        self.gate_up = Proj(fmt, e, 2 * inter, h, seed)
        self.gate, self.up = Proj(fmt, e, inter, h, seed + 1), Proj(fmt, e, inter, h, seed + 2)
        self.down = Proj(fmt, e, h, inter, seed + 3)
        self.expert_bytes = self.gate_up.expert_bytes + self.down.expert_bytes

    def route(self, x):
        logits = torch.ops.metrale.float_proj(x, self.router_w, None, self.e, self.h, "moe", "bench.mlp.gate")
        return torch.ops.metrale.router(logits, self.e, self.top_k, 1, "moe", "bench.mlp.router")

    def swiglu_in(self, x, ids, fused: bool):
        if fused:
            gate, up = self.gate_up.grouped(x, ids).chunk(2, dim=-1)
        else:
            gate, up = self.gate.grouped(x, ids), self.up.grouped(x, ids)
        return torch.nn.functional.silu(gate) * up

    def forward(self, x, fused: bool = True):
        ids, w = self.route(x)
        return self.down.grouped(self.swiglu_in(x, ids, fused), ids, w)

    def stages(self, x):
        """Each op of the fused layer alone (which one fails a capture)."""
        ids, w = self.route(x)
        act = self.swiglu_in(x, ids, True)
        gu = self.gate_up.grouped(x, ids)
        logits = torch.ops.metrale.float_proj(x, self.router_w, None, self.e, self.h, "moe", "bench.mlp.gate")
        return {"float_proj": lambda: torch.ops.metrale.float_proj(x, self.router_w, None, self.e, self.h, "moe", "g"),
                "router": lambda: torch.ops.metrale.router(logits, self.e, self.top_k, 1, "moe", "r"),
                "gate_up": lambda: self.gate_up.grouped(x, ids),
                "swiglu": lambda: torch.nn.functional.silu(gu[..., :gu.shape[-1] // 2]) * gu[..., gu.shape[-1] // 2:],
                "down": lambda: self.down.grouped(act, ids, w)}


def time_eager(calls, reps: int = REPS, replays: int = REPLAYS) -> float:
    """Median seconds of one call when ``calls(0..reps-1)`` are launched back to back from Python."""
    for i in range(3):
        calls(i)
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for i in range(reps):
            calls(i)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / reps)
    return statistics.median(times)


def host_sync(call) -> str | None:
    """None, or the error a synchronizing torch call raised in ``call()`` under sync debug mode."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        call()
        return None
    except RuntimeError as exc:
        return f"{type(exc).__name__}: {exc}"[:300]
    finally:
        torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()


def try_graph(calls, probe=None) -> tuple[float | None, str | None]:
    """(time_graph seconds, None), or (None, why the capture failed: the error and the stages of
    ``probe()`` (name -> call) that fail a capture alone)."""
    try:
        return time_graph(calls, reps=REPS), None
    except RuntimeError as exc:
        torch.cuda.synchronize()
        why = f"{type(exc).__name__}: {exc}"[:300]
    failing = []
    for name, stage in (probe() if probe else {}).items():
        try:
            time_graph(lambda i, s=stage: s(), reps=1, replays=1)
        except RuntimeError:
            torch.cuda.synchronize()
            failing.append(name)
    return None, why + (f" (failing alone: {', '.join(failing)})" if failing else "")


def router_ids_match(layer: Layer, xs: list, routes: list) -> bool:
    """The router picks exactly the routing under test, in its order (checked outside the timing)."""
    return all(torch.equal(layer.route(x)[0], ids) for x, (ids, _) in zip(xs, routes))


def measure_row(layers: list, m: int, kind: str, copy_tbs: float, profile: bool = False) -> dict:
    """One (M, routing) row over the rotated layer copies (``profile``: with profile_layer's kernels
    of the fused layer under ``profile``)."""
    first = layers[0]
    routes = [routing(m, first.e, first.top_k, kind, 100 * m + r) for r in range(REPS)]
    g = torch.Generator(device="cuda").manual_seed(m)
    xs = [router_input(ids, first.h, g) for ids, _ in routes]

    def calls(fused):
        return lambda i: layers[i % len(layers)].forward(xs[i % REPS], fused)

    distinct = statistics.mean(distinct_experts(ids) for ids, _ in routes)
    bound = bound_seconds(distinct, first.expert_bytes, copy_tbs)
    row = dict(m=m, routing=kind, path=path_of(m, first.top_k), distinct=distinct, bound_us=bound * 1e6,
               router_gate_us=bound_seconds(1, first.router_w.numel() * 2, copy_tbs) * 1e6,
               router_ids_match=router_ids_match(first, xs, routes), host_sync=host_sync(lambda: first.forward(xs[0])))
    row["eager_us"] = time_eager(calls(True)) * 1e6
    for key, fused in (("graph_us", True), ("graph_unfused_us", False)):
        t, why = try_graph(calls(fused), lambda: first.stages(xs[0]))
        row[key] = None if t is None else t * 1e6
        if why:
            row[f"{key[:-3]}_error"] = why
    if row["graph_us"] is not None:
        row.update(vs_bound=row["graph_us"] / row["bound_us"], eager_over_graph=row["eager_us"] / row["graph_us"])
    if profile:
        try:
            row["profile"] = profile_layer(calls(True))
        except (RuntimeError, ValueError) as exc:  # the timing rows stand without it
            torch.cuda.synchronize()
            row["profile_error"] = f"{type(exc).__name__}: {exc}"[:300]
    return row


def short_kernel_name(name: str, width: int = 90) -> str:
    """A kernel's demangled name without ``void``, its argument list, ``metrale::`` and
    ``(anonymous namespace)::``, cut to ``width`` characters (the template arguments stay: they name
    the tier and the policy)."""
    name = name.strip()
    if name.startswith("void "):
        name = name[5:]
    for prefix in ("(anonymous namespace)::", "metrale::"):
        name = name.replace(prefix, "")
    depth = 0
    for i, ch in enumerate(name):
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0 and i > 0:
            name = name[:i].rstrip()
            break
    return name if len(name) <= width else name[:width - 3] + "..."


def device_events(events) -> list[tuple[str, float, float]]:
    """(name, start us, end us) of the device activities (kernels, memcpy, memset) among torch.profiler's
    events (``prof.events()``: FunctionEvent with ``device_type``, ``name``, ``time_range``)."""
    cuda = torch.autograd.DeviceType.CUDA
    return [(e.name, float(e.time_range.start), float(e.time_range.end)) for e in events
            if getattr(e, "device_type", None) == cuda]


def kernel_profile(kernels: list[tuple[str, float, float]], calls: int, source: str) -> dict:
    """Per kernel name (short_kernel_name): device us per layer call and launches per call over
    ``calls`` layer calls, largest first; ``busy_us``: the kernels' durations per call; ``span_us``:
    the first start to the last end per call."""
    if calls < 1:
        raise ValueError(f"kernel_profile: calls must be >= 1, found {calls}")
    if not kernels:
        raise ValueError(f"kernel_profile: no device activity recorded ({source})")
    per: dict[str, list[float]] = {}
    for name, start, end in kernels:
        if end < start:
            raise ValueError(f"kernel_profile: {name} ends ({end}) before it starts ({start})")
        per.setdefault(short_kernel_name(name), []).append(end - start)
    busy = sum(sum(d) for d in per.values())
    span = max(e for _, _, e in kernels) - min(s for _, s, _ in kernels)
    rows = [dict(name=n, us=sum(d) / calls, launches=len(d) / calls, share=sum(d) / busy if busy > 0 else 0.0)
            for n, d in per.items()]
    rows.sort(key=lambda r: (-r["us"], r["name"]))
    return dict(source=source, calls=calls, busy_us=busy / calls, span_us=span / calls,
                launches=len(kernels) / calls, kernels=rows)


def profile_layer(calls, reps: int = REPS, replays: int = PROFILE_REPLAYS) -> dict:
    """kernel_profile of ``replays`` graph replays of ``calls(0..reps-1)``, or of the same calls
    eager where the capture fails or the profiler records no device activity in the replays."""
    from torch.profiler import ProfilerActivity, profile

    def run(body):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            body()
            torch.cuda.synchronize()
        return device_events(prof.events())

    for i in range(3):
        calls(i)
    run(lambda: calls(0))  # the profiler's tracing up before the graph is instantiated (discarded)
    kernels = []
    try:
        g = capture_graph(calls, reps)
        kernels = run(lambda: [g.replay() for _ in range(replays)])
        del g
    except RuntimeError:
        torch.cuda.synchronize()
    if kernels:
        return kernel_profile(kernels, reps * replays, "graph")
    kernels = run(lambda: [calls(i) for _ in range(replays) for i in range(reps)])
    return kernel_profile(kernels, reps * replays, "eager")


@contextmanager
def decode_variant(name: str | None):
    """METRALE_MOE_DECODE=name (None: unset; OTHER_VARIANT_ENVS' names their own variable) for the
    block, restored after."""
    env, value = OTHER_VARIANT_ENVS.get(name, (VARIANT_ENV, name))
    old = os.environ.get(env)
    if value is None:
        os.environ.pop(env, None)
    else:
        os.environ[env] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(env, None)
        else:
            os.environ[env] = old


def bench_format(shape: str, fmt: str, m_values, copy_tbs: float, profile: bool = False,
                 variants=(None,)) -> list[dict]:
    h, inter, e, top_k = SHAPES[shape]
    probe = Layer(fmt, h, inter, e, top_k, 1)
    layers = [probe] + [Layer(fmt, h, inter, e, top_k, 10 * c + 1) for c in range(1, layer_copies(probe.expert_bytes, top_k))]
    rows = []
    for m in m_values:
        for kind in ROUTINGS:
            for variant in variants:
                if variant == "fp8" and fmt != "w8a8":
                    continue  # the FP8 tier is W8A8's
                with decode_variant(variant):
                    row = dict(shape=shape, fmt=fmt, layers=len(layers), expert_bytes=probe.expert_bytes,
                               variant=variant, **measure_row(layers, m, kind, copy_tbs, profile))
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def _us(v) -> str:
    return "capture failed" if v is None else f"{v:.1f}"


def _ratio(v) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def _path(r: dict) -> str:
    return r["path"] + (f" ({r['variant']})" if r.get("variant") else "")


def table(rows: list, device: str, commit: str, copy_tbs: float) -> list[str]:
    lines = [f"# Whole MoE layer at decode, eager and CUDA graph, {device}, commit {commit}", "",
             f"copy bandwidth (read + write) measured in this run: {copy_tbs:.2f} TB/s. bound: the distinct experts' "
             f"gate + up + down bytes / that bandwidth; target graph fused / bound <= {TARGET}. The layer: float_proj "
             "router gate, router, gate_up (or gate, up), SwiGLU, down with the combine; per call, median. router gate us: "
             "the router gate's bf16 [E, H] weight at that bandwidth (read every call, not in the bound).", "",
             "| shape | format | M | routing | path | distinct experts | bound us | eager fused us | graph fused us | "
             "graph unfused us | graph fused / bound | eager / graph | router gate us | router ids | host sync |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['fmt']} | {r['m']} | {r['routing']} | {_path(r)} | {r['distinct']:.1f} | "
                     f"{r['bound_us']:.1f} | {r['eager_us']:.1f} | {_us(r['graph_us'])} | {_us(r['graph_unfused_us'])} | "
                     f"{_ratio(r.get('vs_bound'))} | {_ratio(r.get('eager_over_graph'))} | {r['router_gate_us']:.1f} | "
                     f"{'ok' if r['router_ids_match'] else 'DIFFER'} | {'none' if r['host_sync'] is None else 'SYNCS'} |")
    errors = [f"- {r['shape']} {r['fmt']} M={r['m']} {r['routing']}: {k}: {r[k]}" for r in rows
              for k in ("host_sync", "graph_error", "graph_unfused_error") if r.get(k)]
    return lines + ([""] + errors if errors else [])


def profile_table(rows: list) -> list[str]:
    """The --profile table: per row that has a ``profile`` (kernel_profile), a line with the sum of its
    kernels and the span per call, then one line per kernel name, largest first."""
    failed = [f"- {r['shape']} {r['fmt']} M={r['m']} {r['routing']} {_path(r)}: profile_error: {r['profile_error']}"
              for r in rows if r.get("profile_error")]
    rows = [r for r in rows if r.get("profile")]
    if not rows and not failed:
        return []
    lines = ["", "## Device time per kernel (torch.profiler, --profile)", "",
             f"The fused layer, {PROFILE_REPLAYS} graph replays of {REPS} calls each (source eager: the same calls "
             "launched eager, where the profiler saw no kernel in the replays or the capture failed); per layer call. "
             "all kernels: the sum of the kernels' durations, and (span) the first start to the last end; "
             "span - sum is device idle between kernels.", "",
             "| shape | format | M | routing | path | source | kernel | device us per call | launches per call | share |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r["profile"]
        head = f"| {r['shape']} | {r['fmt']} | {r['m']} | {r['routing']} | {_path(r)} | {p['source']} |"
        lines.append(f"{head} all kernels (span {p['span_us']:.1f} us) | {p['busy_us']:.1f} | {p['launches']:.1f} | 1.00 |")
        for k in p["kernels"]:
            lines.append(f"{head} `{k['name']}` | {k['us']:.2f} | {k['launches']:.2f} | {k['share']:.2f} |")
    return lines + ([""] + failed if failed else [])


def write(out: Path, stamp: str, rows: list, copy_tbs: float) -> Path:
    device, commit = torch.cuda.get_device_name(), _commit()
    base = out / f"moe-layer-{stamp}-{commit[:7]}"
    base.with_suffix(".md").write_text("\n".join(table(rows, device, commit, copy_tbs) + profile_table(rows)) + "\n")
    base.with_suffix(".json").write_text(json.dumps(dict(device=device, commit=commit, torch=torch.__version__,
                                                         copy_tbs=copy_tbs, reps=REPS, replays=REPLAYS, rows=rows),
                                                    indent=1))
    return base


def _list(text: str, allowed) -> list:
    items = [type(next(iter(allowed)))(t) for t in text.split(",") if t]
    bad = [i for i in items if i not in allowed]
    if bad:
        raise SystemExit(f"bench_moe_layer: {bad} not among {list(allowed)}")
    return items


def main(argv=None) -> int:
    ap = bench_parser(__doc__)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--m", default=",".join(map(str, M_DECODE)))
    ap.add_argument("--profile", action="store_true", help="per row, the device time and launches of each kernel")
    ap.add_argument("--variant", default=None,
                    help=f"each row also with {VARIANT_ENV}=NAME, for each NAME of a comma list of {DECODE_VARIANTS}")
    args = ap.parse_args(argv)
    shapes, formats = _list(args.shapes, tuple(SHAPES)), _list(args.formats, FORMATS)
    m_values = _list(args.m, M_DECODE)
    variants = (None,) if args.variant is None else (None, *dict.fromkeys(_list(args.variant, DECODE_VARIANTS)))
    require_cuda("bench_moe_layer")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    copy_tbs = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}: copy {copy_tbs:.2f} TB/s", flush=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M")
    rows: list = []
    for shape in shapes:
        for fmt in formats:
            rows += bench_format(shape, fmt, m_values, copy_tbs, args.profile, variants)
            torch.cuda.empty_cache()
            base = write(out, stamp, rows, copy_tbs)
    print(base.with_suffix(".md").read_text())
    print(f"wrote {base}.md and {base}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
