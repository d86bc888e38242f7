"""Run an exported graph in ONNX Runtime on the CPU, with the metrale ops executed by their
reference implementations (docs/ops.md) through onnxruntime-extensions' Python custom ops.

onnxruntime-extensions serves Python ops only in its own domain (``ai.onnx.contrib``) and with a
fixed input list per op, so the session runs on a copy of the graph in which every metrale node is
moved to that domain and renamed to a variant naming its activation dtype and present optional
inputs (e.g. ``W4A16Proj__float__x_w_s_b``); each variant is registered once per process.
onnxruntime-extensions takes no bfloat16 (FloatProj's weight, W4A16Proj's scales): a bfloat16
initializer reaches the Python op as its bits, through an INT16 alias of the same stored bytes
(``<name>__bits``: no copy in the graph, no float32 widening), viewed as bfloat16 again before the
reference runs; a bfloat16 value computed in the graph goes through a Cast to float32 (exact) and a
``__widened`` variant, narrowed back. (Widening an 8B lm_head took two float32 copies, 5 GB, the
peak of ``compare``.) The file on disk is never modified; a graph of an older op contract is
refused (``contract.check_model``).

Invariants: the weights are never loaded into the graph proto nor re-serialized: the graph is read
with ``load_external_data=False``, shape inference sees only the weights' declared types and
shapes, and ONNX Runtime reads the external data from the export directory by path
(``session.model_external_initializers_file_folder_path``), so exports past protobuf's 2 GiB limit
run as well.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op

from .. import contract, onnx_nodes
from ..errors import InputError
from ..exporter.external_data import external_data_files
from ..exporter.names import REFERENCE_DTYPES
from . import onnx_translation  # noqa: F401  (registers the schemas shape inference reads)
from . import torch_ops

CONTRIB = "ai.onnx.contrib"
_ORT_TYPES = {"float32": (onnx.TensorProto.FLOAT, ("float", PyCustomOpDef.dt_float)),
              "float16": (onnx.TensorProto.FLOAT16, ("float16", PyCustomOpDef.dt_float16))}
_DT = dict(_ORT_TYPES[name] for name in REFERENCE_DTYPES)
# Contract dtypes the Python ops take as 16-bit integers of the same bits (an initializer's INT16
# alias) or widened (exactly) to float32 through a Cast (a computed value), and their torch dtype.
_WIDENED = {"bfloat16": torch.bfloat16}
_BITS_SUFFIX = "__bits"
_INPUT_DT = {"int8": PyCustomOpDef.dt_int8, "float32": PyCustomOpDef.dt_float, "int32": PyCustomOpDef.dt_int32,
             **{d: PyCustomOpDef.dt_int16 for d in _WIDENED}}
# A float attribute reaches a Python op as text: onnxruntime-extensions hands dt_float attributes
# over with 7 significant digits (0.0883883 for Qwen3-8B's float32 scale 0.0883883461356163, which
# moved the Attention op's scores and flipped P's bf16 roundings), so the reference graph carries
# each float attribute as the exact decimal of its float32 value (``repr``) and the op parses it.
_ATTR_DT = {"int": PyCustomOpDef.dt_int64, "float": PyCustomOpDef.dt_string, "string": PyCustomOpDef.dt_string}
_registered: set[str] = set()


def _impl(op_type: str, present: list[str], outputs: list[str], widened: bool = False):
    """A numpy-in, numpy-out function running the reference of ``op_type`` (the ``outputs``
    present, of an op of several); ``widened``: its bfloat16 inputs come as float32, else as bits."""
    spec = contract.op(op_type)

    floats = [a.name for a in spec.attributes if a.type == "float"]

    def run(x, *rest, **attrs):
        attrs.update({k: float(attrs[k]) for k in floats if k in attrs})
        t = dict(zip(present, (torch.from_numpy(np.ascontiguousarray(a)) for a in rest)))
        for i in spec.inputs:
            if i.dtype in _WIDENED and i.name in t:  # back from the exact float32 Cast, or the bits
                a = t[i.name]
                t[i.name] = a.to(_WIDENED[i.dtype]) if widened else a.view(_WIDENED[i.dtype])
        xt = torch.from_numpy(np.ascontiguousarray(x))
        out = torch_ops.reference(op_type, xt, t, attrs)
        if not isinstance(out, tuple):
            return out.numpy()
        every = dict(zip((o.name for o in spec.outputs), out))
        return tuple(every[o].contiguous().numpy() for o in outputs)

    return run


def attribute_types(op_type: str) -> dict:
    """The onnxruntime-extensions attribute types of ``op_type``'s variants (from the contract)."""
    spec = contract.op(op_type)
    return {a.name: _ATTR_DT[a.type] for a in spec.attributes}


def _check_activation_type(op_type: str, x_type: int) -> None:
    if x_type not in _DT:
        name = onnx.TensorProto.DataType.Name(x_type)
        raise InputError(
            f"{op_type}: the ONNX Runtime reference runs float32 or float16 activations, found {name}; "
            "export with --dtype float32 to verify on the CPU"
        )


def _register(name: str, op_type: str, x_type: int, present: list[str], outputs: list[str],
              widened: bool) -> None:
    """Register the Python op ``name``: ``op_type``'s variant with these inputs and outputs."""
    spec = contract.op(op_type)
    types = {**_INPUT_DT, "x": _DT[x_type][1]}
    if widened:
        types.update({d: PyCustomOpDef.dt_float for d in _WIDENED})
    onnx_op(op_type=name, domain=CONTRIB,
            inputs=[_DT[x_type][1]] + [types[spec.input(p).dtype] for p in present],
            outputs=[types[spec.output(o).dtype] for o in outputs],
            attrs=attribute_types(op_type))(_impl(op_type, present, outputs, widened))
    _registered.add(name)


def _variant_name(op_type: str, x_type: int, present: list[str], widened: bool) -> str:
    """``<op>__<activation type>__<each present input's initials>[__widened]``."""
    tag = "_".join("".join(w[0] for w in p.split("_")) for p in present)
    return f"{op_type}__{_DT[x_type][0]}__{tag}" + ("__widened" if widened else "")


def _variant(op_type: str, x_type: int, has: dict[str, bool], widened: bool = False) -> str:
    _check_activation_type(op_type, x_type)
    spec = contract.op(op_type)
    present = [i.name for i in spec.inputs if not i.optional or has[i.name]]
    outputs = [o.name for o in spec.outputs if not o.optional or has[o.gate]]
    name = _variant_name(op_type, x_type, present, widened)
    if name not in _registered:
        _register(name, op_type, x_type, present, outputs, widened)
    return name


def _flags(spec: contract.OpSpec, present: dict[str, bool]) -> dict[str, bool]:
    """Optional input name -> present, and gate attribute -> set (an optional output's gate is
    always some optional input's)."""
    return {**present, **{i.gate: present[i.name] for i in spec.inputs if i.optional}}


def _register_all() -> None:
    """Register every variant up front: registering a Python op after a session was created with
    the extensions library crashes the process (seen with onnxruntime-extensions 0.15.2)."""
    import itertools

    for op_type, spec in contract.OPS.items():
        optional = spec.optional_inputs
        forms = (False, True) if any(i.dtype in _WIDENED for i in spec.inputs) else (False,)
        for x_type in _DT:
            for bits in itertools.product((False, True), repeat=len(optional)):
                for widened in forms:
                    _variant(op_type, x_type, _flags(spec, dict(zip(optional, bits))), widened)


_register_all()


def load_graph(path: str | Path) -> onnx.ModelProto:
    """The graph of an ONNX file with its external weights left on disk (references only)."""
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # protobuf DecodeError, OSError: an unreadable or truncated file
        raise InputError(f"{path}: cannot read the ONNX graph: {e}") from e
    external_data_files(model, Path(path))  # a missing or truncated weights file: one line, not ORT's traceback
    return model


def value_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every value of ``model`` (inputs, outputs, inferred intermediates,
    initializers). Shape inference runs on the proto as given: with external weights, only their
    declared types and shapes are read, so no weight is loaded or re-serialized."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {}
    for v in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        if v.type.tensor_type.elem_type:
            types[v.name] = v.type.tensor_type.elem_type
    for init in model.graph.initializer:
        types[init.name] = init.data_type
    return types


def _add_outputs(model: onnx.ModelProto, names, types: dict[str, int]) -> None:
    have = {o.name for o in model.graph.output}
    for name in names:
        if name not in have:
            model.graph.output.append(onnx.helper.make_tensor_value_info(name, types.get(name, 0), None))
            have.add(name)


def _first_float_input(model: onnx.ModelProto) -> int:
    """The element type assumed for a metrale node whose activation type was not inferred."""
    float_inputs = [v.type.tensor_type.elem_type for v in model.graph.input
                    if v.type.tensor_type.elem_type in _DT]
    return float_inputs[0] if float_inputs else onnx.TensorProto.FLOAT


def bits_alias(init: onnx.TensorProto) -> onnx.TensorProto:
    """An INT16 initializer holding the bits of bfloat16 ``init`` (``<name>__bits``): the same raw
    or external bytes, retyped (no data read); bits kept in ``int32_data`` are moved to int16 values."""
    alias = onnx.TensorProto()
    alias.CopyFrom(init)
    alias.name = init.name + _BITS_SUFFIX
    alias.data_type = onnx.TensorProto.INT16
    if init.int32_data:  # bfloat16 bits as unsigned 16-bit numbers; INT16 takes them signed
        del alias.int32_data[:]
        alias.int32_data.extend(np.asarray(init.int32_data, np.uint32).astype(np.uint16).view(np.int16).tolist())
    return alias


def _reference_node(node: onnx.NodeProto, x_type: int, bf16_inits: dict, aliases: dict) -> list[onnx.NodeProto]:
    """``node`` (a copy of a metrale node, changed in place) as the Python op's variant: its
    bfloat16 inputs read through their initializers' INT16 aliases (made once in ``aliases``), or,
    where one is computed in the graph, through Casts that widen them (the ``__widened`` variant)."""
    attrs = onnx_nodes.attributes(node)
    spec = contract.op(node.op_type)
    present_names = spec.present_inputs(attrs)
    flags = _flags(spec, {name: name in present_names for name in spec.optional_inputs})
    present = [i for i in spec.inputs if not i.optional or flags[i.name]]
    narrow = [(pos, i) for pos, i in enumerate(present, start=1) if i.dtype in _WIDENED and pos < len(node.input)]
    widened = any(node.input[pos] not in bf16_inits for pos, _ in narrow)
    casts = _widen(node, narrow) if widened else _alias(node, narrow, bf16_inits, aliases)
    node.op_type = _variant(node.op_type, x_type, flags, widened)
    node.domain = CONTRIB
    _python_op_attributes(node)
    return [*casts, node]


def _alias(node: onnx.NodeProto, narrow, bf16_inits: dict, aliases: dict) -> list[onnx.NodeProto]:
    """Point ``node``'s bfloat16 inputs at their initializers' INT16 aliases (no Casts needed)."""
    for pos, _ in narrow:
        name = node.input[pos]
        if name not in aliases:
            aliases[name] = bits_alias(bf16_inits[name])
        node.input[pos] = aliases[name].name
    return []


def _widen(node: onnx.NodeProto, narrow) -> list[onnx.NodeProto]:
    """The Casts that widen ``node``'s bfloat16 inputs to float32, which it then reads."""
    casts = []
    for pos, i in narrow:
        name = node.input[pos]
        wide = f"{name}__float32"
        casts.append(onnx.helper.make_node(
            "Cast", [name], [wide], to=onnx.TensorProto.FLOAT, name=f"{node.name}__cast_{i.name}"))
        node.input[pos] = wide
    return casts


def _python_op_attributes(node: onnx.NodeProto) -> None:
    """``node``'s attributes as the Python op takes them: no plugin_version, floats as text."""
    for j in reversed(range(len(node.attribute))):
        if node.attribute[j].name == "plugin_version":  # TensorRT's, not the Python op's
            del node.attribute[j]
    for a in node.attribute:  # exact text of each float (see _ATTR_DT)
        if a.type == onnx.AttributeProto.FLOAT:
            text = repr(a.f).encode()  # a.f is the stored float32, widened exactly
            a.ClearField("f")
            a.type, a.s = onnx.AttributeProto.STRING, text


def _reads(g: onnx.GraphProto) -> set[str]:
    """Every name the nodes of ``g`` read, in subgraphs too, and its outputs."""
    reads = {o.name for o in g.output}
    for n in g.node:
        reads.update(n.input)
        for a in n.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                reads |= _reads(sub)
    return reads


def _use_aliases(graph: onnx.GraphProto, aliases: dict[str, onnx.TensorProto]) -> None:
    """Add the INT16 aliases to ``graph``'s initializers, dropping the bfloat16 ones nothing else reads."""
    read = _reads(graph)
    kept = [t for t in graph.initializer if t.name not in aliases or t.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept + list(aliases.values()))


def to_reference_graph(model: onnx.ModelProto, extra_outputs=()) -> onnx.ModelProto:
    """A copy of ``model`` whose metrale nodes run as onnxruntime-extensions Python ops, returning
    also the intermediate values ``extra_outputs`` (for verification). External weights stay
    references; a bfloat16 initializer only metrale ops read is replaced by its INT16 alias."""
    contract.check_model(model, "the ONNX Runtime reference")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    types = value_types(out)
    _add_outputs(out, extra_outputs, types)
    fallback = _first_float_input(out)
    bf16_inits = {t.name: t for t in out.graph.initializer if t.data_type == onnx.TensorProto.BFLOAT16}
    aliases: dict[str, onnx.TensorProto] = {}
    nodes = []
    for original in out.graph.node:
        node = onnx.NodeProto()
        node.CopyFrom(original)
        if node.domain != contract.DOMAIN:
            nodes.append(node)
            continue
        nodes.extend(_reference_node(node, types.get(node.input[0], fallback), bf16_inits, aliases))
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    if aliases:
        _use_aliases(out.graph, aliases)
    kept = [o for o in out.opset_import if o.domain != contract.DOMAIN]
    del out.opset_import[:]
    out.opset_import.extend(kept + [onnx.helper.make_opsetid(CONTRIB, 1)])
    return out


def reference_session(model: str | Path | onnx.ModelProto, threads: int | None = None,
                      base_dir: str | Path | None = None, extra_outputs=(),
                      prepack: bool = True) -> ort.InferenceSession:
    """An ONNX Runtime CPU session of ``model`` with the metrale reference ops.

    ``model`` is a path (its external data is read from its directory) or a graph proto whose
    external data lies in ``base_dir``. ``prepack=False``: no second, repacked copy of the float
    weights (the lm_head's MatMul), for sessions that run a few times."""
    if isinstance(model, onnx.ModelProto):
        proto = model
    else:
        proto, base_dir = load_graph(model), Path(model).parent
    ref = to_reference_graph(proto, extra_outputs)
    so = ort.SessionOptions()
    if base_dir is not None:
        so.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                    str(Path(base_dir).resolve()))
    so.register_custom_ops_library(get_library_path())
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    if not prepack:
        so.add_session_config_entry("session.disable_prepacking", "1")
    return ort.InferenceSession(ref.SerializeToString(), so, providers=["CPUExecutionProvider"])
