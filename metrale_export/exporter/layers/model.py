"""The causal language model: embedding, decoder layers, final norm and lm_head, with every layer's
state (the KV cache of attention layers, the conv and recurrent states of Gated DeltaNet layers) as
explicit inputs and outputs.

Built from a ``ModelConfig`` and a projection source (``FloatSource`` or a declared-format source)
on any device: on ``meta`` for tracing (no weight is read) or on the CPU for the PyTorch reference.
Invariants: module paths equal checkpoint tensor prefixes, so ONNX initializer names are checkpoint
names (plus the contract's suffixes for quantized projections); ``iter_weights`` yields every buffer
exactly once, one projection at a time.

The decoder-layer protocol (``registry.LAYERS[family]``): static ``plan(cfg, source, prefix)`` and
``plain_tensors(cfg, prefix)``; the constructor ``(cfg, specs, dtype)``; ``state_specs()`` (the
layer's state tensors, in the order ``forward(x, cos, sin, *states) -> (x, *new_states)`` takes and
returns them). Optional: static ``recipes(cfg, checkpoint, prefix)`` (tensors assembled from the
checkpoint's layout, ``views.RowRecipe``), ``rotary_dim(cfg)``, ``final_norm`` (a norm class) and
``routed_experts`` (True where the layer has a routed MoE block; default False).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import nn

from ...errors import CheckpointError
from ..checkpoint import all_finite
from ..experts import GroupedProjection
from ..projection import Projection
from .norm import RMSNorm, name_ops
from .qwen3 import DecoderLayer  # noqa: F401  (re-exported)
from .registry import layer_builder
from .rope import Rotary, inv_freq
from .state import StateSpec  # noqa: F401  (re-exported)
from .views import with_recipes
from ..projection_source import ProjectionSource

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class Embedding(nn.Module):
    """Token embedding as a gather on a plain buffer (unquantized)."""

    def __init__(self, vocab: int, hidden: int, dtype: torch.dtype):
        super().__init__()
        self.register_buffer("weight", torch.empty(vocab, hidden, dtype=dtype))

    def forward(self, input_ids):
        return torch.nn.functional.embedding(input_ids, self.weight)


class CausalLM(nn.Module):
    """forward(input_ids [B,S], position_ids [B,S], *states) -> (logits [B,S,V], *new_states); the
    states are each layer's ``state_specs()`` in layer order (``past_key.i``, ``past_value.i`` for
    attention layers). ``hidden_output``: one more output last, ``hidden_states`` [B,S,H] (the
    final norm's output, which lm_head reads), for the MTP head (``mtp.py``)."""

    def __init__(self, cfg, source: ProjectionSource, dtype: torch.dtype = torch.float32, layers: list[int] | None = None,
                 hidden_output: bool = False):
        super().__init__()
        self.cfg = cfg
        self.dtype = dtype
        self.hidden_output = hidden_output
        self.layer_ids = list(range(cfg.num_hidden_layers)) if layers is None else list(layers)
        builder = layer_builder(cfg.family)
        # Tensors the exported layout assembles from the checkpoint's (GDN's QKVZ, fused experts).
        self.recipes = self._layer_recipes(builder, source.checkpoint)
        source = with_recipes(source, self.recipes)
        specs = self._plan_layers(builder, source)
        head_weight = "model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"
        head_spec = source.spec("lm_head", cfg.vocab_size, cfg.hidden_size, "head", weight_name=head_weight)

        self.model = nn.Module()
        self.model.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, dtype)
        self.model.layers = nn.ModuleDict({str(i): builder(cfg, specs[i], dtype) for i in self.layer_ids})
        self.model.norm = getattr(builder, "final_norm", RMSNorm)(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.rotary_dim = builder.rotary_dim(cfg) if hasattr(builder, "rotary_dim") else cfg.head_dim
        self.model.rotary_emb = Rotary(self.rotary_dim, cfg.rope_theta)
        self.lm_head = Projection(head_spec, dtype)
        self.states = {i: tuple(self.model.layers[str(i)].state_specs()) for i in self.layer_ids}
        name_ops(self)
        if any(m.spec.kind != "none" for _, m in self.projections()):
            self.use_float_ops()

    def _layer_recipes(self, builder, ckpt) -> dict:
        """The recipes (``builder.recipes``) of every exported layer; none for a builder without."""
        recipes = {}
        if hasattr(builder, "recipes"):
            for i in self.layer_ids:
                recipes.update(builder.recipes(self.cfg, ckpt, f"model.layers.{i}"))
        return recipes

    def _plan_layers(self, builder, source: ProjectionSource) -> dict[int, object]:
        """Each exported layer's plan (``builder.plan``), and ``self.plain``: the plain tensors'
        buffer path -> checkpoint name, their headers checked now."""
        cfg = self.cfg
        self.plain: dict[str, str] = {"model.embed_tokens.weight": "model.embed_tokens.weight"}
        shapes = {"model.embed_tokens.weight": (cfg.vocab_size, cfg.hidden_size),
                  "model.norm.weight": (cfg.hidden_size,)}
        self.plain["model.norm.weight"] = "model.norm.weight"
        specs = {}
        for i in self.layer_ids:
            prefix = f"model.layers.{i}"
            specs[i] = builder.plan(cfg, source, prefix)
            for name, shape in builder.plain_tensors(cfg, prefix).items():
                self.plain[name] = name
                shapes[name] = shape
        ckpt = source.checkpoint
        for fqn, shape in shapes.items():
            ckpt.expect(self.plain[fqn], shape, FLOAT_DTYPES)
        return specs

    def use_float_ops(self) -> None:
        """A quantized export: the float projections that stay (lm_head, the router gates) run the
        FloatProj op on bf16 weights, so every reduction of the graph is a metrale op."""
        for _, m in self.named_modules():
            if hasattr(m, "use_float_op") and (not isinstance(m, Projection) or m.spec.kind == "none"):
                m.use_float_op()

    # --- weights -------------------------------------------------------------------------------
    def projections(self) -> list[tuple[str, Projection | GroupedProjection]]:
        """Every metrale projection: a ``Projection``, or a ``GroupedProjection`` of all experts."""
        return [(n, m) for n, m in self.named_modules() if isinstance(m, (Projection, GroupedProjection))]

    def computed(self) -> dict[str, Callable[[], torch.Tensor]]:
        return {"model.rotary_emb.inv_freq": lambda: inv_freq(self.rotary_dim, self.cfg.rope_theta)}

    def weight_nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buffers())

    def iter_weights(self, source: ProjectionSource, prefix: str = "", cast: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
        """(buffer path, tensor) for every buffer whose path starts with ``prefix``, reading the
        checkpoint one tensor at a time; ``cast=False`` leaves float tensors in their stored dtype
        (a buffer's ``copy_`` converts them, with no second full-size copy)."""
        source = with_recipes(source, self.recipes)
        buffers = dict(self.named_buffers())
        for fqn, make in self.computed().items():
            if fqn.startswith(prefix):
                yield fqn, make()
        yield from self._plain_weights(source.checkpoint, buffers, prefix, cast)
        yield from self._projection_weights(source, buffers, prefix, cast)

    def _plain_weights(self, ckpt, buffers: dict, prefix: str, cast: bool) -> Iterator[tuple[str, torch.Tensor]]:
        """The plain tensors under ``prefix`` (embedding, norms), each checked to be finite."""
        for fqn, name in self.plain.items():
            if not fqn.startswith(prefix):
                continue
            t = ckpt.get(name)
            if not all_finite(t):  # sliced: no float32 copy of the embedding
                raise CheckpointError(f"{ckpt.root}: tensor {name!r} holds NaN or infinite values")
            yield fqn, t.to(buffers[fqn].dtype) if cast else t  # the model dtype, or bf16 for a FloatProj weight

    def _projection_weights(self, source: ProjectionSource, buffers: dict, prefix: str,
                            cast: bool) -> Iterator[tuple[str, torch.Tensor]]:
        """The tensors of the projections under ``prefix``, as ``source`` loads them."""
        for path, proj in self.projections():
            if not f"{path}.".startswith(prefix):
                continue
            loaded = proj.load(source) if isinstance(proj, GroupedProjection) else source.load(proj.spec)
            for key, t in loaded.items():
                if cast and proj.spec.kind == "none" and t.dtype.is_floating_point:
                    t = t.to(buffers[f"{path}.{key}"].dtype)
                yield f"{path}.{key}", t

    def load_weights(self, source: ProjectionSource) -> "CausalLM":
        """Fill every buffer from the checkpoint (for the in-memory PyTorch reference)."""
        buffers = dict(self.named_buffers())
        for fqn, t in self.iter_weights(source):
            buffers[fqn].copy_(t)
        return self

    def load_part(self, source: ProjectionSource, path: str) -> nn.Module:
        """Materialize the submodule at ``path`` ("model.layers.3", "lm_head") on the CPU and fill
        its buffers from the checkpoint, the rest of the model left as it is (on ``meta`` for a
        model streamed part by part: ``compare`` holds one layer at a time)."""
        module = self.get_submodule(path)
        module.to_empty(device="cpu")
        buffers = dict(module.named_buffers(prefix=path))
        for fqn, t in self.iter_weights(source, prefix=f"{path}.", cast=False):
            buffers[fqn].copy_(t)
        return module

    def free_part(self, path: str) -> None:
        """Release the buffers of the submodule at ``path`` (back to ``meta``)."""
        self.get_submodule(path).to("meta")

    # --- graph -----------------------------------------------------------------------------------
    def state_specs(self) -> list[tuple[int, StateSpec]]:
        """(layer id, state) in graph order."""
        return [(i, s) for i in self.layer_ids for s in self.states[i]]

    def input_names(self) -> list[str]:
        return ["input_ids", "position_ids"] + [f"{s.name}.{i}" for i, s in self.state_specs()]

    def output_names(self) -> list[str]:
        return (["logits"] + [f"{s.output}.{i}" for i, s in self.state_specs()]
                + (["hidden_states"] if self.hidden_output else []))

    def dynamic_shapes(self, dims: dict) -> tuple:
        """torch.export dynamic shapes of ``forward``'s inputs, from ``dims`` ("batch", "seq",
        "past" -> ``torch.export.Dim``)."""
        tokens = {0: dims["batch"], 1: dims["seq"]}
        states = tuple({a: dims[d] for a, d in enumerate(s.shape) if isinstance(d, str)}
                       for _, s in self.state_specs())
        # forward(input_ids, position_ids, *states): the varargs take one nested entry.
        return (tokens, dict(tokens), states)

    def forward(self, input_ids, position_ids, *states):
        x, cos, sin = self.embed(input_ids, position_ids)
        presents = []
        j = 0
        for i in self.layer_ids:
            n = len(self.states[i])
            x, *new = self.layer(i, x, cos, sin, states[j:j + n])
            presents += new
            j += n
        if self.hidden_output:
            h = self.model.norm(x)
            return (self.lm_head(h), *presents, h)
        return (self.head(x), *presents)

    # The steps of ``forward``, also run one at a time by the streaming comparison.
    def embed(self, input_ids, position_ids):
        """(the residual stream's start, cos, sin)."""
        x = self.model.embed_tokens(input_ids)
        cos, sin = self.model.rotary_emb(position_ids, x.dtype)
        return x, cos, sin

    def layer(self, i: int, x, cos, sin, states):
        """Decoder layer ``i``: (x, *its new states)."""
        return self.model.layers[str(i)](x, cos, sin, *states)

    def head(self, x):
        """The logits of the residual stream's end."""
        return self.lm_head(self.model.norm(x))

    def example_inputs(self, batch: int = 2, seq: int = 3, past: int = 4, device="cpu"):
        """Inputs of the traced shapes (sizes chosen off 0/1 so no dimension specializes)."""
        ids = torch.zeros(batch, seq, dtype=torch.int64, device=device)
        pos = torch.arange(past, past + seq, device=device).expand(batch, seq).contiguous()
        states = [s.example(batch, past, self.dtype, device) for _, s in self.state_specs()]
        return (ids, pos, *states)
