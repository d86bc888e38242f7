"""The shape of an op spec: ``Input``, ``Attribute``, ``Output`` and ``OpSpec`` (frozen dataclasses),
with the derived views every consumer reads (attribute orders, torch arguments, gates, defaults,
enum codes, a node's version).

Invariants:
- data only: the specs themselves are contract/ops.py's, the version history contract/versions.py's;
- every view is a pure function of the spec (and of ``VALUE_SINCE`` for ``node_version``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .versions import VALUE_SINCE

@dataclass(frozen=True)
class Input:
    """One positional input after x: ``dtype`` as ONNX names it ("int8", "float32", ...; "x": the
    dtype of x), ``shape`` as expressions of the attributes, ``gate`` the attribute that says
    whether an optional one is present (``has_<name>``, or one the op takes anyway, e.g. combine)."""

    name: str
    dtype: str
    shape: tuple[str, ...]
    gate: str | None = None
    doc: str = ""
    encoding: str | None = None  # the bits an int8 input holds, where they are a float format: "e4m3fn"
    # The value of ``gate`` at which the input is present: 1 for a has_* flag, or a value of an
    # enumerated attribute (W8A8Proj's input_scale: activation_scale_granularity="tensor").
    gate_value: object = 1

    @property
    def optional(self) -> bool:
        return self.gate is not None

    def present(self, attrs: dict, defaults: dict | None = None) -> bool:
        """Whether a node with ``attrs`` (absent ones: ``defaults``, else 0) has this input."""
        if self.gate is None:
            return True
        value = attrs.get(self.gate, (defaults or {}).get(self.gate, 0))
        if isinstance(value, bytes):
            value = value.decode()
        if isinstance(self.gate_value, int):
            return int(value) == self.gate_value
        return value == self.gate_value


@dataclass(frozen=True)
class Attribute:
    """One attribute (= one plugin field): ``type`` is "int" (ONNX INT, TensorRT kINT32), "float"
    (ONNX FLOAT, kFLOAT32) or "string" (ONNX STRING, kCHAR); ``values`` the allowed values (None: any, see ``doc``);
    ``default`` what a reader assumes when the attribute is absent (None: required)."""

    name: str
    type: str
    values: tuple | None = None
    default: object = None
    doc: str = ""

    @property
    def is_gate(self) -> bool:
        return self.name.startswith("has_")


@dataclass(frozen=True)
class Output:
    """One positional output: ``dtype`` as for ``Input`` ("x": x's dtype), ``shape`` as expressions
    of "m" (x's rows), "..." (x's leading dimensions, all but the last), "x.<i>" (x's dimension
    i) and the attributes, ``gate`` the attribute that says whether an optional one is present, ``absent`` the input the torch op returns (a copy of) when it is not."""

    name: str
    dtype: str
    shape: tuple[str, ...]
    gate: str | None = None
    absent: str | None = None
    doc: str = ""

    @property
    def optional(self) -> bool:
        return self.gate is not None


_Y = (Output("y", "x", ("m", "n")),)


def _named(op_type: str, what: str, items: tuple, name: str):
    """The input, attribute or output ``name`` of an op; KeyError naming the ones it has."""
    for item in items:
        if item.name == name:
            return item
    raise KeyError(f"{op_type}: no {what} {name!r}; it has {', '.join(i.name for i in items) or 'none'}")


@dataclass(frozen=True)
class OpSpec:
    """One op of the domain: its type, the weight format it names, inputs, attributes, formats,
    outputs; the defaults after ``version`` are a projection's (one output y [m, n])."""

    op_type: str
    kind: str  # the export's --weight-quantization name of the weight format (projections)
    version: int
    weights: str = ""  # the weight format in words (messages)
    inputs: tuple[Input, ...] = ()
    attributes: tuple[Attribute, ...] = ()
    activation_formats: tuple[str, ...] = ()
    default_activation: str = ""
    doc: str = ""
    torch_op: str | None = None  # the torch custom op's name; None: "<kind>_proj"
    torch_input_order: tuple[str, ...] | None = None  # the torch op's input order; None: ``inputs``'
    grouped_of: str | None = None  # a grouped-expert op: the dense op each expert computes
    has_plugin: bool = True  # False: no TensorRT plugin yet (the plugin check skips it, saying so)
    category: str = "projection"  # "projection" or one of NON_PROJECTION_CATEGORIES
    x_name: str = "x"  # the first input's name (ONNX schema, messages)
    outputs: tuple[Output, ...] = _Y

    @property
    def is_projection(self) -> bool:
        """A quantized projection: it has an activation format, which the engine policy chooses."""
        return self.category == "projection"

    def output(self, name: str) -> Output:
        return _named(self.op_type, "output", self.outputs, name)

    def present_outputs(self, attrs: dict) -> tuple[str, ...]:
        """The outputs a node with ``attrs`` has, in order (gates absent count as 0)."""
        return tuple(o.name for o in self.outputs if not o.optional or int(attrs.get(o.gate, 0)))

    @property
    def torch_name(self) -> str:
        """The torch custom op ``metrale::<torch_name>``."""
        return self.torch_op or f"{self.kind}_proj"

    @property
    def torch_inputs(self) -> tuple[str, ...]:
        """The torch op's tensor arguments after x, in its order."""
        return self.torch_input_order or tuple(i.name for i in self.inputs)

    def attribute(self, name: str) -> Attribute:
        return _named(self.op_type, "attribute", self.attributes, name)

    @property
    def attribute_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    @property
    def int_attributes(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes if a.type == "int")

    @property
    def float_attributes(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes if a.type == "float")

    @property
    def string_attributes(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes if a.type == "string")

    @property
    def emitted_attributes(self) -> tuple[str, ...]:
        """The attribute order of an exported node: ints, floats, then strings, each in contract
        order (the projections have no floats)."""
        return self.int_attributes + self.float_attributes + self.string_attributes

    @property
    def torch_attributes(self) -> tuple[str, ...]:
        """The attributes that are torch op arguments (after the inputs): all but the has_* gates."""
        return tuple(a.name for a in self.attributes if not a.is_gate)

    @property
    def derived_gates(self) -> dict[str, str]:
        """has_* attribute -> the optional input whose presence sets it (not a torch argument)."""
        gates = {}
        for i in self.inputs:
            if i.optional and i.gate not in self.torch_attributes:
                gates.setdefault(i.gate, i.name)
        return gates

    @property
    def optional_inputs(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.inputs if i.optional)

    @property
    def fp8_inputs(self) -> tuple[str, ...]:
        """The inputs holding FP8 e4m3fn bit patterns (FP8-typed tensors in a standard-ONNX lowering)."""
        return tuple(i.name for i in self.inputs if i.encoding == "e4m3fn")

    def input(self, name: str) -> Input:
        return _named(self.op_type, "input", self.inputs, name)

    def present_inputs(self, attrs: dict) -> tuple[str, ...]:
        """The inputs after x a node with ``attrs`` has, in order (has_* gates absent count as 0,
        enumerated gates absent take their default)."""
        defaults = self.defaults()
        return tuple(i.name for i in self.inputs if i.present(attrs, defaults))

    def node_version(self, attrs: dict) -> int:
        """The lowest version of this op that expresses a node with ``attrs`` (docs/ops.md, Op
        versions): the op's version, except where every change since an older version is a new
        attribute value (``VALUE_SINCE``) that the node does not use."""
        version = self.version
        while version > 1 and (self.op_type, version) in VALUE_SINCE:
            name, value = VALUE_SINCE[(self.op_type, version)]
            found = attrs.get(name, self.defaults().get(name))
            if (found.decode() if isinstance(found, bytes) else found) == value:
                break
            version -= 1
        return version

    def defaults(self) -> dict:
        return {a.name: a.default for a in self.attributes if a.default is not None}

    def codes(self, name: str) -> dict:
        """value -> the kernels' enum code (its index in the attribute's ``values``)."""
        values = self.attribute(name).values
        if values is None:
            raise KeyError(f"{self.op_type}.{name} has no enumerated values")
        return {v: i for i, v in enumerate(values)}
