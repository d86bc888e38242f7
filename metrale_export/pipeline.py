"""The main job (``metrale-export MODEL``): export, verify in ONNX Runtime against PyTorch, and
build one engine per row-count profile when a TensorRT backend is installed.

The CLI (``cli/run.py``) parses options into ``JobOptions`` and prints what ``Events`` reports;
every step and decision is here. Invariants: the steps run in order and a failed one stops the job
(its error propagates: ``CheckFailed`` for a comparison out of tolerance, ``BuildError`` for a
build); a skipped step says why in the summary; the summary names every output.
"""

from __future__ import annotations

import dataclasses
import errno
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import contract
from .engines.plan import BuildOptions
from .errors import OK, Check, CheckFailed, Interrupted, MetraleError, OutputLocationError
from .meter import StepMeter

STEPS = ("export", "compare", "engines")


@dataclass
class JobOptions:
    """What the main job does besides the export itself (``ExportOptions``)."""

    export: object  # exporter.export.ExportOptions
    build: BuildOptions
    compare: bool = True
    engines: bool = True
    # The user left --moe-experts at its default: the job picks what its engines can build.
    moe_experts_default: bool = False
    # The model open already (exporter.session.ModelSession, the CLI's): the export and the
    # comparison use its checkpoint, so the job opens it once. None: the export opens it.
    session: object = None


@dataclass
class Events:
    """Where the job reports: a line per finished step, and the steps' own progress hooks."""

    say: Callable[[str], None] = lambda line: None
    export_progress: object = None  # exporter.export's progress (note/start/update; close, if it has one)
    build_progress: Callable | None = None  # engines.build.Progress
    compare_report: Callable | None = None  # called with the comparison report before it is judged
    compare_progress: object = None  # compare_export's progress (start/update/close), one step a segment


@dataclass
class JobResult:
    output: Path
    steps: dict = field(default_factory=dict)  # step -> its summary, or "skipped: why"
    resources: dict = field(default_factory=dict)  # step -> meter.StepMeter.as_json (wall, peak RSS)
    failure: dict | None = None  # the step that failed: {"step", "error", "exit_code"}

    def as_json(self) -> dict:
        out = {"output": str(self.output), "steps": self.steps, "resources": self.resources}
        if self.failure is not None:
            out["failed"] = self.failure
        return out

    def describe_resources(self) -> str:
        """One line: each step's wall time and peak resident memory."""
        parts = []
        for step, r in self.resources.items():
            peak = f"{r['peak_rss_bytes'] / 2**30:.2f} GiB" + ("" if r["peak_rss_scope"] == "step" else "*")
            parts.append(f"{step} {r['wall_seconds']:.1f} s, peak RSS {peak}")
        note = " (* the process's peak so far: its reset is not available here)" if "*" in "".join(parts) else ""
        return "time and memory per step: " + "; ".join(parts) + note


def moe_experts_for(options: JobOptions) -> tuple[str, str]:
    """The MoE expert form the export writes, and why (empty when it is the user's choice).

    The qdq lowering (no ``--plugins``) cannot express the grouped-expert ops (docs/ops.md), so a
    job that builds engines without the plugins exports one projection per expert, which lowers."""
    asked = options.export.request.moe_experts
    if not options.moe_experts_default or not options.engines or options.build.plugins is not None:
        return asked, ""
    return "dense", ("MoE experts dense: the qdq lowering that builds these engines cannot express the "
                     "grouped-expert ops; --plugins (the plugin lowering) or --skip-engines keeps them")


def _engine_backend(options: JobOptions) -> str | None:
    """The backend that will build this job's engines (``engines.plan.choose_backend``), or None when
    none will: step 3 skipped, or no backend asked for and none installed (the step is then skipped)."""
    from .engines import backends
    from .engines.plan import choose_backend

    if not options.engines:
        return None
    found = backends.available() if options.build.backend is None else {}
    if options.build.backend is None and not any(found.values()):
        return None
    return choose_backend(options.build.backend, found)


def engine_count(options: JobOptions, model_max: int | None) -> int:
    """How many engines step 3 will build into the output (0: none), for the export's free-space
    check (``exporter.writer.output_bytes``)."""
    from .engines.plan import resolve_max_context, resolve_profiles

    if _engine_backend(options) is None:
        return 0
    context = resolve_max_context(options.build.max_context, model_max, Path("config.json"))
    return len(resolve_profiles(options.build.profiles, context))


def engine_targets_check(options: JobOptions, weight_kind: str) -> Check:
    """The build's own target check (``engines.plan.rtx_targets_check``: TensorRT-RTX compiles FP8
    weights for SM 8.9 and later only) on the op the export will write for ``weight_kind``."""
    from .engines.plan import rtx_targets_check

    backend = _engine_backend(options)
    if backend is None:
        return OK
    op_type = contract.op_type_of(weight_kind)
    return rtx_targets_check(backend, "plugin" if options.build.plugins else "qdq",
                             options.build.rtx_targets, [op_type] if op_type else [])


def plugins_check(options: JobOptions) -> Check:
    """Whether ``--plugins`` can build this job's engines (TensorRT-RTX has no IPluginV3 layers in
    Python); refused before the export rather than after it."""
    if options.build.plugins is None or _engine_backend(options) != "tensorrt-rtx":
        return OK
    return Check.of([
        "the plugin lowering needs TensorRT: the engines would be built with TensorRT-RTX ("
        + ("--backend tensorrt-rtx" if options.build.backend else "the only backend installed here")
        + "), whose Python API has no IPluginV3 layers; drop --plugins (qdq engines, no row-invariance "
        "promise), add --skip-engines to export only, or run on a GPU machine with TensorRT"])


def moe_experts_check(options: JobOptions, family: str) -> Check:
    """Whether the MoE expert form the user asked for can build this job's engines.

    ``--moe-experts grouped`` without ``--plugins`` would export, verify, and then fail in the qdq
    build (it cannot express the grouped-expert ops): refused before the export instead."""
    from .exporter.layers.registry import has_routed_experts

    if options.moe_experts_default or options.export.request.moe_experts != "grouped":
        return OK
    if options.build.plugins is not None or not has_routed_experts(family) or _engine_backend(options) is None:
        return OK
    return Check.of([
        "grouped keeps the grouped-expert ops, which the qdq lowering that builds this job's engines "
        "cannot express; add --plugins LIB (the plugin lowering) or --skip-engines, or leave "
        "--moe-experts out (the job then exports the experts dense)"])


def job_conflicts(options: JobOptions, family: str, weight_kind: str) -> dict[str, Check]:
    """The option to blame -> its check, for every conflict of the job's options refused before the
    export (the CLI reports every refusal at once)."""
    return {"--moe-experts": moe_experts_check(options, family), "--plugins": plugins_check(options),
            "--rtx-target": engine_targets_check(options, weight_kind)}


def run_job(model: Path, out: Path, options: JobOptions, events: Events | None = None) -> JobResult:
    """Export ``model`` into ``out``, compare the export, build its engines; see the module docstring."""
    events = events or Events()
    options, why = _with_moe_experts(options)
    result = JobResult(Path(out))

    def measured(step, run):
        try:
            with StepMeter() as meter:
                result.steps[step] = run()
        except MetraleError as e:  # the failed step's time and memory are reported too (--json)
            result.resources[step] = meter.as_json()
            result.failure = {"step": step, "error": str(e), "exit_code": e.exit_code}
            e.job_result = result
            raise
        if not (isinstance(result.steps[step], str) and result.steps[step].startswith("skipped")):
            result.resources[step] = meter.as_json()

    measured("export", lambda: _export(model, out, options, events, why))
    step = "compare"
    try:
        measured("compare", lambda: _compare(out, options, events))
        step = "engines"
        measured("engines", lambda: _engines(out, options, events))
        events.say(result.describe_resources())
    except KeyboardInterrupt as e:
        raise Interrupted(resume_note(out, step, options)) from e
    except MetraleError as e:
        if step == "engines":  # the export stays: say so, and how to build once the cause is fixed
            e.args = (f"{e}; {kept_note(out)}",)
            if result.failure is not None:
                result.failure["error"] = str(e)
        raise
    except OSError as e:
        if step != "engines" or e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise _engines_out_of_space(e, out, result) from e
    return result


def _with_moe_experts(options: JobOptions) -> tuple[JobOptions, str]:
    """``options`` with the expert layout the job exports (``moe_experts_for``), and why it differs
    from the one asked for (empty when it is the user's choice)."""
    experts, why = moe_experts_for(options)
    if experts == options.export.request.moe_experts:
        return options, why
    request = dataclasses.replace(options.export.request, moe_experts=experts)
    options = dataclasses.replace(options, export=dataclasses.replace(options.export, request=request))
    if options.session is not None:
        from .compare.runners import with_request

        options = dataclasses.replace(options, session=with_request(options.session, request))
    return options, why


def _engines_out_of_space(e: OSError, out, result: JobResult) -> OutputLocationError:
    """The refusal for a full disk (or quota) during step 3, recorded in ``result`` as its failure."""
    where = e.filename or Path(out) / "engines"
    error = OutputLocationError(f"{where}: {e.strerror or e} while building the engines; free some "
                                f"space: {kept_note(out)}")
    result.failure = {"step": "engines", "error": str(error), "exit_code": error.exit_code}
    error.job_result = result
    return error


def kept_note(out) -> str:
    """What a failed step 3 leaves (the export) and the command that builds its engines."""
    return (f"the export in {out} is complete and kept: once this is fixed, `metrale-export build {out}` "
            "builds its engines (the main job again needs --force)")


def resume_note(out, step: str, options: JobOptions) -> str:
    """What a Ctrl-C during ``step`` (after the export was written) leaves in ``out``, and the
    commands that finish the job from there (engines already built are kept and not rebuilt)."""
    build = f"`metrale-export build {out}` (with the same engine options)"
    if step == "compare":
        return (f"the export in {out} is complete but not verified; `metrale-export compare {out}` "
                f"verifies it and {build} builds its engines")
    verified = "complete and verified" if options.compare else "complete (not verified)"
    return (f"the export in {out} is {verified} and the engines built before the interrupt are kept; "
            f"{build} builds the rest")


def _export(model, out, options: JobOptions, events: Events, experts_why: str) -> dict:
    from .exporter.export import export

    try:
        done = export(options.session or model, out, options.export, progress=events.export_progress)
    finally:  # the bar goes before the step's line (and is not redrawn during the next steps)
        getattr(events.export_progress, "close", lambda: None)()
    counts = done.manifest["op_counts"]
    text = ", ".join(f"{v} {k}" for k, v in counts.items()) or "no metrale ops"
    has_moe = any("/moe/" in k for k in counts)
    note = f"; {experts_why}" if experts_why and has_moe else ""
    events.say(f"[1/3] exported {model} -> {out}/model.onnx in {done.seconds:.1f} s ({text}){note}")
    return {"seconds": round(done.seconds, 2), "op_counts": counts, "onnx": str(Path(out) / "model.onnx"),
            "moe_experts": options.export.request.moe_experts if has_moe else None}


def _compare(out, options: JobOptions, events: Events):
    if not options.compare:
        events.say("[2/3] comparison skipped (--skip-compare)")
        return "skipped: --skip-compare"
    from polygraphy.logger import G_LOGGER

    from .compare.accuracy import compare_export

    G_LOGGER.module_severity = G_LOGGER.ERROR  # Polygraphy's notes would mix into --json's stdout
    events.say("[2/3] comparing the export in ONNX Runtime (reference ops) with PyTorch on a prefill "
               "and a decode step ...")
    started = time.perf_counter()
    report = compare_export(out, options.session, progress=events.compare_progress)
    if events.compare_report is not None:
        events.compare_report(report)
    failure = report.first_failure()
    if failure:
        raise CheckFailed(f"{out}: ONNX Runtime and PyTorch disagree beyond tolerance; first out of bounds: "
                          f"{failure}")
    worst = max(r.rel_error for r in report.rows)
    events.say(f"[2/3] ONNX Runtime (reference ops) matches PyTorch: {report.summary()}")
    out = {"ok": report.ok, "worst_rel_error": worst, "seconds": round(time.perf_counter() - started, 2)}
    if report.static_vs_dynamic:  # static activation scales: the logits against dynamic scales
        out["static_vs_dynamic"] = report.static_vs_dynamic
    return out


def _engines(out, options: JobOptions, events: Events):
    from .engines import backends

    if not options.engines:
        events.say("[3/3] engines skipped (--skip-engines)")
        return "skipped: --skip-engines"
    if options.build.backend is None and not any(backends.available().values()):
        # Asked for by name, a missing backend is an error (BackendMissing); by default, a skip.
        events.say(f"[3/3] engines NOT built: no TensorRT backend is installed. Install "
                   f"`{backends.INSTALL['tensorrt']}` (GPU machines) or `{backends.INSTALL['tensorrt-rtx']}`, "
                   f"then run: metrale-export build {out}")
        return "skipped: no TensorRT backend installed"
    from .engines.build import build_engines
    from .engines.manifest import describe_size

    count = f"{len(options.build.profiles)} engine(s)" if options.build.profiles else "the engines"
    events.say(f"[3/3] building {count}, one per profile, into "
               f"{Path(out) / 'engines'} (Ctrl-C stops cleanly) ...")
    manifest = build_engines(Path(out), None, options.build, events.build_progress)
    promise = manifest["row_invariance"]
    engine_dir = Path(out) / "engines"
    events.say(f"[3/3] built {len(manifest['engines'])} engine(s) with {manifest['backend']['name']} "
               f"{manifest['backend']['version']} (lowering {manifest['lowering']}) in {engine_dir}; "
               f"row invariance {'promised' if promise['promised'] else 'NOT promised'}: {promise['reason']}")
    events.say(f"      {describe_size(manifest)}")
    return {"count": len(manifest["engines"]), "backend": manifest["backend"], "dir": str(engine_dir),
            "max_context": manifest["max_context"], "float_weights": manifest["float_weights"],
            "size": manifest["size"], "build_time": manifest["build_time"]}
