"""Mixture-of-experts FFN (Qwen3-MoE, and Qwen3-Next's with a shared expert) and the Qwen3-MoE
decoder layer.

The router is a plain float matmul (softmax over the experts in float32, top-k, optionally
renormalized: ``norm_topk_prob``), as transformers. Quantized experts export as three
grouped-expert ops per layer (``exporter/experts.py``, docs/ops.md "Grouped-expert ops"):
gate and up per routed expert, down with the weighted combine, reading only the routed experts.
Unquantized experts, or ``--moe-experts dense``, export **every expert on every row**, one
``metrale`` projection (family ``moe``) per expert, combined with the routing weights (zero for the
experts a row did not select): no new op, and each row's output depends on that row alone, at
``num_experts / top_k`` times the expert FLOPs. The shared expert is always a dense SwiGLU.

Invariants:
- Exact against transformers: the same router arithmetic (ties in the top-k: the lower expert id
  first, ONNX TopK's rule), and the experts' contributions added in ascending expert id from +0, as
  transformers' ``index_add`` (the dense form adds an exact zero for an unselected expert).
- Checkpoints store experts per expert (``mlp.experts.{e}.gate_proj.weight``, what
  ``save_pretrained`` writes) or fused (``mlp.experts.gate_up_proj`` ``[E, 2I, H]`` and
  ``mlp.experts.down_proj`` ``[E, H, I]``, transformers' in-memory layout); both export as the
  per-expert projections.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ...errors import ConfigError
from ..experts import LAYOUTS, GroupedExperts, grouped_specs
from .attention import Attention, attention_plan
from .ffn import SwiGLU, swiglu_specs
from .qwen3 import DecoderLayer
from .norm import RMSNorm
from ..projection_source import ProjectionSource
from .views import Part, RowRecipe


@dataclass(frozen=True)
class MoeConfig:
    """The MoE keys of config.json (read from ``ModelConfig.raw``)."""

    num_experts: int
    top_k: int
    moe_intermediate_size: int
    norm_topk_prob: bool
    decoder_sparse_step: int
    mlp_only_layers: tuple[int, ...]
    shared_expert_intermediate_size: int  # 0: no shared expert

    def is_sparse(self, layer: int) -> bool:
        """transformers' rule: a MoE block unless listed in mlp_only_layers or off the sparse step."""
        return (layer not in self.mlp_only_layers and self.num_experts > 0
                and (layer + 1) % self.decoder_sparse_step == 0)


def _int(raw: dict, key: str, where: str, default=None, minimum: int = 1) -> int:
    value = raw.get(key, default)
    if value is None:
        raise ConfigError(f"{where}: missing required key {key!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{where}: key {key!r}: expected an integer >= {minimum}, found {value!r}")
    return value


def moe_config(cfg, shared_expert: bool = False, norm_topk_default: bool = False) -> MoeConfig:
    """Read and check the MoE keys (``shared_expert``: the config must name the shared expert's size)."""
    raw, where = cfg.raw, f"config.json ({cfg.architecture})"
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise ConfigError(f"{where}: key 'hidden_act': expected 'silu' (SwiGLU experts), found {act!r}")
    experts = _int(raw, _experts_key(raw), where, minimum=0)
    top_k = _int(raw, "num_experts_per_tok", where)
    if experts and top_k > experts:
        raise ConfigError(f"{where}: num_experts_per_tok={top_k} exceeds num_experts={experts}")
    only = _mlp_only_layers(raw, where)
    norm = raw.get("norm_topk_prob", norm_topk_default)
    if not isinstance(norm, bool):
        raise ConfigError(f"{where}: key 'norm_topk_prob': expected a boolean, found {norm!r}")
    return MoeConfig(
        num_experts=experts, top_k=top_k,
        moe_intermediate_size=_int(raw, "moe_intermediate_size", where),
        norm_topk_prob=norm,
        decoder_sparse_step=_int(raw, "decoder_sparse_step", where, default=1),
        mlp_only_layers=tuple(only),
        shared_expert_intermediate_size=(_int(raw, "shared_expert_intermediate_size", where)
                                         if shared_expert else 0),
    )


def _experts_key(raw: dict) -> str:
    """The key naming the expert count: transformers writes num_local_experts (its attribute_map of
    num_experts); the Qwen checkpoints, num_experts (also the key a missing count is reported under)."""
    return "num_local_experts" if "num_experts" not in raw and "num_local_experts" in raw else "num_experts"


def _mlp_only_layers(raw: dict, where: str) -> list[int]:
    only = raw.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) for i in only):
        raise ConfigError(f"{where}: key 'mlp_only_layers': expected a list of layer indices, found {only!r}")
    return only


def layer_index(prefix: str) -> int:
    """``model.layers.{i}`` -> i (the decoder-layer protocol passes the prefix)."""
    return int(prefix.rsplit(".", 1)[1])


# --- planning ---------------------------------------------------------------------------------------

def expert_recipes(cfg, moe: MoeConfig, ckpt, prefix: str) -> dict[str, RowRecipe]:
    """Per-expert weights from a fused checkpoint (none when experts are stored one by one)."""
    fused = f"{prefix}.mlp.experts.gate_up_proj"
    if fused not in ckpt:
        return {}
    h, i = cfg.hidden_size, moe.moe_intermediate_size
    down = f"{prefix}.mlp.experts.down_proj"
    out = {}
    for e in range(moe.num_experts):
        p = f"{prefix}.mlp.experts.{e}"
        out[f"{p}.gate_proj.weight"] = RowRecipe((Part(fused, e, 0, i),), (i, h), what="fused gate_up_proj")
        out[f"{p}.up_proj.weight"] = RowRecipe((Part(fused, e, i, 2 * i),), (i, h), what="fused gate_up_proj")
        out[f"{p}.down_proj.weight"] = RowRecipe((Part(down, e),), (h, i), what="fused down_proj")
    return out


def mlp_plan(cfg, moe: MoeConfig, source: ProjectionSource, prefix: str) -> dict:
    """The FFN of layer ``prefix``: a dense SwiGLU (family ``ffn``) or the sparse MoE block."""
    h = cfg.hidden_size
    if not moe.is_sparse(layer_index(prefix)):
        return {"kind": "dense", **swiglu_specs(source, f"{prefix}.mlp", h, cfg.intermediate_size, "ffn")}
    check_expert_count(source.checkpoint, moe, prefix)
    experts = _expert_specs(source, f"{prefix}.mlp.experts", h, moe)
    shared = None
    if moe.shared_expert_intermediate_size:
        shared = swiglu_specs(source, f"{prefix}.mlp.shared_expert", h, moe.shared_expert_intermediate_size, "moe")
    grouped = None
    if experts_layout(source) == "grouped":
        grouped = grouped_specs(f"{prefix}.mlp", experts, moe.top_k)
    return {"kind": "moe", "experts": experts, "grouped": grouped, "shared_expert": shared}


def _expert_specs(source: ProjectionSource, prefix: str, hidden: int, moe: MoeConfig) -> list[dict]:
    """Each routed expert's SwiGLU specs: gate|up fused in every expert, or in none (one grouped
    node has one layout: a checkpoint whose experts cannot all fuse keeps them apart)."""
    inter = moe.moe_intermediate_size
    experts = [swiglu_specs(source, f"{prefix}.{e}", hidden, inter, "moe") for e in range(moe.num_experts)]
    if len({"gate_up_proj" in e for e in experts}) > 1:
        experts = [swiglu_specs(source, f"{prefix}.{e}", hidden, inter, "moe", fuse=False)
                   for e in range(moe.num_experts)]
    return experts


def experts_layout(source: ProjectionSource) -> str:
    """``--moe-experts`` (grouped unless the request says dense)."""
    layout = source.request.moe_experts
    if layout not in LAYOUTS:
        raise ConfigError(f"--moe-experts: expected one of {', '.join(LAYOUTS)}, found {layout!r}")
    return layout


def check_expert_count(ckpt, moe: MoeConfig, prefix: str) -> None:
    """Refuse a checkpoint holding experts past ``num_experts`` (the config and the weights disagree);
    a missing expert is refused when its tensors are looked up."""
    names = getattr(ckpt, "names", None)
    if names is None:
        return
    stem = f"{prefix}.mlp.experts."
    ids = _stored_expert_ids(names(), stem)
    for fused in (f"{stem}gate_up_proj", f"{stem}down_proj"):
        _check_fused_count(ckpt, fused, moe.num_experts)
    extra = sorted(i for i in ids if i >= moe.num_experts)
    if extra:
        raise ConfigError(
            f"{stem[:-1]}: the checkpoint stores experts up to {max(ids)} ({len(ids)} experts), but config.json "
            f"says num_experts={moe.num_experts}; the expert count of the config and the weights must agree")


def _stored_expert_ids(names, stem: str) -> set[int]:
    """The expert ids of the tensors named ``{stem}{id}.*``."""
    heads = (name[len(stem):].split(".", 1)[0] for name in names if name.startswith(stem))
    return {int(head) for head in heads if head.isdigit()}


def _check_fused_count(ckpt, fused: str, num_experts: int) -> None:
    """Refuse a fused expert tensor whose dim 0 is not ``num_experts`` (absent: nothing to check)."""
    if fused in ckpt and ckpt.info(fused).shape[:1] != (num_experts,):
        raise ConfigError(
            f"{fused}: the fused tensor holds {list(ckpt.info(fused).shape)[:1]} experts along dim 0, but "
            f"config.json says num_experts={num_experts}; the expert count of the config and the weights "
            "must agree")


def mlp_plain_tensors(cfg, moe: MoeConfig, prefix: str) -> dict[str, tuple[int, ...]]:
    if not moe.is_sparse(layer_index(prefix)):
        return {}
    out = {f"{prefix}.mlp.gate.weight": (moe.num_experts, cfg.hidden_size)}
    if moe.shared_expert_intermediate_size:
        out[f"{prefix}.mlp.shared_expert_gate.weight"] = (1, cfg.hidden_size)
    return out


# --- modules ------------------------------------------------------------------------------------------

def topk_lower_id(probs: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.topk`` with the tie rule made explicit: among equal probabilities the lower expert id
    is taken (and listed) first. ONNX TopK defines this rule, so tracing keeps ``torch.topk``;
    torch's CPU and CUDA kernels leave ties unspecified, so in eager mode a stable descending sort
    gives the same choice (identical to torch.topk wherever no tie crosses the k-th place)."""
    if torch.compiler.is_compiling() or probs.device.type == "meta" or torch.compiler.is_exporting():
        return torch.topk(probs, k, dim=-1)
    vals, idx = torch.sort(probs, dim=-1, descending=True, stable=True)
    return vals[..., :k], idx[..., :k]


class Linear(nn.Module):
    """An unquantized float matmul on a plain buffer (router and shared-expert gate, GDN's
    in_proj_ba: tiny, and routing decisions stay in the checkpoint's precision); in a quantized export the
    ``metrale::float_proj`` op on a bf16 weight (``use_float_op``, docs/ops.md "FloatProj")."""

    def __init__(self, n: int, k: int, dtype: torch.dtype, family: str = "moe"):
        super().__init__()
        self.float_op = False
        self.family = family  # the FloatProj node's family
        self.op_name = ""  # the checkpoint prefix (layers.norm.name_ops)
        self.register_buffer("weight", torch.empty(n, k, dtype=dtype))

    def use_float_op(self) -> None:
        """Run the FloatProj op: the weight becomes a bf16 buffer (filled later, rounded once)."""
        self.float_op = True
        self.register_buffer("weight", torch.empty(self.weight.shape, dtype=torch.bfloat16, device=self.weight.device))

    def forward(self, x):
        if self.float_op:
            n, k = self.weight.shape
            y = torch.ops.metrale.float_proj(x.reshape(-1, k), self.weight, None, n, k, self.family, self.op_name)
            return y.reshape(*x.shape[:-1], n)
        if x.is_cuda and x.dim() == 2 and x.shape[0] > 1 and not torch.compiler.is_compiling():
            # One row at a time on CUDA in eager mode: cuBLAS picks its kernel by M, so a row alone
            # and inside a batch could differ in the last bit (and route differently).
            return torch.cat([torch.nn.functional.linear(x[i:i + 1], self.weight) for i in range(x.shape[0])])
        return torch.nn.functional.linear(x, self.weight)


class Router(nn.Module):
    """softmax and top-k a row through ``metrale::router`` (docs/ops.md, "Router"):
    forward(logits [M, E]) -> (topk_ids [M, top_k] int32, topk_weights [M, top_k])."""

    def __init__(self, num_experts: int, top_k: int, normalize: bool):
        super().__init__()
        self.num_experts, self.top_k, self.normalize = num_experts, top_k, int(normalize)
        self.op_name = ""  # the module's path (layers.norm.name_ops)

    def forward(self, logits):
        return torch.ops.metrale.router(logits, self.num_experts, self.top_k, self.normalize, "moe", self.op_name)


class SparseMoE(nn.Module):
    """Router + experts (+ the sigmoid-gated shared expert): the grouped-expert ops, or every expert
    on every row (the dense form)."""

    def __init__(self, cfg, moe: MoeConfig, specs: dict, dtype: torch.dtype):
        super().__init__()
        self.hidden = cfg.hidden_size
        self.top_k, self.num_experts, self.norm_topk_prob = moe.top_k, moe.num_experts, moe.norm_topk_prob
        self.gate = Linear(moe.num_experts, cfg.hidden_size, dtype)
        self.router = Router(moe.num_experts, moe.top_k, moe.norm_topk_prob)
        self.grouped = specs.get("grouped") is not None
        if self.grouped:
            self.experts = GroupedExperts(specs["grouped"], dtype)
        else:
            self.experts = nn.ModuleList(SwiGLU(s, dtype) for s in specs["experts"])
        if specs["shared_expert"] is not None:
            self.shared_expert = SwiGLU(specs["shared_expert"], dtype)
            self.shared_expert_gate = Linear(1, cfg.hidden_size, dtype)
        else:
            self.shared_expert = None

    def route(self, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(topk_ids [M, top_k] int32, topk_weights [M, top_k])``, transformers' router: softmax in
        float32, top-k (ties: the lower expert id first), renormalized if ``norm_topk_prob``, cast
        to the model dtype."""
        return self.router(self.gate(x2))

    def routing_weights(self, x2: torch.Tensor) -> torch.Tensor:
        """``[M, E]``: each row's weight for each expert, zero where not among its top-k."""
        idx, top = self.route(x2)
        return torch.zeros(x2.shape[0], self.num_experts, dtype=top.dtype, device=x2.device).scatter(
            1, idx.to(torch.int64), top)

    def forward(self, x):
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.hidden)
        if self.grouped:
            out = self.experts(x2, *self.route(x2))
        else:
            weights = self.routing_weights(x2)
            out = torch.zeros_like(x2)
            for e, expert in enumerate(self.experts):
                out = out + expert(x2) * weights[:, e:e + 1]
        if self.shared_expert is not None:
            shared = torch.sigmoid(self.shared_expert_gate(x2)) * self.shared_expert(x2)
            out = out + shared
        return out.reshape(*lead, self.hidden)


def build_mlp(cfg, moe: MoeConfig, specs: dict, dtype: torch.dtype) -> nn.Module:
    if specs["kind"] == "dense":
        return SwiGLU(specs, dtype)
    return SparseMoE(cfg, moe, specs, dtype)


# --- the Qwen3-MoE decoder layer ------------------------------------------------------------------------

class Qwen3MoeDecoderLayer(DecoderLayer):
    """Qwen3 attention and a sparse MoE (or, per mlp_only_layers/decoder_sparse_step, dense) FFN."""

    routed_experts = True

    def __init__(self, cfg, specs: dict, dtype: torch.dtype):
        nn.Module.__init__(self)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.self_attn = Attention(cfg, specs["self_attn"], dtype)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.mlp = build_mlp(cfg, moe_config(cfg), specs["mlp"], dtype)

    @staticmethod
    def plan(cfg, source: ProjectionSource, prefix: str) -> dict:
        return {"self_attn": attention_plan(cfg, source, f"{prefix}.self_attn"), "mlp": mlp_plan(cfg, moe_config(cfg), source, prefix)}

    @staticmethod
    def plain_tensors(cfg, prefix: str) -> dict[str, tuple[int, ...]]:
        return {**DecoderLayer.plain_tensors(cfg, prefix), **mlp_plain_tensors(cfg, moe_config(cfg), prefix)}

    @staticmethod
    def recipes(cfg, ckpt, prefix: str) -> dict[str, RowRecipe]:
        moe = moe_config(cfg)
        return expert_recipes(cfg, moe, ckpt, prefix) if moe.is_sparse(layer_index(prefix)) else {}

