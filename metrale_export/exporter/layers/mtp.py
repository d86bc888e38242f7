"""Qwen3-Next's multi-token-prediction (MTP) head: the speculative drafter exported as its own graph,
``mtp.onnx``, beside the main model's.

The head (checkpoint tensors ``mtp.*``; the public Qwen3-Next layout, as vLLM's and SGLang's
``qwen3_next_mtp`` read it) predicts the token after next from the next token and the main model's
hidden state:

    e = embed_tokens(input_ids)                   (the main model's embedding, shared)
    x = mtp.fc([pre_fc_norm_embedding(e) | pre_fc_norm_hidden(hidden_states)])   (2H -> H)
    x = mtp.layers.0(x)                           (a full-attention Qwen3-Next decoder layer with its
                                                   own KV cache; its MLP is the MoE block or the dense
                                                   FFN as the config's rule gives layer index 0)
    logits = lm_head(mtp.norm(x))                 (the main model's lm_head, shared)

``hidden_states`` is the main model's final hidden state after its final norm, the tensor its
lm_head reads (vLLM passes the model's output hidden states, which its ``Qwen3NextModel`` returns
normed); the main graph gains it as the output ``hidden_states`` when the checkpoint has an MTP head.
The norms are Qwen3-Next's ``(1 + weight)`` RMSNorm; the projections and the attention are the same
modules (and so the same metrale ops and formats) as the main model's.

Invariants: module paths equal checkpoint names (``mtp.fc``, ``mtp.layers.0.self_attn.q_proj``,
``model.embed_tokens``, ``lm_head``), so ``MtpHead`` streams its weights with ``CausalLM``'s
``iter_weights``; a checkpoint with some ``mtp.*`` tensors but not all is refused with the first
missing tensor named (``CheckpointError``, exit 2); one without any has no head (``has_mtp``).
"""

from __future__ import annotations

import torch
from torch import nn

from ...errors import CheckpointError
from ..projection import Projection
from .model import FLOAT_DTYPES, CausalLM, Embedding
from .moe import expert_recipes, mlp_plain_tensors, mlp_plan
from .norm import name_ops
from .qwen3_next import (OffsetRMSNorm, Qwen3NextDecoderLayer, next_moe, gated_attention_plain_tensors,
                         gated_attention_plan)
from .rope import Rotary
from .views import with_recipes
from ..projection_source import ProjectionSource

PREFIX = "mtp"
LAYER = f"{PREFIX}.layers.0"
# The main graph's extra output, and the head's input of the same name.
HIDDEN_STATE = "hidden_states"
ONNX_NAME = "mtp.onnx"
DATA_NAME = "mtp.onnx.data"


def has_mtp(ckpt) -> bool:
    """Whether the checkpoint holds any ``mtp.*`` tensor (then it must hold the whole head)."""
    return any(n.startswith(f"{PREFIX}.") for n in ckpt.names())


def plain_tensors(cfg) -> dict[str, tuple[int, ...]]:
    """The head's unquantized tensors (norms, the router gates), checkpoint name -> shape."""
    h = cfg.hidden_size
    out = {f"{PREFIX}.pre_fc_norm_embedding.weight": (h,), f"{PREFIX}.pre_fc_norm_hidden.weight": (h,),
           f"{LAYER}.input_layernorm.weight": (h,), f"{LAYER}.post_attention_layernorm.weight": (h,)}
    out.update(gated_attention_plain_tensors(cfg, f"{LAYER}.self_attn"))
    out.update(mlp_plain_tensors(cfg, next_moe(cfg), LAYER))
    out[f"{PREFIX}.norm.weight"] = (h,)
    return out


class MtpHead(CausalLM):
    """forward(input_ids [B,S], position_ids [B,S], hidden_states [B,S,H], past_key.0, past_value.0)
    -> (logits [B,S,V], present_key.0, present_value.0). ``input_ids`` are the tokens after those
    whose hidden states are given (position ``p``'s hidden state with the token at ``p + 1``), at the
    positions of the hidden states, as vLLM's drafter feeds them."""

    def __init__(self, cfg, source: ProjectionSource, dtype: torch.dtype = torch.float32):
        nn.Module.__init__(self)
        self.cfg, self.dtype = cfg, dtype
        self.layer_ids = [0]
        self.hidden_output = False
        h = cfg.hidden_size
        moe = next_moe(cfg)
        ckpt = source.checkpoint
        try:
            self.recipes = expert_recipes(cfg, moe, ckpt, LAYER) if moe.is_sparse(0) else {}
            source = with_recipes(source, self.recipes)
            ckpt = source.checkpoint
            self.plain = {"model.embed_tokens.weight": "model.embed_tokens.weight"}
            shapes = {"model.embed_tokens.weight": (cfg.vocab_size, h), **plain_tensors(cfg)}
            for name in shapes:
                self.plain[name] = name
            for name, shape in shapes.items():
                ckpt.expect(name, shape, FLOAT_DTYPES)
            fc_spec = source.spec(f"{PREFIX}.fc", h, 2 * h, "ffn")
            specs = {"kind": "full_attention", "self_attn": gated_attention_plan(cfg, source, f"{LAYER}.self_attn"),
                     "mlp": mlp_plan(cfg, moe, source, LAYER)}
        except CheckpointError as e:
            raise CheckpointError(f"the MTP head ({PREFIX}.*; a checkpoint holds all of it or none): {e}") from e
        head_weight = "model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"
        head_spec = source.spec("lm_head", cfg.vocab_size, h, "head", weight_name=head_weight)

        self.model = nn.Module()
        self.model.embed_tokens = Embedding(cfg.vocab_size, h, dtype)
        self.rotary_dim = Qwen3NextDecoderLayer.rotary_dim(cfg)
        self.model.rotary_emb = Rotary(self.rotary_dim, cfg.rope_theta)
        self.mtp = nn.Module()
        self.mtp.pre_fc_norm_embedding = OffsetRMSNorm(h, cfg.rms_norm_eps, dtype)
        self.mtp.pre_fc_norm_hidden = OffsetRMSNorm(h, cfg.rms_norm_eps, dtype)
        self.mtp.fc = Projection(fc_spec, dtype)
        self.mtp.layers = nn.ModuleDict({"0": Qwen3NextDecoderLayer(cfg, specs, dtype)})
        self.mtp.norm = OffsetRMSNorm(h, cfg.rms_norm_eps, dtype)
        self.lm_head = Projection(head_spec, dtype)
        self.states = {0: tuple(self.mtp.layers["0"].state_specs())}
        name_ops(self)
        if any(m.spec.kind != "none" for _, m in self.projections()):
            self.use_float_ops()

    def input_names(self) -> list[str]:
        return ["input_ids", "position_ids", HIDDEN_STATE] + [f"{s.name}.{i}" for i, s in self.state_specs()]

    def dynamic_shapes(self, dims: dict) -> tuple:
        tokens = {0: dims["batch"], 1: dims["seq"]}
        states = tuple({a: dims[d] for a, d in enumerate(s.shape) if isinstance(d, str)}
                       for _, s in self.state_specs())
        return (tokens, dict(tokens), dict(tokens), states)

    def forward(self, input_ids, position_ids, hidden_states, *states):
        e = self.model.embed_tokens(input_ids)
        cos, sin = self.model.rotary_emb(position_ids, e.dtype)
        x = torch.cat((self.mtp.pre_fc_norm_embedding(e), self.mtp.pre_fc_norm_hidden(hidden_states)), dim=-1)
        x, *presents = self.mtp.layers["0"](self.mtp.fc(x), cos, sin, *states)
        return (self.lm_head(self.mtp.norm(x)), *presents)

    def example_inputs(self, batch: int = 2, seq: int = 3, past: int = 4, device="cpu"):
        ids, pos, *states = super().example_inputs(batch, seq, past, device)
        hidden = torch.zeros(batch, seq, self.cfg.hidden_size, dtype=self.dtype, device=device)
        return (ids, pos, hidden, *states)

    # Steps of CausalLM's streaming comparison that the head does not have.
    def embed(self, input_ids, position_ids):
        raise NotImplementedError("the MTP head is compared end to end, not streamed layer by layer")

    layer = head = embed
