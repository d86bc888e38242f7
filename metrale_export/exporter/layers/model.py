"""The causal language model: embedding, decoder layers, final norm and lm_head, with the KV cache
as explicit inputs and outputs.

Built from a ``ModelConfig`` and a projection source (``FloatSource`` or a declared-format source)
on any device: on ``meta`` for tracing (no weight is read) or on the CPU for the PyTorch reference.
Invariants: module paths equal checkpoint tensor prefixes, so ONNX initializer names are checkpoint
names (plus the contract's suffixes for quantized projections); ``iter_weights`` yields every buffer
exactly once, one projection at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import nn

from ...errors import CheckpointError
from ..projection import Projection, ProjSpec
from .attention import Attention
from .ffn import SwiGLU
from .norm import RMSNorm
from .rope import Rotary, inv_freq

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class Embedding(nn.Module):
    """Token embedding as a gather on a plain buffer (unquantized)."""

    def __init__(self, vocab: int, hidden: int, dtype: torch.dtype):
        super().__init__()
        self.register_buffer("weight", torch.empty(vocab, hidden, dtype=dtype))

    def forward(self, input_ids):
        return torch.nn.functional.embedding(input_ids, self.weight)


class DecoderLayer(nn.Module):
    """Pre-norm attention and FFN with residuals (Qwen3 dense)."""

    def __init__(self, cfg, specs: dict, dtype: torch.dtype):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.self_attn = Attention(cfg, specs["self_attn"], dtype)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.mlp = SwiGLU(specs["mlp"], dtype)

    def forward(self, x, cos, sin, past_k, past_v):
        h, k, v = self.self_attn(self.input_layernorm(x), cos, sin, past_k, past_v)
        x = x + h
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x, k, v

    @staticmethod
    def plan(cfg, source, prefix: str) -> dict:
        """The projection specs of one layer (headers checked, nothing read)."""
        h, hd = cfg.hidden_size, cfg.head_dim
        qn, kvn = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
        bias = cfg.attention_bias
        attn = {
            "q_proj": source.spec(f"{prefix}.self_attn.q_proj", qn, h, "attn", bias=bias),
            "k_proj": source.spec(f"{prefix}.self_attn.k_proj", kvn, h, "attn", bias=bias),
            "v_proj": source.spec(f"{prefix}.self_attn.v_proj", kvn, h, "attn", bias=bias),
            "o_proj": source.spec(f"{prefix}.self_attn.o_proj", h, qn, "attn"),
        }
        i = cfg.intermediate_size
        mlp = {
            "gate_proj": source.spec(f"{prefix}.mlp.gate_proj", i, h, "ffn"),
            "up_proj": source.spec(f"{prefix}.mlp.up_proj", i, h, "ffn"),
            "down_proj": source.spec(f"{prefix}.mlp.down_proj", h, i, "ffn"),
        }
        return {"self_attn": attn, "mlp": mlp}

    @staticmethod
    def plain_tensors(cfg, prefix: str) -> dict[str, tuple[int, ...]]:
        h, hd = cfg.hidden_size, cfg.head_dim
        return {
            f"{prefix}.input_layernorm.weight": (h,),
            f"{prefix}.post_attention_layernorm.weight": (h,),
            f"{prefix}.self_attn.q_norm.weight": (hd,),
            f"{prefix}.self_attn.k_norm.weight": (hd,),
        }


# Decoder layer classes by config family; other families (MoE, GDN) register theirs.
LAYER_BUILDERS: dict[str, type] = {"qwen3": DecoderLayer}


class CausalLM(nn.Module):
    """forward(input_ids [B,S], position_ids [B,S], past_key.i, past_value.i ...) ->
    (logits [B,S,V], present_key.i, present_value.i ...)."""

    def __init__(self, cfg, source, dtype: torch.dtype = torch.float32, layers: list[int] | None = None):
        super().__init__()
        self.cfg = cfg
        self.dtype = dtype
        self.layer_ids = list(range(cfg.num_hidden_layers)) if layers is None else list(layers)
        ckpt = source.checkpoint
        builder = LAYER_BUILDERS[cfg.family]
        # Plain tensors: buffer path -> checkpoint name, headers checked now.
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
        for fqn, shape in shapes.items():
            ckpt.expect(self.plain[fqn], shape, FLOAT_DTYPES)
        head_weight = "model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"
        head_spec = source.spec("lm_head", cfg.vocab_size, cfg.hidden_size, "head", weight_name=head_weight)

        self.model = nn.Module()
        self.model.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, dtype)
        self.model.layers = nn.ModuleDict({str(i): builder(cfg, specs[i], dtype) for i in self.layer_ids})
        self.model.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.model.rotary_emb = Rotary(cfg.head_dim, cfg.rope_theta)
        self.lm_head = Projection(head_spec, dtype)

    # --- weights -------------------------------------------------------------------------------
    def projections(self) -> list[tuple[str, Projection]]:
        return [(n, m) for n, m in self.named_modules() if isinstance(m, Projection)]

    def computed(self) -> dict[str, Callable[[], torch.Tensor]]:
        return {"model.rotary_emb.inv_freq": lambda: inv_freq(self.cfg.head_dim, self.cfg.rope_theta)}

    def weight_nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buffers())

    def iter_weights(self, source) -> Iterator[tuple[str, torch.Tensor]]:
        """(buffer path, tensor) for every buffer, reading the checkpoint one tensor at a time."""
        ckpt = source.checkpoint
        for fqn, make in self.computed().items():
            yield fqn, make()
        for fqn, name in self.plain.items():
            t = ckpt.get(name)
            if not torch.isfinite(t.to(torch.float32)).all():
                raise CheckpointError(f"{ckpt.root}: tensor {name!r} holds NaN or infinite values")
            yield fqn, t.to(self.dtype)
        for prefix, proj in self.projections():
            for key, t in source.load(proj.spec).items():
                if proj.spec.kind == "none" and t.dtype.is_floating_point:
                    t = t.to(self.dtype)
                yield f"{prefix}.{key}", t

    def load_weights(self, source) -> "CausalLM":
        """Fill every buffer from the checkpoint (for the in-memory PyTorch reference)."""
        buffers = dict(self.named_buffers())
        for fqn, t in self.iter_weights(source):
            buffers[fqn].copy_(t)
        return self

    # --- graph -----------------------------------------------------------------------------------
    def input_names(self) -> list[str]:
        names = ["input_ids", "position_ids"]
        for i in self.layer_ids:
            names += [f"past_key.{i}", f"past_value.{i}"]
        return names

    def output_names(self) -> list[str]:
        names = ["logits"]
        for i in self.layer_ids:
            names += [f"present_key.{i}", f"present_value.{i}"]
        return names

    def forward(self, input_ids, position_ids, *past):
        x = self.model.embed_tokens(input_ids)
        cos, sin = self.model.rotary_emb(position_ids, x.dtype)
        presents = []
        for j, i in enumerate(self.layer_ids):
            x, k, v = self.model.layers[str(i)](x, cos, sin, past[2 * j], past[2 * j + 1])
            presents += [k, v]
        logits = self.lm_head(self.model.norm(x))
        return (logits, *presents)

    def example_inputs(self, batch: int = 2, seq: int = 3, past: int = 4, device="cpu"):
        """Inputs of the traced shapes (sizes chosen off 0/1 so no dimension specializes)."""
        cfg = self.cfg
        ids = torch.zeros(batch, seq, dtype=torch.int64, device=device)
        pos = torch.arange(past, past + seq, device=device).expand(batch, seq).contiguous()
        kv = []
        for _ in self.layer_ids:
            for _ in range(2):
                kv.append(torch.zeros(batch, cfg.num_key_value_heads, past, cfg.head_dim, dtype=self.dtype, device=device))
        return (ids, pos, *kv)
