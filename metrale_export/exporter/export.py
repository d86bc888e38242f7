"""Export a checkpoint to an ONNX directory with metrale projection ops.

Steps: open the checkpoint, plan every projection from headers alone, build the model on the
``meta`` device, trace it with ``torch.onnx.export(dynamo=True)`` (no weight read; one decoder
layer per layer kind, replicated for the others: ``replicate.py``), compact the
metrale nodes, clean up with onnx-graphsurgeon, then stream the weights into external data and
attach them, check with ``onnx.checker`` and write ``manifest.json``.

Invariants: exporting the same checkpoint with the same options gives identical bytes; output
appears only when complete (``writer.atomic_directory``); peak memory is the traced graph plus one
projection's tensors, not the model.
"""

from __future__ import annotations

import contextlib
import io
import signal
import threading
import json
import logging
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import onnx_graphsurgeon as gs
import onnx_ir as ir
import torch

from ..errors import ExportError, InputError
from ..ops import onnx_translation
from . import calibration, replicate
from .layers import mtp
from .layers.model import CausalLM
from .manifest import MANIFEST_NAME, build_manifest
from .names import DTYPE_NAMES, parse_layers  # noqa: F401  (parse_layers: re-exported)
from .projection_source import ProjectionSource
from .quantization import QuantRequest
from .session import ModelSession, open_model, select_source  # noqa: F401  (select_source: re-exported)
from .writer import (DATA_NAME, INLINE_LIMIT, ONNX_NAME, DataWriter, atomic_directory, check_location,
                     output_bytes, tensor_digest)

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}
OPSET = 20
log = logging.getLogger(__name__)


@dataclass
class ExportOptions:
    request: QuantRequest = field(default_factory=QuantRequest)
    layers: list[int] | None = None
    dtype: str = "float32"
    force: bool = False
    # Trace one decoder layer per kind and replicate it (replicate.py); False traces every layer.
    replicate_layers: bool = True
    # Engines the main job builds into the same directory after the export: the free-space check
    # counts them too (writer.output_bytes).
    engines: int = 0
    engine_weights: str = "shared"  # and how they hold their weights (engines.policy.ENGINE_WEIGHTS)
    model_path: str | None = None  # recorded in the manifest (filled in by export())
    # --activation-scales dynamic|static and --calibration-data (exporter/calibration.py).
    activation_scales: str = "dynamic"
    calibration_data: str | None = None


@dataclass
class ExportResult:
    out_dir: Path
    manifest: dict
    seconds: float


def _dynamic_shapes(model: CausalLM):
    dims = {"batch": torch.export.Dim("batch"), "seq": torch.export.Dim("seq"),
            "past": torch.export.Dim("past", min=0)}
    return model.dynamic_shapes(dims)


def trace(model: CausalLM) -> ir.Model:
    """Trace the (meta-device) model to an onnx_ir model whose initializers hold no data."""
    buf = io.StringIO()
    try:
        with _sigint_noted() as interrupted, warnings.catch_warnings(), contextlib.redirect_stdout(buf):
            warnings.simplefilter("ignore")
            logging.getLogger("torch").setLevel(logging.ERROR)
            program = torch.onnx.export(
                model, model.example_inputs(device="meta"), dynamo=True, optimize=False,
                opset_version=OPSET, custom_translation_table=onnx_translation.translation_table(),
                dynamic_shapes=_dynamic_shapes(model), input_names=model.input_names(),
                output_names=model.output_names(), verbose=False, report=False,
            )
    except Exception as e:
        if interrupted:  # torch.onnx wraps a KeyboardInterrupt raised inside it in its own errors
            raise KeyboardInterrupt from e
        raise ExportError(f"tracing the model to ONNX failed: {e}\n{buf.getvalue()[-2000:]}") from e
    return program.model


@contextlib.contextmanager
def _sigint_noted():
    """Note a Ctrl-C during tracing (the previous handler still runs: tracing stops at once)."""
    noted: list[bool] = []
    old = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(old):
        yield noted
        return

    def handler(signum, frame):
        noted.append(True)
        old(signum, frame)

    signal.signal(signal.SIGINT, handler)
    try:
        yield noted
    finally:
        signal.signal(signal.SIGINT, old)


def _attach_weights(model: ir.Model, offsets: dict[str, tuple[int, int]], base_dir: Path,
                    data_name: str = DATA_NAME) -> None:
    for name, value in list(model.graph.initializers.items()):
        if name not in offsets:
            continue  # a constant the tracer created itself (shape constants); keeps its data
        off, length = offsets[name]
        value.const_value = ir.ExternalTensor(
            data_name, off, length, value.const_value.dtype, shape=value.const_value.shape,
            name=name, base_dir=base_dir)


EMBEDDING, HEAD = "model.embed_tokens.weight", "lm_head.weight"


def _tied_unquantized_head(model: CausalLM) -> bool:
    """lm_head reads the embedding's checkpoint tensor and stays float: it may share its initializer."""
    return model.cfg.tie_word_embeddings and model.lm_head.spec.kind == "none" and not model.lm_head.float_op


def _share_initializer(model: ir.Model, name: str, with_name: str) -> None:
    """Point every use of initializer ``name`` at ``with_name`` and drop ``name``."""
    graph = model.graph
    value, target = graph.initializers[name], graph.initializers[with_name]
    if value.type != target.type or list(value.shape) != list(target.shape):
        raise ExportError(f"initializer {name} ({value.type} {value.shape}) cannot share {with_name} "
                          f"({target.type} {target.shape})")
    value.replace_all_uses_with(target)
    del graph.initializers[name]


def _optimize(model: ir.Model) -> None:
    """Fold the shape arithmetic the tracer leaves (TensorRT's parser needs constant axes, for
    example ReduceMean's), drop what folding left unused, and lift constants to initializers.

    Only these passes of onnxscript's ``optimize``: its rewrite rules, common-subexpression
    elimination and initializer deduplication took most of the export time of a large model (about
    290 s of a Qwen3-8B-shaped export) and change nothing a projection graph needs. The folder reads
    only small constants (``input_size_limit`` elements), so the streamed weights stay on disk.
    """
    import onnx_ir.passes.common as passes
    import onnxscript.optimizer

    try:
        if model.functions:
            passes.InlinePass()(model)
        onnxscript.optimizer.fold_constants(model, onnx_shape_inference=False, input_size_limit=1024)
        ir.passes.Sequential(
            passes.RemoveUnusedNodesPass(),
            passes.RemoveUnusedFunctionsPass(),
            passes.RemoveUnusedOpsetsPass(),
            passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
            passes.DeduplicateInitializersPass(),  # small ones only (size_limit): no weight is read
            passes.CommonSubexpressionEliminationPass(),
            passes.RemoveUnusedNodesPass(),
        )(model)
    except Exception as e:
        raise ExportError(f"optimizing the traced graph failed: {e}") from e


def _cleanup(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Compact metrale inputs, then onnx-graphsurgeon's cleanup and topological sort."""
    onnx_translation.compact_inputs(proto.graph)
    # gs warns on stdout that it keeps bf16 initializers (the W4A16 scales) as ONNX tensors: that is
    # what we want, and stdout is for results (--json).
    quiet = (gs.logger.G_LOGGER.severity, gs.logger.G_LOGGER.colors)
    gs.logger.G_LOGGER.severity, gs.logger.G_LOGGER.colors = gs.logger.G_LOGGER.ERROR, False
    try:
        graph = gs.import_onnx(proto)
        graph.cleanup(remove_unused_graph_inputs=False).toposort()
        out = gs.export_onnx(graph, do_type_check=False)
    finally:
        gs.logger.G_LOGGER.severity, gs.logger.G_LOGGER.colors = quiet
    out.ir_version = proto.ir_version
    del out.opset_import[:]
    out.opset_import.extend(proto.opset_import)
    # The metrale opset a graph imports is the newest node version it uses (contract.node_version):
    # a W8A8 graph without static scales stays at version 1, as before W8A8Proj version 2.
    from .. import contract
    versions = [contract.op(n.op_type).node_version({a.name: onnx.helper.get_attribute_value(a) for a in n.attribute})
                for n in out.graph.node if n.domain == contract.DOMAIN]
    for o in out.opset_import:
        if o.domain == contract.DOMAIN and versions:
            o.version = max(versions)
    out.producer_name, out.producer_version = "metrale-export", _version()
    return out


def _version() -> str:
    from .. import __version__

    return __version__


def _write_graph(traced: ir.Model, model: CausalLM, source: ProjectionSource, tmp: Path, onnx_name: str, data_name: str,
                 progress) -> onnx.ModelProto:
    """Stream ``model``'s weights into ``data_name``, attach them to ``traced``, optimize and clean
    it up, and write it as ``onnx_name`` (the weights inline when small); checked by onnx.checker."""
    writer = DataWriter(tmp / data_name)
    # Tied embeddings with a float lm_head: one initializer for both when the bytes agree.
    tied = _tied_unquantized_head(model) and EMBEDDING in traced.graph.initializers \
        and HEAD in traced.graph.initializers
    try:
        shared = _stream_weights(model, source, writer, tied, progress)
    finally:
        writer.close()
    if shared:
        _share_initializer(traced, HEAD, EMBEDDING)
    _attach_weights(traced, writer.offsets, tmp, data_name)
    _optimize(traced)
    proto = _cleanup(ir.serde.serialize_model(traced))
    total = sum(length for _, length in writer.offsets.values())
    _save_checked(proto, tmp, onnx_name, data_name, inline=total <= INLINE_LIMIT)
    return proto


def _stream_weights(model: CausalLM, source: ProjectionSource, writer: DataWriter, tied: bool, progress) -> bool:
    """Write ``model``'s weights with ``writer`` one at a time; with ``tied``, the lm_head is left
    out when its bytes equal the embedding's. Whether it was (the head then shares the embedding)."""
    digests, shared = {}, False
    for name, tensor in model.iter_weights(source):
        if tied and name in (EMBEDDING, HEAD):
            digests[name] = tensor_digest(tensor)
            shared = name == HEAD and digests[HEAD] == digests.get(EMBEDDING)
        if not shared or name != HEAD:
            writer.write(name, tensor)
        if progress is not None:
            progress.update(tensor.numel() * tensor.element_size())
    return shared


def _save_checked(proto: onnx.ModelProto, tmp: Path, onnx_name: str, data_name: str, inline: bool) -> None:
    """Write ``proto`` as ``tmp/onnx_name`` (with ``inline``, its weights read back from ``data_name``
    into it and that file removed) and check it with onnx.checker."""
    onnx_path = tmp / onnx_name
    if inline:
        onnx.load_external_data_for_model(proto, str(tmp))
        (tmp / data_name).unlink()
    onnx.save_model(proto, str(onnx_path))
    try:
        onnx.checker.check_model(str(onnx_path))
    except onnx.checker.ValidationError as e:
        raise ExportError(f"{onnx_path}: onnx.checker rejected the exported graph: {e}") from e


def _calibrated(session: ModelSession, dtype: torch.dtype, options: ExportOptions, progress) -> ModelSession:
    """``session`` with static activation scales when ``options`` ask for them (calibrated before
    any tracing, so the data is checked first), else as it is."""
    calibration.check_options(options.activation_scales, options.calibration_data)
    if options.activation_scales != "static":
        return session
    if progress is not None:
        progress.note(f"calibrating static activation scales on {options.calibration_data} ...")
    return calibration.calibrated(session, dtype, options.layers, options.calibration_data,
                                  show_progress=getattr(progress, "enabled", progress is not None))


def _trace_model(session: ModelSession, model: CausalLM, dtype: torch.dtype, replicate_layers: bool) -> ir.Model:
    """The traced graph of ``model``: one trace per layer kind replicated to every layer when asked
    and possible (a warning says why not), else a trace of every layer."""
    if replicate_layers:
        def make_model(layer_ids):
            with torch.device("meta"):
                return session.model(dtype, layer_ids)
        try:
            return replicate.trace_replicated(model, make_model, trace)
        except replicate.NotReplicable as e:
            log.warning("tracing every layer: the per-kind trace could not be replicated (%s)", e)
    return trace(model)


def _dtype(name: str) -> torch.dtype:
    """The torch dtype of ``--dtype name``; ``InputError`` for a name outside ``DTYPES``."""
    if name not in DTYPES:
        raise InputError(f"--dtype: expected one of {', '.join(DTYPES)}, found {name!r}")
    return DTYPES[name]


def _plan_note(cfg, model: CausalLM) -> str:
    """What the export will do, noted before tracing: layers, projections and weight MiB."""
    n_proj = len(model.projections())
    return (f"{cfg.architecture}: {len(model.layer_ids)} layers, {n_proj} projections, "
            f"{model.weight_nbytes() / 2**20:.1f} MiB of weights to write; tracing ...")


def export(model_path: str | Path | ModelSession, out_dir: str | Path, options: ExportOptions | None = None,
           progress=None) -> ExportResult:
    """Export ``model_path`` (a path, or a session ``open_model`` made with ``options.request``)
    into ``out_dir``.

    ``progress``, if given, has ``note(text)`` (the plan, before tracing), ``start(total_bytes)``
    (before any weight is read) and ``update(n_bytes)`` (as weights stream).
    """
    options = options or ExportOptions()
    t0 = time.time()
    dtype = _dtype(options.dtype)
    session = model_path if isinstance(model_path, ModelSession) else open_model(model_path, options.request)
    options.request = session.request  # the session's request is what the manifest records
    session = _calibrated(session, dtype, options, progress)
    options.model_path = str(session.path)
    ckpt, cfg, source = session.checkpoint, session.config, session.source
    with torch.device("meta"):
        model = session.model(dtype, options.layers)
        head = session.mtp_model(dtype) if session.has_mtp else None  # a partial head is refused here
    weight_bytes = model.weight_nbytes() + (head.weight_nbytes() if head is not None else 0)
    what = f"the export and its {options.engines} engine(s)" if options.engines else "the export"
    check_location(Path(out_dir), options.force, output_bytes(weight_bytes, options.engines, options.engine_weights),
                   what)
    if progress is not None:
        progress.note(_plan_note(cfg, model))
    traced = _trace_model(session, model, dtype, options.replicate_layers)
    traced_head = trace(head) if head is not None else None
    if progress is not None:
        progress.start(weight_bytes)

    with atomic_directory(Path(out_dir), options.force) as tmp:
        proto = _write_graph(traced, model, source, tmp, ONNX_NAME, DATA_NAME, progress)
        head_proto = None
        if head is not None:
            head_proto = _write_graph(traced_head, head, source, tmp, mtp.ONNX_NAME, mtp.DATA_NAME, progress)
        manifest = build_manifest(ckpt, cfg, model, options, tmp, proto, source, head_proto)
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return ExportResult(Path(out_dir), manifest, time.time() - t0)
