"""A ``polygraphy run`` extension module (entry point group ``polygraphy.run.plugins``, registered in
pyproject.toml): run an export in Polygraphy's own CLI with the metrale ops executed by their
reference implementations, and compare it there with the lowered ``qdq`` graph or an engine.

Adds to ``polygraphy run``:
- ``--metrale-onnxrt``: a runner, ONNX Runtime on the model with the metrale reference ops
  (ops/ort.py; a plain ``--onnxrt`` stops at "metrale:W4A16Proj(-1) is not a registered op");
- ``--metrale-qdq [PATH]``: a runner, ONNX Runtime on a lowered standard-ONNX graph (default: the
  export's only lowered ``engines/onnx/qdq-*.onnx``, written by ``metrale-export build --lowering qdq``;
  its bfloat16 MatMul/Gemm, which ONNX Runtime's CPU provider lacks, run as float32 products of the
  same bfloat16 values with the result rounded to bfloat16: ``bf16_products_for_cpu``);
- ``--metrale-step BATCH,SEQ,PAST``: the shapes of every input (token ids, positions, every
  layer's state, from the ``manifest.json`` of the export) and the token ids' range (the
  vocabulary), so no ``--input-shapes`` list of 2 x layers states is needed.

Invariants: nothing here changes Polygraphy's own runners or options; the generated script
(``--gen-script``) imports only this module and Polygraphy.
"""

from __future__ import annotations

import json
from pathlib import Path

from polygraphy.backend.base import BaseLoader
from polygraphy.tools.args import DataLoaderArgs, ModelArgs
from polygraphy.tools.args import util as args_util
from polygraphy.tools.args.base import BaseArgs, BaseRunnerArgs
from polygraphy.tools.script import make_invocable


def find_manifest(model_path: str | Path) -> Path | None:
    """The export's manifest.json: beside the model, or up to three directories above it (a
    lowered graph lives in ``<export>/engines/onnx/``)."""
    here = Path(model_path).resolve().parent
    for d in (here, *list(here.parents)[:3]):
        if (d / "manifest.json").is_file() and "inputs" in json.loads((d / "manifest.json").read_text()):
            return d / "manifest.json"
    return None


class SessionFromMetraleOnnx(BaseLoader):
    """An ONNX Runtime session of an ONNX file with the metrale reference ops (external weights read
    by path)."""

    def __init__(self, path: str):
        self.path = path

    def call_impl(self):
        from ..ops.ort import reference_session

        return reference_session(self.path)


_BF16_PRODUCTS = ("MatMul", "Gemm")


def bf16_products_for_cpu(model):
    """``model`` (rewritten in place) with every MatMul/Gemm on bfloat16 operands (the build's
    ``--float-weights checkpoint`` lm_head and router: engines.weights) run in float32 on the same
    values: bfloat16 operands widen exactly, the float32 accumulation is the GEMM's, and the result
    is rounded back to bfloat16 where the graph had it. ONNX Runtime's CPU provider has no bfloat16
    MatMul or Gemm ("Could not find an implementation for Gemm(13)"). Returns the rewritten names."""
    import onnx
    from onnx import TensorProto, helper

    graph = model.graph
    bf16 = _bf16_values(graph)
    widen = _Widener(graph)
    nodes, rewritten = [], []
    for node in graph.node:
        if node.op_type not in _BF16_PRODUCTS or not any(i in bf16 for i in node.input):
            nodes.append(node)
            continue
        inputs = [widen(name, node, nodes) if name in bf16 else name for name in node.input]
        product = onnx.NodeProto()
        product.CopyFrom(node)
        del product.input[:]
        product.input.extend(inputs)
        product.output[0] = f"{node.output[0]}/f32"
        nodes.append(product)
        nodes.append(helper.make_node("Cast", [product.output[0]], [node.output[0]],
                                      name=f"{node.name}/to_bf16", to=TensorProto.BFLOAT16))
        rewritten.append(node.name)
    del graph.node[:]
    graph.node.extend(nodes)
    return rewritten


def _bf16_values(graph) -> set[str]:
    """The bfloat16 initializers and the outputs of Casts to bfloat16."""
    from onnx import TensorProto

    bf16 = {t.name for t in graph.initializer if t.data_type == TensorProto.BFLOAT16}
    for node in graph.node:
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        if node.op_type == "Cast" and to == TensorProto.BFLOAT16:
            bf16.update(node.output)
    return bf16


class _Widener:
    """The float32 name of a bfloat16 value: a constant widened once, exactly (bfloat16 is
    float32's top half), into a new initializer; any other value through a Cast appended to
    ``nodes``."""

    def __init__(self, graph):
        self.graph = graph
        self.inits = {t.name: t for t in graph.initializer}
        self.widened: dict[str, str] = {}

    def __call__(self, name: str, node, nodes: list) -> str:
        import numpy as np
        from onnx import TensorProto, helper, numpy_helper

        if name not in self.inits:
            nodes.append(helper.make_node("Cast", [name], [f"{name}/f32"], name=f"{node.name}/{name}/to_f32",
                                          to=TensorProto.FLOAT))
            return f"{name}/f32"
        if name not in self.widened:
            bits = numpy_helper.to_array(self.inits[name]).view(np.uint16).astype(np.uint32) << 16
            t = numpy_helper.from_array(bits.view(np.float32), f"{name}/f32")
            self.graph.initializer.append(t)
            self.widened[name] = t.name
        return self.widened[name]


class SessionFromQdqOnnx(BaseLoader):
    """An ONNX Runtime CPU session of a lowered graph; PATH None: the export's only qdq graph."""

    def __init__(self, path: str | None, model_path: str):
        self.path, self.model_path = path, model_path

    def call_impl(self):
        import onnxruntime as ort

        from polygraphy.logger import G_LOGGER

        from ..engines.plan import lowered_graph_of

        path = self.path
        if path is None:
            # The lowered graphs, not the shared-weights headers (qdq-*.shared.onnx) the build
            # writes beside them.
            onnx_dir = Path(self.model_path).parent / "engines" / "onnx"
            found = sorted({onnx_dir / lowered_graph_of(p.name) for p in onnx_dir.glob("qdq-*.onnx")})
            if len(found) != 1:  # a user error: Polygraphy's one line, no traceback
                G_LOGGER.critical(
                    f"--metrale-qdq: expected one engines/onnx/qdq-*.onnx beside {self.model_path}, found "
                    f"{len(found)}; name the graph (--metrale-qdq-model PATH) or run 'metrale-export build "
                    "--lowering qdq' first")
            path = str(found[0])
        import onnx

        model = onnx.load(path)
        if not bf16_products_for_cpu(model):
            return ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


class MetraleOnnxrtRunnerArgs(BaseRunnerArgs):
    """ONNX Runtime with the metrale reference ops: run an export's metrale graph on the CPU."""

    def get_name_opt_impl(self):
        return "ONNX-Runtime with the metrale reference ops", "metrale-onnxrt"

    def add_to_script_impl(self, script):
        script.add_import(imports=["OnnxrtRunner"], frm="polygraphy.backend.onnxrt")
        script.add_import(imports=["SessionFromMetraleOnnx"], frm=__name__)
        loader = script.add_loader(make_invocable("SessionFromMetraleOnnx", self.arg_groups[ModelArgs].path),
                                   "build_metrale_session")
        script.add_runner(make_invocable("OnnxrtRunner", loader, name="metrale-onnxrt"))


class MetraleQdqRunnerArgs(BaseRunnerArgs):
    """ONNX Runtime on the lowered qdq graph of the export (standard ONNX, what TensorRT-RTX builds)."""

    def get_name_opt_impl(self):
        return "ONNX-Runtime on the export's lowered qdq graph", "metrale-qdq"

    def add_parser_args_impl(self):
        self.group.add_argument("--metrale-qdq-model", metavar="PATH", default=None,
                                help="The lowered graph of --metrale-qdq (default: the export's only "
                                     "engines/onnx/qdq-*.onnx).")

    def parse_impl(self, args):
        self.qdq_model = args_util.get(args, "metrale_qdq_model")

    def add_to_script_impl(self, script):
        script.add_import(imports=["OnnxrtRunner"], frm="polygraphy.backend.onnxrt")
        script.add_import(imports=["SessionFromQdqOnnx"], frm=__name__)
        loader = script.add_loader(make_invocable("SessionFromQdqOnnx", self.qdq_model,
                                                  self.arg_groups[ModelArgs].path), "build_qdq_session")
        script.add_runner(make_invocable("OnnxrtRunner", loader, name="metrale-qdq"))


class MetraleStepArgs(BaseArgs):
    """metrale inputs: the shapes and value ranges of an export's inputs for one step."""

    def add_parser_args_impl(self):
        self.group.add_argument(
            "--metrale-step", metavar="BATCH,SEQ,PAST", default=None,
            help="Feed one step: BATCH sequences of SEQ new tokens after PAST cached ones. Sets the shape "
                 "of every input (token ids, positions, every layer's state) from the export's "
                 "manifest.json and the token ids' range to the vocabulary.")

    def parse_impl(self, args):
        step = args_util.get(args, "metrale_step")
        if step is None:
            return
        from polygraphy.common import TensorMetadata
        from polygraphy.logger import G_LOGGER

        try:
            batch, seq, past = (int(v) for v in step.split(","))
        except ValueError:
            G_LOGGER.critical(f"--metrale-step: expected BATCH,SEQ,PAST (three integers), found {step!r}")
        manifest_path = find_manifest(self.arg_groups[ModelArgs].path or ".")
        if manifest_path is None:
            G_LOGGER.critical(f"--metrale-step: no manifest.json of a metrale export beside "
                              f"{self.arg_groups[ModelArgs].path} or above it")
        manifest = json.loads(manifest_path.read_text())
        dims = {"batch": batch, "seq": seq, "past": past}
        meta = TensorMetadata()
        for inp in manifest["inputs"]:
            meta.add(inp["name"], None, [dims.get(d, d) for d in inp["shape"]])
        self.arg_groups[ModelArgs].input_shapes = meta
        vocab = manifest["model"]["vocab_size"]
        positions = manifest["model"].get("max_position_embeddings", 4096)
        ranges = self.arg_groups[DataLoaderArgs].val_range or {}
        ranges.setdefault("input_ids", (0, vocab - 1))
        ranges.setdefault("position_ids", (0, max(positions - 1 - seq - past, 0)))
        self.arg_groups[DataLoaderArgs].val_range = ranges


def arg_groups():
    """The entry point: Polygraphy calls this and adds the groups to ``polygraphy run``."""
    return [MetraleStepArgs(), MetraleOnnxrtRunnerArgs(), MetraleQdqRunnerArgs()]
