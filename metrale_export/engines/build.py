"""Build one TensorRT engine per row-count profile, with a manifest and skip-if-unchanged.

Steps per profile: the policy picks each op's activation format (``policy``), the graph is lowered
(``lowering``: qdq, or the plugin path's attribute rewrite), and Polygraphy's loaders build it
(the plugin library through TensorRT's registry -> ``NetworkFromOnnxPath`` ->
``CreateConfig``/``CreateConfigRTX`` with the profile's ``Profile`` objects ->
``EngineBytesFromNetwork``).

Invariants:
- engines and ``manifest.json`` are written to a temporary file in the output directory and
  renamed, so a reader never sees half a file;
- an engine is rebuilt only when its key changes: the source ONNX bytes (and external data), the
  row range and its optimization profiles, the formats, the lowering and its version, the backend
  and its version, the targets and the plugin library's bytes;
- every engine of one build uses one backend, one lowering and one policy.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import onnx

from .. import __version__
from ..errors import BuildError, InputError
from ..invariance import audit, engine_promise
from . import backends, cancel, lowering, policy as _policy
from .profiles import DEFAULT_MAX_CONTEXT, ProfileShapes, RowRange, optimization_profiles

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
LOWERINGS = ("plugin", "qdq")


class UsageConflict(InputError):
    """Options that cannot go together; ``param`` names the option to blame (the CLI's hint)."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


@dataclass
class BuildOptions:
    """Everything a build depends on besides the source graph."""

    profiles: tuple[RowRange, ...]
    policy: _policy.Policy
    backend: str | None = None  # None: tensorrt if it imports, else tensorrt-rtx
    lowering: str | None = None  # None: plugin with --plugins, else qdq
    plugins: Path | None = None
    timing_cache: Path | None = None  # None: <out>/timing.cache (tensorrt only)
    max_context: int = DEFAULT_MAX_CONTEXT
    rtx_targets: tuple[tuple[int, int], ...] = (backends.DEFAULT_RTX_TARGET,)
    verbose: bool = False


@dataclass
class Source:
    """The graph to build: an ONNX file, optionally inside an export directory."""

    onnx_path: Path
    export_manifest: dict | None = None
    files: list[Path] = field(default_factory=list)  # the ONNX file and its external data


Progress = Callable[[str, RowRange, dict], None]  # (event, rows, details); events below
EVENTS = ("plan", "skip", "build", "built")


def resolve_lowering(backend: str, lowering: str | None, plugins: Path | None, has_ops: bool):
    """The lowering to use, or ``(None, reason)`` for a usage conflict."""
    if lowering is not None and lowering not in LOWERINGS:
        return None, f"--lowering {lowering!r}: expected one of {', '.join(LOWERINGS)}"
    chosen = lowering or ("plugin" if plugins else "qdq")
    if chosen == "plugin":
        if backend == "tensorrt-rtx" and has_ops:
            return None, (
                "--lowering plugin with --backend tensorrt-rtx: TensorRT-RTX builds here without a "
                "GPU and its Python API has no IPluginV3 layers, so the metrale plugins cannot take "
                "part; use --lowering qdq, or --backend tensorrt on a GPU machine"
            )
        if plugins is None and has_ops:
            return None, (
                "--lowering plugin needs --plugins LIB (the metrale plugin library, "
                "libmetrale_plugins.so) for the graph's metrale nodes; or use --lowering qdq"
            )
    elif plugins is not None:
        return None, "--plugins is only used by --lowering plugin; drop it or choose that lowering"
    return chosen, ""


def resolve_source(path: Path) -> Source:
    """An ONNX file, or an export directory holding ``model.onnx`` and ``manifest.json``."""
    path = Path(path)
    if path.is_dir():
        onnx_path = path / "model.onnx"
        if not onnx_path.is_file():
            raise InputError(f"{path}: expected an export directory with model.onnx, found none")
        manifest = None
        if (path / "manifest.json").is_file():
            try:
                manifest = json.loads((path / "manifest.json").read_text())
            except json.JSONDecodeError as e:
                raise InputError(f"{path / 'manifest.json'}: not valid JSON ({e})") from e
    elif path.is_file():
        onnx_path, manifest = path, None
    else:
        raise InputError(f"{path}: no such ONNX file or export directory")
    try:
        header = onnx.load(str(onnx_path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - onnx raises several types for a bad file
        raise InputError(f"{onnx_path}: not a readable ONNX model ({e})") from e
    files = [onnx_path]
    for tensor in header.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                data = onnx_path.parent / entry.value
                if data not in files:
                    if not data.is_file():
                        raise InputError(
                            f"{onnx_path}: initializer {tensor.name}: external data {data} is missing"
                        )
                    files.append(data)
    return Source(onnx_path, manifest, files)


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _sha256_files(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0" + sha256_file(p).encode())
    return h.hexdigest()


def _write_atomic(path: Path, data: bytes | memoryview) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _input_shapes(model: onnx.ModelProto) -> dict[str, list]:
    init = {t.name for t in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in init:
            continue
        dims = []
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            else:
                dims.append(d.dim_param or None)
        out[vi.name] = dims
    return out


def _key(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _load_previous(out_dir: Path) -> dict:
    path = out_dir / MANIFEST
    if not path.is_file():
        return {}
    try:
        old = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}  # an unreadable manifest only means nothing can be skipped
    return {e.get("key"): e for e in old.get("engines", []) if isinstance(e, dict)}


_loaded_libraries: dict[str, object] = {}


def load_plugin_library(backend: backends.Backend, path: Path) -> None:
    """Register the creators of a plugin library with TensorRT's plugin registry, once a process.

    The metrale library registers nothing when opened; it exports ``getCreators`` for
    ``IPluginRegistry::loadLibrary`` (as ``trtexec --dynamicPlugins`` loads it). Polygraphy's
    ``LoadPlugins`` only opens a library (``ctypes.CDLL``), which would leave the creators
    unregistered, hence this step in its place.
    """
    key = str(Path(path).resolve())
    if key in _loaded_libraries:
        return
    handle = backend.module.get_plugin_registry().load_library(key)
    if handle is None:
        raise BuildError(
            f"--plugins {path}: {backend.describe()} could not load it as a plugin library (expected "
            f"the getCreators entry point of libmetrale_plugins.so)"
        )
    _loaded_libraries[key] = handle  # the registry keeps the creators while the handle lives


def _build_one(backend: backends.Backend, onnx_path: Path, shapes: tuple[ProfileShapes, ...],
               options: BuildOptions, timing_cache: Path | None, use_plugins: bool, monitor=None):
    """The serialized engine of one lowered graph (Polygraphy's loaders); ``monitor``: the
    builder's IProgressMonitor (``cancel.monitor``: Ctrl-C cancels the build)."""
    from polygraphy.backend.trt import (
        CreateConfig, EngineBytesFromNetwork, NetworkFromOnnxPath, Profile,
    )

    trt_profiles = []
    for ps in shapes:
        p = Profile()
        for name, (lo, opt, hi) in ps.shapes.items():
            p.add(name, min=lo, opt=opt, max=hi)
        trt_profiles.append(p)
    if use_plugins:
        load_plugin_library(backend, Path(options.plugins))
    network = NetworkFromOnnxPath(str(onnx_path), strongly_typed=True)
    cache = str(timing_cache) if timing_cache else None
    if backend.is_rtx:
        from polygraphy.backend.tensorrt_rtx import CreateConfigRTX

        config = CreateConfigRTX(profiles=trt_profiles, compute_capabilities=list(options.rtx_targets),
                                 progress_monitor=monitor)
    else:
        config = CreateConfig(profiles=trt_profiles, load_timing_cache=cache, progress_monitor=monitor)
    with warnings.catch_warnings():
        # Polygraphy sets a timing cache even without one; TensorRT-RTX deprecates the call.
        warnings.simplefilter("ignore", DeprecationWarning)
        return EngineBytesFromNetwork(network, config=config, save_timing_cache=cache)()


def build_engines(source_path: Path, out_dir: Path | None, options: BuildOptions,
                  progress: Progress | None = None) -> dict:
    """Build (or reuse) the engines of every profile; return the manifest that was written."""
    progress = progress or (lambda event, rows, details: None)
    source = resolve_source(source_path)
    out_dir = Path(out_dir) if out_dir else source.onnx_path.parent / "engines"
    model = onnx.load(str(source.onnx_path), load_external_data=False)
    ops = lowering.metrale_ops(model)
    backend_name = options.backend
    if backend_name is None:
        found = backends.available()
        backend_name = next((n for n in backends.BACKENDS if found[n]), None)
        if backend_name is None:
            raise backends.BackendMissing(backends.missing_message(None))
    chosen, conflict = resolve_lowering(backend_name, options.lowering, options.plugins, bool(ops))
    if chosen is None:
        raise UsageConflict(conflict, "--lowering" if options.lowering else "--plugins")
    backend = backends.activate(backend_name)
    inputs = _input_shapes(model)
    model_max = ((source.export_manifest or {}).get("model") or {}).get("max_position_embeddings")
    if model_max and options.max_context > int(model_max):
        raise UsageConflict(
            f"{options.max_context} tokens is more than the model's max_position_embeddings "
            f"({model_max}, {source.onnx_path.parent / 'manifest.json'}); lower --max-context",
            "--max-context",
        )

    # Plan every profile before building anything: refusals and shape errors surface at once.
    plans = []
    refused: dict = {}  # (op, reason) -> ranges: one line per op however many profiles refuse it
    for rows in options.profiles:
        formats, refusals = _policy.choose_formats(options.policy, ops, rows)
        for op, reason in refusals:
            refused.setdefault((op, reason), []).append(rows)
        plans.append((rows, formats, optimization_profiles(inputs, rows, options.max_context)))
    if refused:
        lines = _policy.describe_refusals(refused, options.profiles)
        shown = "\n  ".join(lines[:8]) + (f"\n  ... and {len(lines) - 8} more" if len(lines) > 8 else "")
        raise InputError(
            f"--activation-quantization {options.policy.describe()}: {len(lines)} projection(s) "
            f"cannot run the chosen format:\n  {shown}"
        )

    source_sha = _sha256_files(source.files)
    if options.plugins and not Path(options.plugins).is_file():
        raise UsageConflict(f"{options.plugins}: no such file", "--plugins")
    plugin_sha = sha256_file(options.plugins) if options.plugins and chosen == "plugin" else None
    timing_cache = None
    if not backend.is_rtx:  # TensorRT-RTX times no tactics when it builds on the CPU
        timing_cache = Path(options.timing_cache) if options.timing_cache else out_dir / "timing.cache"
    targets = [f"{a}.{b}" for a, b in options.rtx_targets] if backend.is_rtx else ["build machine"]
    promised, promise_reason = _policy.row_invariance(options.policy, chosen)
    row_invariance = engine_promise(audit(model.graph), promised, promise_reason)  # ..invariance
    previous = _load_previous(out_dir)

    def write_manifest(records: list, complete: bool) -> dict:
        manifest = {
            "manifest_version": MANIFEST_VERSION,
            "tool": f"metrale-export {__version__}",
            "complete": complete,  # False while building: a rerun still skips what is listed
            "source": {"path": str(source.onnx_path), "sha256": source_sha,
                       "files": [str(p) for p in source.files]},
            "model": (source.export_manifest or {}).get("model"),
            "backend": {"name": backend.name, "version": backend.version, "targets": targets},
            "lowering": chosen,
            "activation_quantization": options.policy.describe(),
            "row_invariance": row_invariance,
            "max_context": options.max_context,
            "plugins": {"path": str(options.plugins), "sha256": plugin_sha} if plugin_sha else None,
            "timing_cache": str(timing_cache) if timing_cache else None,
            "engines": records,
        }
        _write_atomic(out_dir / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
        return manifest

    full_model = None
    lowered_paths: dict[str, Path] = {}
    records = []
    for rows, formats, shapes in plans:
        key = _key({
            "source": source_sha, "rows": [rows.lo, rows.hi],
            "profiles": [s.as_json() for s in shapes], "formats": formats, "lowering": chosen,
            "lowering_version": lowering.LOWERING_VERSION, "backend": backend.describe(),
            "targets": targets, "plugins": plugin_sha,
        })
        engine_rel = f"rows-{rows.label}.engine"
        engine_path = out_dir / engine_rel
        old = previous.get(key)
        details = {"file": str(engine_path), "formats": formats}
        if old and old.get("file") == engine_rel and engine_path.is_file() \
                and sha256_file(engine_path) == old.get("sha256"):
            progress("skip", rows, details)
            records.append(old)
            continue
        progress("build", rows, details)
        graph_key = _key({"lowering": chosen, "formats": formats, "v": lowering.LOWERING_VERSION,
                          "source": source_sha})[:16]
        if graph_key not in lowered_paths:
            if full_model is None:
                full_model = onnx.load(str(source.onnx_path))
            if chosen == "qdq":
                rewritten = lowering.lower_qdq(full_model, formats)
            else:
                rewritten = lowering.with_activation_formats(full_model, formats)
            path = out_dir / "onnx" / f"{chosen}-{graph_key}.onnx"
            path.parent.mkdir(parents=True, exist_ok=True)
            lowering.save_model(rewritten, path)
            lowered_paths[graph_key] = path
        started = time.perf_counter()
        with backends.captured_polygraphy_log(echo=options.verbose) as log, cancel.sigint_cancels() as stop:
            try:
                engine = _build_one(backend, lowered_paths[graph_key], shapes, options,
                                    timing_cache, chosen == "plugin", cancel.monitor(backend.module, stop))
            except Exception as e:  # noqa: BLE001 - Polygraphy raises its own exception type
                stop.raise_if_set()  # Ctrl-C: the builder was cancelled, no engine written
                errors = [m for level, m in log if level in ("ERROR", "CRITICAL")]
                detail = "\n  ".join(errors[-6:]) or str(e)
                raise BuildError(
                    f"{rows}: {backend.describe()} could not build {lowered_paths[graph_key]}:\n  {detail}"
                ) from e
            stop.raise_if_set()
        seconds = time.perf_counter() - started
        data = memoryview(engine)
        _write_atomic(engine_path, data)
        record = {
            "rows": {"lo": rows.lo, "hi": rows.hi}, "label": rows.label, "file": engine_rel,
            "bytes": data.nbytes, "sha256": hashlib.sha256(data).hexdigest(),
            "onnx": str(lowered_paths[graph_key].relative_to(out_dir)),
            "optimization_profiles": [s.as_json() for s in shapes], "formats": formats,
            "backend": {"name": backend.name, "version": backend.version, "targets": targets},
            "lowering": chosen, "plugin_sha256": plugin_sha, "build_seconds": round(seconds, 3),
            "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "key": key,
        }
        progress("built", rows, {**details, "seconds": seconds, "bytes": data.nbytes})
        records.append(record)
        # Keep what is done if a later profile fails; and what the old manifest listed that is
        # still to be checked, so it can still be skipped.
        done = {r["file"] for r in records}
        pending = [e for e in previous.values() if e.get("file") not in done]
        write_manifest(records + pending, complete=False)

    # Files of ranges (or graphs) no longer asked for: the manifest stops listing them, so remove.
    kept = {r["file"] for r in records} | {r["onnx"] for r in records}
    for old in previous.values():
        rel = old.get("file")
        if rel and rel not in kept and (out_dir / rel).is_file():
            (out_dir / rel).unlink()
    for path in (out_dir / "onnx").glob("*") if (out_dir / "onnx").is_dir() else ():
        rel = f"onnx/{path.name}"
        if rel not in kept and f"onnx/{path.name.removesuffix('.data')}" not in kept:
            path.unlink()  # lowered graphs of formats no engine uses now (or of a failed run)
    return write_manifest(records, complete=True)
