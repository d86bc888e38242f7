"""Build one TensorRT engine per row-count profile: carry out a ``plan.BuildPlan``.

``build_engines`` reads the source and the previous manifest, makes the plan (``plan.plan_build``,
where every decision and refusal lives), and runs a short loop over its steps. Each step of the
loop is a small Polygraphy-style loader (``BaseLoader.call_impl``): ``LoweredGraphFromOnnx``
writes the lowered graph an engine is built from, ``EngineBytesFromLoweredGraph`` chains
Polygraphy's ``NetworkFromOnnxPath`` -> ``CreateConfig``/``CreateConfigRTX`` (with the step's
``Profile`` objects) -> ``EngineBytesFromNetwork``.

Invariants:
- engines and ``manifest.json`` are written atomically (``manifest.write_atomic``);
- the manifest is rewritten after every engine with ``complete: false``, listing what is built and
  what the previous build listed that is still to be checked, so an interrupted build resumes;
- files of the previous build are removed only at the end, and each is reported (``remove``);
- a build that fails or is interrupted leaves no lowered graph that no manifest names and no
  directory it made that stayed empty (``_cleanup_after_failure``).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import onnx
from polygraphy.backend.base import BaseLoader

from ..errors import BuildError
from . import backends, cancel, lowering, manifest as _manifest, resources, weights as _weights
from . import weights_file as _weights_file
from .plan import (  # noqa: F401 - the build's public names
    LOWERINGS, BuildOptions, BuildPlan, EngineStep, UsageConflict, choose_backend, plan_build,
    resolve_lowering, sha256_file,
)
from .source import Source, resolve_source  # noqa: F401 - the build's public names
from .profiles import ProfileShapes, RowRange

# (event, rows, details): "lower" per lowered graph written (rows: None, details: {"file": path}),
# then "plan" once before the first engine (rows: None, details: "engines", each {"rows", "file",
# "expected_seconds"}, "expected_seconds" in all, "reused": how many are kept), "skip", "build",
# "built" per engine (rows: its range; "built" adds "seconds", "bytes", "expected_seconds", "left"
# and "remaining_seconds"), "remove" per engine of the previous build that is deleted (rows: None,
# details: {"file": path}).
Progress = Callable[[str, RowRange | None, dict], None]

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


class LoweredGraphFromOnnx(BaseLoader):
    """The source graph lowered for one set of formats, its float weights in the checkpoint's dtype
    (``weights.float_weights_in_bf16``) unless asked otherwise, saved under the engine directory as
    a small header and its weights file (``weights_file``: the source's weights are read from disk
    a tensor at a time and never all in memory). With ``shared``, also the header an engine with
    shared weights is built from (``weights_file.shared_inputs_graph``). Returns what its weights
    take and a decode step reads (``weights.numbers``) and the weights file's name, size and sha256."""

    def __init__(self, source: Path, lowering_name: str, formats: dict, float_weights: str, path: Path,
                 shared: bool = False):
        self.source, self.lowering, self.formats, self.float_weights, self.path, self.shared = \
            Path(source), lowering_name, formats, float_weights, Path(path), shared

    def call_impl(self) -> dict:
        header = onnx.load(str(self.source), load_external_data=False)
        store = _weights_file.WeightsFile(self.path.with_name(self.path.name + ".data"), self.source.parent)
        partial = [self.path, store.path, shared_graph(self.path)]
        try:
            if self.lowering == "qdq":
                rewritten = lowering.lower_qdq(header, self.formats, store=store)
            else:
                rewritten = lowering.lower_plugins(header, self.formats)
            del header
            converted = []
            if self.float_weights == "checkpoint":
                rewritten, converted = _weights.float_weights_in_bf16(rewritten, store)
            store.adopt(rewritten)
            data = store.close()
            numbers = {**_weights.numbers(rewritten), "bf16_float_weights": converted}
            _weights_file.save_header(rewritten, self.path)
            inputs = []
            if self.shared:
                graph, inputs = _weights_file.shared_inputs_graph(rewritten)
                _weights_file.save_header(graph, shared_graph(self.path))
        except BaseException as e:  # a full disk or Ctrl-C: leave no half-written graph
            store.discard()
            for p in partial:
                p.unlink(missing_ok=True)
            if isinstance(e, OSError) and e.filename is None:
                raise OSError(e.errno, e.strerror, str(self.path)) from e
            raise
        rel = self.path.parent.name + "/" + data["file"]
        return {**numbers, "weights_file": {**data, "file": rel}, "weight_inputs": len(inputs),
                "nodes": len(rewritten.graph.node)}


def shared_graph(path: Path) -> Path:
    """The header an engine with shared weights is built from, beside the lowered graph."""
    return Path(path).with_name(Path(path).name.removesuffix(".onnx") + ".shared.onnx")


class EngineBytesFromLoweredGraph(BaseLoader):
    """The serialized engine of one lowered graph under one step's optimization profiles."""

    def __init__(self, backend: backends.Backend, plan: BuildPlan, shapes: tuple[ProfileShapes, ...],
                 graph: Path, rtx_targets, monitor=None):
        self.backend, self.plan, self.shapes, self.graph, self.rtx_targets = \
            backend, plan, shapes, graph, rtx_targets
        self.monitor = monitor  # the builder's IProgressMonitor (cancel.monitor: Ctrl-C stops it)

    def call_impl(self):
        from polygraphy.backend.trt import CreateConfig, EngineBytesFromNetwork, NetworkFromOnnxPath, Profile

        profiles = []
        for ps in self.shapes:
            p = Profile()
            for name, (lo, opt, hi) in ps.shapes.items():
                p.add(name, min=lo, opt=opt, max=hi)
            profiles.append(p)
        if self.plan.lowering == "plugin" and self.plan.plugins is not None:
            load_plugin_library(self.backend, Path(self.plan.plugins))
        # Parsed from its path: TensorRT's parser reads the weights file itself (embedded, stripped)
        # or finds no weights at all (shared: they are inputs), so Python never holds them.
        shared = self.plan.engine_weights == "shared"
        network = NetworkFromOnnxPath(str(shared_graph(self.graph) if shared else self.graph), strongly_typed=True)
        cache = str(self.plan.timing_cache) if self.plan.timing_cache else None
        stripped = self.plan.engine_weights == "stripped"  # REFIT + STRIP_PLAN
        if self.backend.is_rtx:
            from polygraphy.backend.tensorrt_rtx import CreateConfigRTX

            config = CreateConfigRTX(profiles=profiles, compute_capabilities=list(self.rtx_targets),
                                     progress_monitor=self.monitor, refittable=stripped, strip_plan=stripped)
        else:
            config = CreateConfig(profiles=profiles, load_timing_cache=cache, progress_monitor=self.monitor,
                                  refittable=stripped, strip_plan=stripped)
        with warnings.catch_warnings():
            # Polygraphy sets a timing cache even without one; TensorRT-RTX deprecates the call.
            warnings.simplefilter("ignore", DeprecationWarning)
            return EngineBytesFromNetwork(network, config=config, save_timing_cache=cache)()


def make_plan(source_path: Path, out_dir: Path | None, options: BuildOptions) -> tuple[BuildPlan, backends.Backend]:
    """Read the source and the engine directory, activate the backend, and plan the build."""
    source = resolve_source(source_path)
    out_dir = Path(out_dir) if out_dir else source.onnx_path.parent / "engines"
    _manifest.check_engine_dir(out_dir)
    name = choose_backend(options.backend, backends.available() if options.backend is None else {})
    # Usage conflicts need no backend: refuse them before importing one.
    resolve_lowering(name, options.lowering, options.plugins, bool(source.ops))
    backend = backends.activate(name)

    def engine_sha(rel: str) -> str | None:
        path = out_dir / rel
        return sha256_file(path) if path.is_file() else None

    onnx_dir = out_dir / "onnx"
    lowered = sorted(f"onnx/{p.name}" for p in onnx_dir.iterdir()) if onnx_dir.is_dir() else []
    cuda = options.engine_weights == "stripped" and backends.cuda_driver()
    plan = plan_build(source, out_dir, options, (backend.name, backend.version),
                      _manifest.previous_engines(out_dir), engine_sha, lowered, cuda_driver=cuda)
    return plan, backend


def build_engines(source_path: Path, out_dir: Path | None, options: BuildOptions,
                  progress: Progress | None = None) -> dict:
    """Build (or reuse) the engines of every profile; return the manifest that was written."""
    progress = progress or (lambda event, rows, details: None)
    plan, backend = make_plan(source_path, out_dir, options)
    made = [d for d in (plan.out_dir / "onnx", plan.out_dir) if not d.exists()]
    try:
        return execute(plan, backend, options, progress)
    except BaseException:
        _cleanup_after_failure(plan, made)
        raise


def _cleanup_after_failure(plan: BuildPlan, made: list[Path]) -> None:
    """Remove the lowered graphs no manifest entry names (the build's cache of a failed build) and
    the directories this build made that are empty again; never an engine or a previous file."""
    named = {e.get("onnx") for e in _manifest.previous_engines(plan.out_dir)}
    for rel in plan.graphs:
        if rel not in named:
            for path in (plan.out_dir / rel, plan.out_dir / f"{rel}.data", shared_graph(plan.out_dir / rel)):
                try:
                    path.unlink(missing_ok=True)
                except OSError:
                    pass
    for d in made:
        try:
            d.rmdir()
        except OSError:
            pass


def execute(plan: BuildPlan, backend: backends.Backend, options: BuildOptions, progress: Progress) -> dict:
    """Carry out ``plan``: build what it says, reuse the rest, remove what it lists."""
    out = plan.out_dir
    if plan.to_build:
        resources.check(plan.estimate, out)  # refuse up front what this machine cannot hold
    written = _lower_graphs(plan, progress)
    expected = {s.file: expected_seconds(plan, s, written[s.graph]) for s in plan.to_build}
    if plan.to_build:
        _announce(plan, expected, progress)
    run = _Run(plan, backend, options, progress, written, expected, _still_listed(plan))
    for step in plan.steps:
        details = {"file": str(out / step.file), "formats": step.formats}
        if step.reuse is not None:
            progress("skip", step.rows, details)
            run.entries.append(step.reuse)
            continue
        run.build(step, details)
        run.write_partial()
    _remove_listed(plan, progress)
    return _manifest.write(out, _manifest.document(plan, run.entries, complete=True))


def _still_listed(plan: BuildPlan) -> list[dict]:
    """The previous manifest's engine entries that no step reuses (still to be checked)."""
    previous = {s.reuse["file"]: s.reuse for s in plan.steps if s.reuse}
    return [e for e in _manifest.previous_engines(plan.out_dir) if e.get("file") not in previous]


@dataclass
class _Run:
    """One ``execute``: the manifest entries so far, and the seconds the engines built so far took
    and were expected to take (the estimate of what remains scales by their ratio)."""

    plan: BuildPlan
    backend: backends.Backend
    options: BuildOptions
    progress: Progress
    written: dict[str, dict]  # lowered graph -> its numbers
    expected: dict[str, float]  # engine file -> its expected seconds
    pending: list[dict]  # the previous manifest's entries still to be checked
    entries: list[dict] = field(default_factory=list)
    seconds_done: float = 0.0
    expected_done: float = 0.0

    def build(self, step: EngineStep, details: dict) -> None:
        """Build ``step``'s engine, write it, list it and report it (``build``, then ``built``)."""
        plan, expected = self.plan, self.expected[step.file]
        self.progress("build", step.rows, {**details, "expected_seconds": expected})
        started = time.perf_counter()
        data = memoryview(_build(self.backend, plan, step, self.options))
        seconds = time.perf_counter() - started
        _manifest.write_atomic(plan.out_dir / step.file, data)
        self.entries.append(_manifest.engine_entry(plan, step, data, seconds, self.written[step.graph], expected))
        self.seconds_done, self.expected_done = self.seconds_done + seconds, self.expected_done + expected
        done = self._done()
        left = [self.expected[s.file] for s in plan.to_build if s.file not in done]
        self.progress("built", step.rows, {**details, "seconds": seconds, "bytes": data.nbytes,
                                           "expected_seconds": expected, "left": len(left),
                                           "remaining_seconds": resources.remaining_seconds(
                                               sum(left), self.seconds_done, self.expected_done)})

    def write_partial(self) -> None:
        """Keep what is done if a later profile fails, and what the old manifest listed that is
        still to be checked, so that it can still be reused."""
        done = self._done()
        _manifest.write(self.plan.out_dir, _manifest.document(
            self.plan, self.entries + [e for e in self.pending if e.get("file") not in done], complete=False))

    def _done(self) -> set:
        return {e["file"] for e in self.entries}


def _lower_graphs(plan: BuildPlan, progress: Progress) -> dict[str, dict]:
    """Write every lowered graph before the first engine (each engine's estimate needs its graph):
    lowered graph -> its numbers."""
    written: dict[str, dict] = {}
    for rel, formats in plan.graphs.items():
        progress("lower", None, {"file": str(plan.out_dir / rel)})
        written[rel] = LoweredGraphFromOnnx(plan.source.onnx_path, plan.lowering, formats, plan.float_weights,
                                            plan.out_dir / rel, shared=plan.engine_weights == "shared")()
    return written


def _announce(plan: BuildPlan, expected: dict[str, float], progress: Progress) -> None:
    """The build-wide plan event: the engines to build, each one's estimate, and how many are reused."""
    progress("plan", None, {
        "engines": [{"rows": s.rows, "file": str(plan.out_dir / s.file), "expected_seconds": expected[s.file]}
                    for s in plan.to_build],
        "expected_seconds": sum(expected.values()), "reused": len(plan.steps) - len(plan.to_build)})


def expected_seconds(plan: BuildPlan, step: EngineStep, numbers: dict) -> float:
    """The estimate of how long ``step``'s engine takes to build (``resources.estimate_engine_seconds``
    over its lowered graph's ``numbers``)."""
    return resources.estimate_engine_seconds(plan.backend, numbers["nodes"], len(step.shapes))


def _remove_listed(plan: BuildPlan, progress: Progress) -> None:
    """Remove the files the plan no longer serves; only engines are reported."""
    for rel in plan.removals:
        path = plan.out_dir / rel
        if path.is_file():
            path.unlink()
            if rel.endswith(".engine"):  # lowered graphs are the build's cache: removed quietly
                progress("remove", None, {"file": str(path)})


def _build(backend: backends.Backend, plan: BuildPlan, step: EngineStep, options: BuildOptions):
    graph = plan.out_dir / step.graph
    # Ctrl-C cancels the builder (cancel.py) and comes back as KeyboardInterrupt: no engine is written.
    with backends.captured_polygraphy_log(echo=options.verbose) as log, cancel.sigint_cancels() as stop:
        try:
            engine = EngineBytesFromLoweredGraph(backend, plan, step.shapes, graph, options.rtx_targets,
                                                 cancel.monitor(backend.module, stop))()
        except Exception as e:  # noqa: BLE001 - Polygraphy raises its own exception type
            stop.raise_if_set()
            errors = [m for level, m in log if level in ("ERROR", "CRITICAL")]
            detail = "\n  ".join(errors[-6:]) or str(e)
            raise BuildError(f"{step.rows}: {backend.describe()} could not build {graph}:\n  {detail}") from e
        stop.raise_if_set()
        return engine
