"""The Gated DeltaNet token mixer of Qwen3-Next (``linear_attn``): QKVZ and BA projections, a short
causal depthwise conv1d with its state, the gated delta rule with its recurrent state, the gated
RMSNorm and ``out_proj``.

The exported layout of ``in_proj_qkvz`` is **sequential** ``[Q | K | V | Z]``: output rows
``[0, kd)`` are the queries of all key heads (head-major, ``kd = Hk * dk``), then the keys, then the
values of all value heads (``vd = Hv * dv``), then the gate ``z``; ``in_proj_ba`` likewise
``[b | a]`` (``Hv`` rows each). That is the layout of the metrale runtime's GDN projections (and of
Qwen3.5's split ``in_proj_qkv``/``in_proj_z``): the conv channels are its first ``2 kd + vd`` rows,
in order, with no per-head shuffle in the graph. Checkpoints are read in either layout:
- interleaved per key head (``in_proj_qkvz.weight``, ``in_proj_ba.weight``: transformers'
  Qwen3-Next): for key head ``h``, ``[q_h | k_h | v_h | z_h]`` with ``r = Hv / Hk`` value heads in
  ``v_h`` and ``z_h``, and ``[b_h | a_h]``; the rows are permuted when read (``views.RowRecipe``);
- sequential, split (``in_proj_qkv.weight`` + ``in_proj_z.weight``, ``in_proj_b.weight`` +
  ``in_proj_a.weight``): the rows are concatenated.

State, per layer: ``conv_state [B, 2 kd + vd, K - 1]`` (the last ``K - 1`` conv inputs, model
dtype) and ``recurrent_state [B, Hv, dk, dv]`` (float32). Zeros are the state of an empty prefix.

Invariants:
- One code path for prefill and decode: the conv (``metrale::CausalConv1d``) runs on
  ``cat(conv_state, x)`` without padding, and the delta rule (``metrale::GatedDeltaRule``) is the
  recurrent form, one token at a time in order (docs/ops.md, "Gated DeltaNet"), so a token's
  outputs and the states do not depend on the batch nor on how the sequence was split into calls.
- The arithmetic is transformers' ``torch_recurrent_gated_delta_rule`` (its decode path) in
  float32 with the op's fixed summation order; its chunked prefill differs from it only by float32
  reassociation. beta, the decay and the conv's SiLU are float32 (transformers rounds beta and the
  conv output to the model dtype first).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ...errors import CheckpointError, ConfigError
from ...ops import torch_ops  # noqa: F401  (defines metrale::causal_conv1d and gated_delta_rule)
from ..projection import Projection
from .moe import Linear
from .norm import RMSNorm
from .views import Part, RowRecipe
from ..projection_source import ProjectionSource


@dataclass(frozen=True)
class GdnConfig:
    """The linear-attention keys of config.json (read from ``ModelConfig.raw``)."""

    hidden_size: int
    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_kernel: int
    eps: float

    @property
    def key_dim(self) -> int:
        return self.num_k_heads * self.head_k_dim

    @property
    def value_dim(self) -> int:
        return self.num_v_heads * self.head_v_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim

    @property
    def qkvz_dim(self) -> int:
        return 2 * self.key_dim + 2 * self.value_dim


def gdn_config(cfg) -> GdnConfig:
    raw, where = cfg.raw, f"config.json ({cfg.architecture})"

    def pos(key, default=None):
        v = raw.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{where}: key {key!r}: expected a positive integer, found {v!r}")
        return v

    out = GdnConfig(
        hidden_size=cfg.hidden_size,
        num_k_heads=pos("linear_num_key_heads"), num_v_heads=pos("linear_num_value_heads"),
        head_k_dim=pos("linear_key_head_dim"), head_v_dim=pos("linear_value_head_dim"),
        conv_kernel=pos("linear_conv_kernel_dim", 4), eps=cfg.rms_norm_eps,
    )
    if out.num_v_heads % out.num_k_heads:
        raise ConfigError(f"{where}: linear_num_value_heads={out.num_v_heads} is not a multiple of "
                          f"linear_num_key_heads={out.num_k_heads}")
    if out.conv_kernel < 2:
        raise ConfigError(f"{where}: key 'linear_conv_kernel_dim': expected at least 2, found {out.conv_kernel}")
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise ConfigError(f"{where}: key 'hidden_act': expected 'silu' (the GDN conv activation), found {act!r}")
    return out


# --- layouts -----------------------------------------------------------------------------------------

def interleaved_qkvz_to_sequential(g: GdnConfig) -> tuple[int, ...]:
    """Row ``j`` of the sequential QKVZ weight is row ``perm[j]`` of the interleaved one."""
    dk, r_dv = g.head_k_dim, g.num_v_heads // g.num_k_heads * g.head_v_dim
    per_head = 2 * dk + 2 * r_dv
    q, k, v, z = [], [], [], []
    for h in range(g.num_k_heads):
        base = h * per_head
        q += range(base, base + dk)
        k += range(base + dk, base + 2 * dk)
        v += range(base + 2 * dk, base + 2 * dk + r_dv)
        z += range(base + 2 * dk + r_dv, base + per_head)
    return tuple(q + k + v + z)


def interleaved_ba_to_sequential(g: GdnConfig) -> tuple[int, ...]:
    r = g.num_v_heads // g.num_k_heads
    b, a = [], []
    for h in range(g.num_k_heads):
        b += range(2 * r * h, 2 * r * h + r)
        a += range(2 * r * h + r, 2 * r * (h + 1))
    return tuple(b + a)


def gdn_recipes(g: GdnConfig, ckpt, prefix: str) -> dict[str, RowRecipe]:
    """The exported (sequential) ``in_proj_qkvz.weight`` and ``in_proj_ba.weight`` of ``prefix``
    (``model.layers.{i}.linear_attn``), from whichever layout the checkpoint has."""
    h = g.hidden_size
    qkvz, ba = f"{prefix}.in_proj_qkvz.weight", f"{prefix}.in_proj_ba.weight"
    split = [f"{prefix}.in_proj_{p}.weight" for p in ("qkv", "z", "b", "a")]
    if qkvz in ckpt:
        if ba not in ckpt:
            raise CheckpointError(f"{ckpt.root}: tensor {ba!r} is missing (the interleaved layout has "
                                  f"{qkvz!r}; expected its in_proj_ba beside it)")
        return {
            qkvz: RowRecipe((Part(qkvz),), (g.qkvz_dim, h), interleaved_qkvz_to_sequential(g),
                            what="interleaved QKVZ, read as sequential [Q|K|V|Z]"),
            ba: RowRecipe((Part(ba),), (2 * g.num_v_heads, h), interleaved_ba_to_sequential(g),
                          what="interleaved BA, read as sequential [b|a]"),
        }
    if all(name in ckpt for name in split):
        qkv, z, b, a = split
        return {
            qkvz: RowRecipe((Part(qkv), Part(z)), (g.qkvz_dim, h), what="sequential in_proj_qkv + in_proj_z"),
            ba: RowRecipe((Part(b), Part(a)), (2 * g.num_v_heads, h), what="in_proj_b + in_proj_a"),
        }
    missing = [n for n in split if n not in ckpt]
    raise CheckpointError(
        f"{ckpt.root}: {prefix}: expected the GDN input projection as {qkvz!r} (interleaved per head) "
        f"or as in_proj_qkv/in_proj_z/in_proj_b/in_proj_a (sequential); found neither (missing "
        f"{', '.join(repr(m) for m in missing)})")


def gdn_plan(g: GdnConfig, source: ProjectionSource, prefix: str) -> dict:
    return {
        "in_proj_qkvz": source.spec(f"{prefix}.in_proj_qkvz", g.qkvz_dim, g.hidden_size, "gdn"),
        "out_proj": source.spec(f"{prefix}.out_proj", g.hidden_size, g.value_dim, "gdn"),
    }


def gdn_plain_tensors(g: GdnConfig, prefix: str) -> dict[str, tuple[int, ...]]:
    return {
        f"{prefix}.in_proj_ba.weight": (2 * g.num_v_heads, g.hidden_size),
        f"{prefix}.conv1d.weight": (g.conv_dim, 1, g.conv_kernel),
        f"{prefix}.dt_bias": (g.num_v_heads,),
        f"{prefix}.A_log": (g.num_v_heads,),
        f"{prefix}.norm.weight": (g.head_v_dim,),
    }


# --- the ops -----------------------------------------------------------------------------------------

class CausalConv1d(nn.Module):
    """The metrale ``CausalConv1d`` op of one layer (its ``conv1d.weight`` buffer): forward(x
    [B, S, C], conv_state [B, C, K-1]) -> (silu(conv) [B, S, C], the new conv_state). ``op_name``
    (the node's ``name``, the checkpoint prefix ``...linear_attn.conv1d``) is set by ``name_ops``."""

    def __init__(self, channels: int, kernel: int, dtype: torch.dtype):
        super().__init__()
        self.channels, self.kernel = channels, kernel
        self.op_name = ""
        self.register_buffer("weight", torch.empty((channels, 1, kernel), dtype=dtype))

    def forward(self, x, conv_state):
        return torch.ops.metrale.causal_conv1d(x, self.weight, conv_state, self.channels, self.kernel, "gdn",
                                               self.op_name)


class DeltaRule(nn.Module):
    """The metrale ``GatedDeltaRule`` op of one layer: forward(mixed [B, S, 2 kd + vd], ba [B, S, 2 Hv],
    state [B, Hv, dk, dv]) -> (y [B, S, Hv, dv], the new state). Its ``A_log`` and ``dt_bias`` are
    its layer's buffers (checkpoint names ``...linear_attn.A_log``), read through ``owner``, which
    is not a registered submodule; ``op_name`` is the layer's prefix, set at construction."""

    def __init__(self, g: GdnConfig, owner: nn.Module, name: str):
        super().__init__()
        self.g = g
        self.op_name = name
        object.__setattr__(self, "owner", owner)  # not a child: the buffers keep their checkpoint paths

    def forward(self, mixed, ba, state):
        g = self.g
        return torch.ops.metrale.gated_delta_rule(mixed, ba, self.owner.A_log, self.owner.dt_bias, state,
                                                  g.num_k_heads, g.num_v_heads, g.head_k_dim, g.head_v_dim, "gdn",
                                                  self.op_name)


class GatedRMSNorm(RMSNorm):
    """transformers' Qwen3NextRMSNormGated: ``w * norm(x)`` then times ``silu(z)`` in float32."""

    def forward(self, x, z):
        return self._op(x, gate=z)[0]


class GatedDeltaNet(nn.Module):
    """forward(x [B,S,H], conv_state, recurrent_state) -> (y [B,S,H], conv_state, recurrent_state).

    Every reduction is a metrale op: the projections, ``in_proj_ba`` (FloatProj in a quantized
    export, ``use_float_ops``), the conv, the delta rule and the gated norm; what lies between
    them is slicing and reshaping."""

    def __init__(self, g: GdnConfig, specs: dict, dtype: torch.dtype):
        super().__init__()
        self.g = g
        self.in_proj_qkvz = Projection(specs["in_proj_qkvz"], dtype)
        self.in_proj_ba = Linear(2 * g.num_v_heads, g.hidden_size, dtype, family="gdn")
        self.conv1d = CausalConv1d(g.conv_dim, g.conv_kernel, dtype)
        self.register_buffer("dt_bias", torch.empty(g.num_v_heads, dtype=dtype))
        self.register_buffer("A_log", torch.empty(g.num_v_heads, dtype=dtype))
        self.delta_rule = DeltaRule(g, self, specs["in_proj_qkvz"].name.rsplit(".", 1)[0])
        self.norm = GatedRMSNorm(g.head_v_dim, g.eps, dtype)
        self.out_proj = Projection(specs["out_proj"], dtype)

    def forward(self, x, conv_state, recurrent_state):
        g = self.g
        b, s, _ = x.shape
        qkvz = self.in_proj_qkvz(x)
        mixed, z = qkvz[..., :g.conv_dim], qkvz[..., g.conv_dim:]
        ba = self.in_proj_ba(x)
        mixed, conv_state = self.conv1d(mixed, conv_state)
        core, recurrent_state = self.delta_rule(mixed, ba, recurrent_state)
        core = self.norm(core.reshape(-1, g.head_v_dim), z.reshape(-1, g.head_v_dim))
        return self.out_proj(core.reshape(b, s, g.value_dim)), conv_state, recurrent_state
