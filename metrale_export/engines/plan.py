"""The engine build as a plan: what each engine is, whether it can be reused, and what goes away.

``plan_build`` is a pure function of what was read before it (the source graph's facts, the
backend's name and version, the previous manifest's engine entries and the sha256 of the engine
files on disk). It decides everything a build decides (the lowering, each profile's formats and
optimization profiles, every key, which engines are reused, which lowered graphs are written,
which files of the previous build are removed) and raises every refusal before anything is built.
The executor (``build.build_engines``) only carries the plan out.

Invariants:
- nothing here imports TensorRT, reads or writes a file: source.py's ``resolve_source`` reads the
  source before it;
- a refusal names every projection and profile it concerns, at once;
- an engine is reused only when its key is unchanged and its file still has the recorded sha256;
- every engine of one plan uses one backend, one lowering and one policy.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


from .. import contract
from ..hashing import sha256_file
from ..errors import OK, Check, InputError
from ..invariance import engine_promise
from ..preflight import PLUGINS_NEED_PLUGIN_LOWERING
from . import backends, lowering as _lowering, policy as _policy, resources as _resources
from .policy import ENGINE_WEIGHTS, FLOAT_WEIGHTS
from .profiles import (DEFAULT_MAX_CONTEXT, DEFAULT_PROFILES, ProfileShapes, RowRange, fit_profiles,  # noqa: F401
                       UsageConflict, optimization_profiles, parse_profiles, resolve_max_context)
from .source import Source

LOWERINGS = ("plugin", "qdq")


@dataclass
class BuildOptions:
    """Everything a build depends on besides the source graph."""

    # None: the default profiles (profiles.DEFAULT_PROFILES) cut to the engines' context.
    profiles: tuple[RowRange, ...] | None
    policy: _policy.Policy
    backend: str | None = None  # None: tensorrt if it imports, else tensorrt-rtx
    lowering: str | None = None  # None: plugin with --plugins, else qdq
    plugins: Path | None = None
    timing_cache: Path | None = None  # None: <out>/timing.cache (tensorrt only)
    max_context: int | None = None  # None: min(DEFAULT_MAX_CONTEXT, the model's positions)
    rtx_targets: tuple[tuple[int, int], ...] = (backends.DEFAULT_RTX_TARGET,)
    # checkpoint: float weights exact in bfloat16 are stored (and the MatMuls on them run) in
    # bfloat16 (engines/weights.py); float32: as the export has them.
    float_weights: str = "checkpoint"
    engine_weights: str = "shared"  # policy.ENGINE_WEIGHTS
    verbose: bool = False


# --- the decisions, one pure function each ---------------------------------------------------

def choose_backend(requested: str | None, found: dict[str, str | None]) -> str:
    """The backend to build with: the one asked for, else tensorrt if it imports, else tensorrt-rtx."""
    if requested is not None:
        return requested
    name = next((n for n in backends.BACKENDS if found.get(n)), None)
    if name is None:
        raise backends.BackendMissing(backends.missing_message(None))
    return name


def lowering_check(backend: str, lowering: str | None, plugins: Path | None, has_ops: bool) -> Check:
    """Whether ``--lowering`` and ``--plugins`` can go together with ``backend`` for a graph with
    (``has_ops``) or without metrale nodes: every reason they cannot."""
    if lowering is not None and lowering not in LOWERINGS:  # nothing else can be judged
        return Check.of([f"--lowering {lowering!r}: expected one of {', '.join(LOWERINGS)}"])
    chosen = lowering or ("plugin" if plugins else "qdq")
    if chosen != "plugin":
        return Check.of([PLUGINS_NEED_PLUGIN_LOWERING if plugins is not None else None])
    return _plugin_lowering_check(backend, plugins, has_ops)


def _plugin_lowering_check(backend: str, plugins: Path | None, has_ops: bool) -> Check:
    """Whether the plugin lowering can build ``backend``'s engines of a graph with (``has_ops``) or
    without metrale nodes."""
    if not has_ops:
        return Check.of([])
    return Check.of([
        ("--lowering plugin with --backend tensorrt-rtx: TensorRT-RTX builds here without a "
         "GPU and its Python API has no IPluginV3 layers, so the metrale plugins cannot take "
         "part; use --lowering qdq, or --backend tensorrt on a GPU machine")
        if backend == "tensorrt-rtx" else None,
        ("--lowering plugin needs --plugins LIB (the metrale plugin library, "
         "libmetrale_plugins.so) for the graph's metrale nodes; or use --lowering qdq")
        if plugins is None else None,
    ])


def resolve_lowering(backend: str, lowering: str | None, plugins: Path | None, has_ops: bool) -> str:
    """The lowering to use: the one asked for, else plugin when --plugins is given, else qdq;
    ``UsageConflict`` naming the option to blame for a ``lowering_check``'s refusal."""
    check = lowering_check(backend, lowering, plugins, has_ops)
    if not check.ok:
        raise UsageConflict(check.message, "--lowering" if lowering else "--plugins")
    return lowering or ("plugin" if plugins else "qdq")


def kernel_limits_check(ops) -> Check:
    """Whether the CUDA kernels behind the plugins serve every metrale node's shape
    (``contract.kernel_k_check``): a reason for each node they do not."""
    return Check.of(f"node {op.key} ({op.op_type}): {why}" for op in ops
                    for why in contract.kernel_k_check(contract.op(op.op_type).kind, op.k).reasons)


def check_kernel_limits(ops) -> None:
    """Raise ``InputError`` naming every metrale node whose shape the CUDA kernel behind its plugin
    does not serve (``kernel_limits_check``): refused here, never only in the engine."""
    check = kernel_limits_check(ops)
    if not check.ok:
        raise InputError(f"{check.message}; build it with --lowering qdq, or export it with another weight format")


def resolve_profiles(profiles: tuple[RowRange, ...] | None, max_context: int) -> tuple[RowRange, ...]:
    """The profiles to build: the user's, or the default ones cut to ``max_context``."""
    if profiles is not None:
        return profiles
    return fit_profiles(parse_profiles(DEFAULT_PROFILES), max_context)


# The qdq lowering stores the weights of the ops with FP8 (e4m3fn) inputs as FLOAT8E4M3FN
# (docs/engines.md, Lowerings): W8A8Proj's weights, W4A4Proj's block scales and so its codes.
_FP8_STORED = tuple(t for t, s in contract.OPS.items() if s.fp8_inputs and s.grouped_of is None)
_FP8_MIN_TARGET = (8, 9)  # TensorRT-RTX: "Cannot compile for target(s) sm86 ... fp8_e4m3"


def rtx_targets_check(backend: str, lowering: str, targets, op_types) -> Check:
    """Whether the TensorRT-RTX targets can hold the qdq graph's FP8 weights, for a graph of
    ``op_types``: one reason naming every target too old and every op type it concerns."""
    if backend != "tensorrt-rtx" or lowering != "qdq":
        return OK
    fp8 = sorted({t for t in op_types if t in _FP8_STORED})
    old = [f"{a}.{b}" for a, b in targets if (a, b) < _FP8_MIN_TARGET]
    return Check.of([
        f"--rtx-target {', '.join(old)}: the qdq lowering stores {' and '.join(fp8)} weights as FP8 "
        f"(e4m3), which TensorRT-RTX compiles for SM 8.9 and later only; use --rtx-target 8.9 or 12.0"
        if fp8 and old else None])


def check_rtx_targets(backend: str, lowering: str, targets, op_types) -> None:
    """Refuse, before any build, TensorRT-RTX targets that cannot hold the qdq graph's FP8 weights."""
    check = rtx_targets_check(backend, lowering, targets, op_types)
    if not check.ok:
        raise UsageConflict(check.message, "--rtx-target")


def profile_formats(policy: _policy.Policy, ops, profiles) -> list[dict[str, str]]:
    """Each profile's formats (op key -> activation format); every refusal at once as InputError."""
    out = []
    refused: dict = {}  # (op, reason) -> ranges: one line per op however many profiles refuse it
    for rows in profiles:
        formats, refusals = _policy.choose_formats(policy, ops, rows)
        for op, reason in refusals:
            refused.setdefault((op, reason), []).append(rows)
        out.append(formats)
    if refused:
        lines = _policy.describe_refusals(refused, profiles)
        shown = "\n  ".join(lines[:8]) + (f"\n  ... and {len(lines) - 8} more" if len(lines) > 8 else "")
        raise InputError(
            f"--activation-quantization {policy.describe()}: {len(lines)} projection(s) "
            f"cannot run the chosen format:\n  {shown}"
        )
    return out


def digest(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def graph_file(lowering: str, formats: dict, source_sha: str, float_weights: str = "checkpoint") -> str:
    """The lowered graph's file (relative to the engine directory): one per distinct formats."""
    key = digest({"lowering": lowering, "formats": formats, "v": _lowering.LOWERING_VERSION,
                  "source": source_sha, "float_weights": float_weights})[:16]
    return f"onnx/{lowering}-{key}.onnx"


def engine_file(rows: RowRange) -> str:
    return f"rows-{rows.label}.engine"


# --- the plan --------------------------------------------------------------------------------

@dataclass(frozen=True)
class EngineStep:
    """One engine: its rows, formats, optimization profiles, key, files, and what to do."""

    rows: RowRange
    formats: dict
    shapes: tuple[ProfileShapes, ...]
    key: str
    file: str  # relative to the engine directory
    graph: str  # the lowered graph it is built from, relative to the engine directory
    reuse: dict | None = None  # the previous manifest's entry when the engine is unchanged

    @property
    def action(self) -> str:
        return "skip" if self.reuse is not None else "build"


@dataclass(frozen=True)
class BuildPlan:
    """Everything one build does, decided before anything is built."""

    source: Source
    out_dir: Path
    backend: str
    backend_version: str
    lowering: str
    targets: tuple[str, ...]
    promised: bool
    promise_reason: str
    row_invariance: dict  # the engine manifest's entry (invariance.engine_promise)
    max_context: int
    float_weights: str
    policy: str  # the policy as the user can write it again
    plugins: Path | None
    plugin_sha: str | None
    timing_cache: Path | None
    steps: tuple[EngineStep, ...]
    removals: tuple[str, ...]  # files of the previous build (relative) that no step keeps
    engine_weights: str = "shared"
    estimate: _resources.Estimate | None = None  # peak memory and disk of the engines to build

    @property
    def to_build(self) -> tuple[EngineStep, ...]:
        return tuple(s for s in self.steps if s.reuse is None)

    @property
    def graphs(self) -> dict[str, dict]:
        """Lowered graph file -> formats, for the engines that are built."""
        return {s.graph: s.formats for s in self.to_build}


def reusable(previous: dict | None, file: str, on_disk_sha: str | None) -> bool:
    """Whether a previous entry with the same key still describes the file on disk."""
    return bool(previous) and previous.get("file") == file and on_disk_sha is not None \
        and on_disk_sha == previous.get("sha256")


def removals(previous: list[dict], steps: tuple[EngineStep, ...], lowered_on_disk: list[str]) -> tuple[str, ...]:
    """Files of the previous build that no step keeps: engines of ranges no longer asked for, and
    lowered graphs (with their ``.data``) that no engine of this plan uses."""
    kept = {s.file for s in steps} | {s.graph for s in steps}
    out = []
    for entry in previous:
        rel = entry.get("file")
        if rel and rel not in kept and rel not in out:
            out.append(rel)
    for rel in lowered_on_disk:
        if lowered_graph_of(rel) not in kept and rel not in out:
            out.append(rel)
    return tuple(out)


def lowered_graph_of(rel: str) -> str:
    """The lowered graph a file under ``onnx/`` belongs to: itself, its weights file
    (``.onnx.data``) or the header of its shared-weights engines (``.shared.onnx``)."""
    rel = rel.removesuffix(".data")
    return rel.removesuffix(".shared.onnx") + ".onnx" if rel.endswith(".shared.onnx") else rel


def check_engine_weights(mode: str, backend: str, cuda_driver: bool) -> None:
    """Refuse an ``--engine-weights`` the backend cannot build here, before anything is built."""
    if mode not in ENGINE_WEIGHTS:
        raise UsageConflict(f"--engine-weights {mode!r}: expected one of {', '.join(ENGINE_WEIGHTS)}",
                            "--engine-weights")
    if mode == "stripped" and backend == "tensorrt-rtx" and not cuda_driver:
        raise UsageConflict(
            "--engine-weights stripped: TensorRT-RTX 1.7 builds refittable (REFIT, STRIP_PLAN) engines only "
            "with a CUDA driver (without one its compiler stops: 'MyelinCheckException: graph_jit.cpp:278: "
            "CHECK(status == CUDA_SUCCESS)'); use --engine-weights shared (one copy of the weights, bound "
            "as engine inputs) or build on a machine with an NVIDIA GPU", "--engine-weights")


def plan_build(source: Source, out_dir: Path, options: BuildOptions, backend: tuple[str, str],
               previous: list[dict] = (), engine_sha: Callable[[str], str | None] = lambda rel: None,
               lowered_on_disk: list[str] = (), cuda_driver: bool = False) -> BuildPlan:
    """The plan of a build; raises ``UsageConflict``/``InputError`` for anything refused.

    ``backend`` is (name, version) of the activated backend; ``previous`` the engine entries of the
    directory's manifest; ``engine_sha(rel)`` the sha256 of an engine file on disk (None if absent);
    ``lowered_on_disk`` the files under ``onnx/`` now; ``cuda_driver`` whether a CUDA driver loads
    (``backends.cuda_driver``: TensorRT-RTX needs one for stripped engines).
    """
    name, version = backend
    chosen = check_options(source, options, name, cuda_driver)
    max_context = resolve_max_context(options.max_context, source.model_max_positions,
                                      source.onnx_path.parent / "manifest.json")
    profiles = resolve_profiles(options.profiles, max_context)
    all_formats = profile_formats(options.policy, source.ops, profiles)
    all_shapes = [optimization_profiles(source.inputs, rows, max_context) for rows in profiles]
    plugin_sha = _plugin_sha(options.plugins, chosen)
    is_rtx = name == "tensorrt-rtx"
    timing_cache = None
    if not is_rtx:  # TensorRT-RTX times no tactics when it builds on the CPU
        timing_cache = Path(options.timing_cache) if options.timing_cache else Path(out_dir) / "timing.cache"
    targets = tuple(f"{a}.{b}" for a, b in options.rtx_targets) if is_rtx else ("build machine",)
    # The policy and lowering may promise it; the ops left to TensorRT narrow it (invariance.py).
    row_invariance = engine_promise(source.audit, *_policy.row_invariance(options.policy, chosen))
    key_parts = {"source": source.sha256, "lowering": chosen, "lowering_version": _lowering.LOWERING_VERSION,
                 "backend": f"{name} {version}", "targets": list(targets), "plugins": plugin_sha,
                 "float_weights": options.float_weights, "engine_weights": options.engine_weights}
    steps = engine_steps(source, options.float_weights, zip(profiles, all_formats, all_shapes), key_parts,
                         previous, engine_sha)
    to_build = [s for s in steps if s.reuse is None]
    estimate = _resources.estimate_build(
        options.engine_weights, name, source.weight_bytes, source.largest_op_weights,
        engines=len(to_build), graphs=len({s.graph for s in to_build})) if to_build else None
    return BuildPlan(
        source=source, out_dir=Path(out_dir), backend=name, backend_version=version, lowering=chosen,
        targets=targets, promised=row_invariance["promised"], promise_reason=row_invariance["reason"],
        row_invariance=row_invariance, max_context=max_context, float_weights=options.float_weights,
        policy=options.policy.describe(), plugins=options.plugins, plugin_sha=plugin_sha,
        timing_cache=timing_cache, steps=steps,
        removals=removals(list(previous), steps, list(lowered_on_disk)),
        engine_weights=options.engine_weights, estimate=estimate,
    )


def check_options(source: Source, options: BuildOptions, backend: str, cuda_driver: bool) -> str:
    """The lowering to use after every refusal of the options for this source and backend."""
    if options.float_weights not in FLOAT_WEIGHTS:
        raise UsageConflict(f"--float-weights {options.float_weights!r}: expected one of "
                            f"{', '.join(FLOAT_WEIGHTS)}", "--float-weights")
    check_engine_weights(options.engine_weights, backend, cuda_driver)
    chosen = resolve_lowering(backend, options.lowering, options.plugins, bool(source.ops))
    check_rtx_targets(backend, chosen, options.rtx_targets, [op.op_type for op in source.ops])
    if chosen == "plugin":
        check_kernel_limits(source.ops)
    return chosen


def _plugin_sha(plugins: Path | None, lowering: str) -> str | None:
    """The plugin library's sha256 (part of each key) when the plugin lowering uses it."""
    if plugins is None or lowering != "plugin":
        return None
    if not Path(plugins).is_file():
        raise UsageConflict(f"{plugins}: no such file", "--plugins")
    return sha256_file(plugins)


def engine_steps(source: Source, float_weights: str, profiles, key_parts: dict, previous,
                 engine_sha: Callable[[str], str | None]) -> tuple[EngineStep, ...]:
    """One step per (rows, formats, shapes) of ``profiles``: its key (``key_parts`` and the
    profile's own), and the previous entry it reuses when that key is unchanged and its file is
    intact."""
    by_key = {e.get("key"): e for e in previous if isinstance(e, dict)}
    steps = []
    for rows, formats, shapes in profiles:
        key = digest({**key_parts, "rows": [rows.lo, rows.hi], "profiles": [s.as_json() for s in shapes],
                      "formats": formats})
        file = engine_file(rows)
        old = by_key.get(key)
        reuse = old if reusable(old, file, engine_sha(file) if old else None) else None
        graph = reuse["onnx"] if reuse and reuse.get("onnx") else \
            graph_file(key_parts["lowering"], formats, source.sha256, float_weights)
        steps.append(EngineStep(rows, formats, shapes, key, file, graph, reuse))
    return tuple(steps)
