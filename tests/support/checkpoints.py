"""Tiny quantized checkpoints of every supported format, for the tests.

A tiny Qwen3 is built with transformers (``Qwen3Config`` / ``Qwen3ForCausalLM``, seeded) and then:
- compressed-tensors and ModelOpt checkpoints are written by those libraries themselves
  (compressed-tensors' ``ModelCompressor`` after a min/max calibration of the weights with its own
  ``calculate_qparams``/``generate_gparam``, exactly what llm-compressor's data-free schemes do;
  ModelOpt's ``mtq.quantize`` + ``export_hf_checkpoint``);
- FP8 block (``weight_scale_inv``), GPTQ and AWQ checkpoints are written by small generators that
  follow the published layouts (the module docstrings of their readers), because their libraries
  (AutoGPTQ/GPTQModel, AutoAWQ) do not install on a CPU-only machine.
``add_mtp_head`` adds a random Qwen3-Next MTP head (``mtp.*``, the public layout) to a Qwen3-Next
checkpoint. Invariants: the same arguments give the same checkpoint; every dimension is a multiple of 128, so
every group size and the 128x128 blocks apply; test code only (it imports the test extras).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from metrale_export.ops import tolerances, w8a8

TINY = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
            rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False)
PROJ_SUFFIXES = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def tiny_qwen3(seed: int = 0, dtype: torch.dtype = torch.bfloat16, **overrides):
    """A seeded random tiny Qwen3ForCausalLM (weights with a realistic spread, outliers included)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(**{**TINY, **overrides}, architectures=["Qwen3ForCausalLM"])
    model = Qwen3ForCausalLM(cfg)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=g) * (0.5 if "embed" in name else 0.05))
                # a few outliers per matrix, so scales differ between groups and blocks
                idx = torch.randint(0, p.numel(), (max(1, p.numel() // 997),), generator=g)
                p.view(-1)[idx] *= 6.0
            else:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
    return model.to(dtype).eval()


def write_small_demo(out: Path, **overrides) -> Path:
    """The demo checkpoint with ``overrides`` of its config (fewer layers, a smaller vocabulary)."""
    from metrale_export.exporter.demo import DEMO_CONFIG, demo_tensors

    cfg = dict(DEMO_CONFIG, **overrides)
    (out / "config.json").write_text(json.dumps(cfg))
    save_file(demo_tensors(cfg), str(out / "model.safetensors"))
    return out


def stored_weight(tensors: dict[str, torch.Tensor], prefix: str) -> torch.Tensor:
    """The checkpoint weight behind projection ``prefix`` of an export: a fused projection's
    (``qkv_proj``, ``gate_up_proj``: exporter/fusion.py) is its parts' rows concatenated."""
    from metrale_export.exporter import fusion

    stem, _, leaf = prefix.rpartition(".")
    for fused, parts in (fusion.QKV, fusion.GATE_UP):
        if leaf == fused:
            return torch.cat([tensors[f"{stem}.{p}.weight"] for p in parts])
    return tensors[f"{prefix}.weight"]


def projection_names(cfg: dict | None = None) -> list[str]:
    layers = (cfg or TINY)["num_hidden_layers"]
    return [f"model.layers.{i}.{s}" for i in range(layers) for s in PROJ_SUFFIXES]


# --- compressed-tensors ---------------------------------------------------------------------------

def ct_scheme(name: str, group_size: int = 128):
    """compressed-tensors QuantizationScheme kwargs for our test schemes (its presets where one exists)."""
    from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES

    if name in ("W4A16", "W4A16_ASYM"):
        s = dict(PRESET_SCHEMES[name])
        w = s["weights"].model_copy(update={"group_size": group_size})
        return {"weights": w}
    if name == "FP8_BLOCK_A16":  # FP8 block weights, bf16 activations
        return {"weights": PRESET_SCHEMES["FP8_BLOCK"]["weights"]}
    if name == "FP8_TENSOR_TOKEN":  # per-tensor weight scale, dynamic per-token activations
        s = dict(PRESET_SCHEMES["FP8_DYNAMIC"])
        return {"weights": s["weights"].model_copy(update={"strategy": "tensor"}),
                "input_activations": s["input_activations"]}
    return dict(PRESET_SCHEMES[name])


def _calibrate(module, scheme) -> None:
    """Min/max weight calibration (llm-compressor's MinMax observer, data free)."""
    from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

    w = module.weight.detach().to(torch.float32)
    n, k = w.shape
    args = scheme.weights
    strategy = str(args.strategy.value if hasattr(args.strategy, "value") else args.strategy)
    gscale = None
    if strategy == "tensor_group":
        gscale = generate_gparam(w.amin().reshape(1), w.amax().reshape(1))
        module.weight_global_scale.data.copy_(gscale.to(module.weight_global_scale.dtype))
    if strategy in ("group", "tensor_group"):
        g = args.group_size
        blocks = w.reshape(n, k // g, g)
        lo, hi = blocks.amin(-1), blocks.amax(-1)
    elif strategy == "channel":
        lo, hi = w.amin(1, keepdim=True), w.amax(1, keepdim=True)
    elif strategy == "tensor":
        lo, hi = w.amin().reshape(1), w.amax().reshape(1)
    elif strategy == "block":
        bn, bk = args.block_structure
        blocks = w.reshape(n // bn, bn, k // bk, bk)
        lo, hi = blocks.amin((1, 3)), blocks.amax((1, 3))
    else:
        raise ValueError(strategy)
    scale, zp = calculate_qparams(lo.to(w.dtype), hi.to(w.dtype), args, global_scale=gscale)
    module.weight_scale.data.copy_(scale.reshape(module.weight_scale.shape).to(module.weight_scale.dtype))
    if hasattr(module, "weight_zero_point"):
        module.weight_zero_point.data.copy_(zp.reshape(module.weight_zero_point.shape).to(module.weight_zero_point.dtype))
    a = scheme.input_activations
    # static (False) or NVFP4's "local" (static global scale): a stored activation scale to calibrate
    if a is not None and str(getattr(a.dynamic, "value", a.dynamic)) in ("False", "local"):
        amax = torch.tensor([4.0])
        if hasattr(module, "input_global_scale"):
            module.input_global_scale.data.copy_(generate_gparam(-amax, amax).to(module.input_global_scale.dtype))
        if hasattr(module, "input_scale"):
            module.input_scale.data.copy_((amax / 448.0).reshape(module.input_scale.shape).to(module.input_scale.dtype))


def write_compressed_tensors(out: str | Path, scheme: str, group_size: int = 128, seed: int = 0,
                             ignore: tuple[str, ...] = ("lm_head",)) -> Path:
    """Quantize a tiny Qwen3 with a compressed-tensors scheme and save it compressed, as
    llm-compressor does (``ModelCompressor.compress_model`` + ``update_config``)."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (QuantizationConfig, QuantizationScheme,
                                                 apply_quantization_config)

    out = Path(out)
    model = tiny_qwen3(seed)
    qscheme = QuantizationScheme(targets=["Linear"], **ct_scheme(scheme, group_size))
    qc = QuantizationConfig(config_groups={"group_0": qscheme}, ignore=list(ignore))
    apply_quantization_config(model, qc, show_progress=False)
    for _, module in model.named_modules():
        if getattr(module, "quantization_scheme", None) is not None:
            _calibrate(module, module.quantization_scheme)
    compressor = ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    model.save_pretrained(out)
    compressor.update_config(str(out))
    return out


def ct_decompressed_weights(ckpt_dir: str | Path) -> dict[str, torch.Tensor]:
    """compressed-tensors' own decompression of every quantized Linear: name -> weight [N, K]."""
    from compressed_tensors.compressors.base import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig

    ckpt_dir = Path(ckpt_dir)
    cfg = json.loads((ckpt_dir / "config.json").read_text())["quantization_config"]
    qc = QuantizationConfig.model_validate(cfg)
    group = next(iter(qc.config_groups.values()))
    compressor = BaseCompressor.get_value_from_registry(qc.format)
    sd = load_file(str(ckpt_dir / "model.safetensors"))
    out = {}
    for name in projection_names():
        local = {k[len(name) + 1:]: v for k, v in sd.items() if k.startswith(name + ".")}
        out[name] = compressor.decompress(local, group)["weight"]
    return out


# --- ModelOpt -------------------------------------------------------------------------------------

def write_modelopt(out: str | Path, algo: str = "NVFP4", seed: int = 0) -> Path:
    """Quantize a tiny Qwen3 with ModelOpt (``NVFP4_DEFAULT_CFG`` / ``FP8_DEFAULT_CFG``, calibrated on
    seeded random tokens) and export it with ``export_hf_checkpoint``."""
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint

    out = Path(out)
    model = tiny_qwen3(seed)
    cfg = {"NVFP4": mtq.NVFP4_DEFAULT_CFG, "FP8": mtq.FP8_DEFAULT_CFG}[algo]
    g = torch.Generator().manual_seed(seed)

    def loop(m):
        with torch.no_grad():
            m(torch.randint(0, TINY["vocab_size"], (2, 16), generator=g))

    mtq.quantize(model, cfg, loop)
    export_hf_checkpoint(model, export_dir=str(out))
    return out


# --- generators from the published layouts ----------------------------------------------------------

def _float_checkpoint(out: Path, seed: int) -> tuple[dict[str, torch.Tensor], dict]:
    model = tiny_qwen3(seed)
    model.save_pretrained(out)
    sd = load_file(str(out / "model.safetensors"))
    cfg = json.loads((out / "config.json").read_text())
    return sd, cfg


def _save(out: Path, sd: dict[str, torch.Tensor], cfg: dict, qcfg: dict | None, extra: dict | None = None):
    if qcfg is not None:
        cfg["quantization_config"] = qcfg
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    for name, obj in (extra or {}).items():
        (out / name).write_text(json.dumps(obj, indent=2) + "\n")
    save_file({k: v.contiguous() for k, v in sd.items()}, str(out / "model.safetensors"), metadata={"format": "pt"})


def write_fp8_block(out: str | Path, seed: int = 0) -> Path:
    """An FP8 block checkpoint as Qwen3-FP8 / DeepSeek-V3 publish: float8_e4m3fn ``weight`` and
    float32 ``weight_scale_inv`` [ceil(N/128), ceil(K/128)] (multiplying), lm_head unquantized."""
    out = Path(out)
    sd, cfg = _float_checkpoint(out, seed)
    for name in projection_names():
        q = w8a8.quantize(sd[f"{name}.weight"].float(), "block128")
        sd[f"{name}.weight"] = q.weight.view(torch.float8_e4m3fn)
        sd[f"{name}.weight_scale_inv"] = q.weight_scale
    _save(out, sd, cfg, {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                         "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head"]})
    return out


def _int4_groups(w: torch.Tensor, g: int, sym: bool):
    """Round-to-nearest int4 per (row, group) of w [N, K]: codes [N, K] (0..15), zeros [N, G], scales [N, G] fp16."""
    n, k = w.shape
    blocks = w.float().reshape(n, k // g, g)
    if sym:
        scale = (blocks.abs().amax(-1) / 7.5).clamp_min(1e-8).half()
        zero = torch.full(scale.shape, 8, dtype=torch.int32)
    else:
        lo, hi = blocks.amin(-1).clamp(max=0), blocks.amax(-1).clamp(min=0)
        scale = ((hi - lo) / 15).clamp_min(1e-8).half()
        zero = torch.clamp(torch.round(-lo / scale.float()), 0, 15).to(torch.int32)
    codes = torch.clamp(torch.round(blocks / scale.float()[..., None]) + zero[..., None], 0, 15)
    return codes.reshape(n, k).to(torch.int32), zero, scale


def _pack_words(nibbles: torch.Tensor) -> torch.Tensor:
    """[R, 8C] values 0..15 -> int32 [R, C], value i of a word at bits 4i."""
    r, c8 = nibbles.shape
    v = nibbles.to(torch.int64).reshape(r, c8 // 8, 8)
    word = sum(v[..., i] << (4 * i) for i in range(8))
    return torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)


def write_gptq(out: str | Path, sym: bool = False, checkpoint_format: str = "gptq", group_size: int = 128,
               act_order: bool = False, seed: int = 0) -> Path:
    """A GPTQ checkpoint (AutoGPTQ's layout; v1 stores zero - 1). ``act_order`` writes a shuffled
    g_idx (what desc_act produces), which the reader must refuse."""
    out = Path(out)
    sd, cfg = _float_checkpoint(out, seed)
    gen = torch.Generator().manual_seed(seed + 7)
    for name in projection_names():
        w = sd.pop(f"{name}.weight")
        n, k = w.shape
        codes, zero, scale = _int4_groups(w, group_size, sym)
        # word [i, n] holds k = 8i + j at bits 4j
        sd[f"{name}.qweight"] = _pack_words(codes.t().reshape(k // 8, 8, n).permute(0, 2, 1).reshape(k // 8, n * 8))
        stored = (zero - 1) & 0xF if checkpoint_format == "gptq" else zero
        sd[f"{name}.qzeros"] = _pack_words(stored.t().contiguous())  # [G, N] -> [G, N/8]
        sd[f"{name}.scales"] = scale.t().contiguous()
        g_idx = torch.arange(k, dtype=torch.int32) // group_size
        if act_order:
            g_idx = g_idx[torch.randperm(k, generator=gen)]
        sd[f"{name}.g_idx"] = g_idx
    _save(out, sd, cfg, {"quant_method": "gptq", "bits": 4, "group_size": group_size, "desc_act": act_order,
                         "sym": sym, "checkpoint_format": checkpoint_format, "static_groups": False})
    return out


AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def write_awq(out: str | Path, group_size: int = 128, seed: int = 0) -> Path:
    """An AutoAWQ GEMM checkpoint: qweight [K, N/8] and qzeros [G, N/8] packed along N in AWQ's
    interleaved order, fp16 scales [G, N]."""
    out = Path(out)
    sd, cfg = _float_checkpoint(out, seed)
    order = list(AWQ_ORDER)
    for name in projection_names():
        w = sd.pop(f"{name}.weight")
        n, k = w.shape
        codes, zero, scale = _int4_groups(w, group_size, sym=False)

        def pack_n(v):  # [R, N] -> [R, N/8], nibble i holds column 8c + order[i]
            r = v.shape[0]
            return _pack_words(v.reshape(r, n // 8, 8)[:, :, order].reshape(r, n))

        sd[f"{name}.qweight"] = pack_n(codes.t().contiguous())
        sd[f"{name}.qzeros"] = pack_n(zero.t().contiguous())
        sd[f"{name}.scales"] = scale.t().contiguous()
    _save(out, sd, cfg, {"quant_method": "awq", "bits": 4, "group_size": group_size, "zero_point": True,
                         "version": "gemm", "modules_to_not_convert": None})
    return out




# --- the check every format's test makes ------------------------------------------------------------

def export_and_compare(ckpt_dir: str | Path, out_dir: str | Path, layers: list[int] | None = None):
    """Export ``ckpt_dir`` with ``--weight-quantization declared`` and compare ONNX Runtime (reference
    ops) with the PyTorch model built from the same checkpoint (docs/ops.md: tolerances.MODEL_QUANTIZED relative).

    Returns (ExportResult, compare Report)."""
    from metrale_export.compare.accuracy import Case, compare_export
    from metrale_export.exporter.export import ExportOptions, export
    from metrale_export.exporter.quantization import QuantRequest

    result = export(ckpt_dir, out_dir, ExportOptions(request=QuantRequest(weight="declared"), layers=layers))
    report = compare_export(result.out_dir, Path(ckpt_dir), cases=(Case("prefill", 2, 5, 0), Case("decode", 2, 1, 6)),
                            tolerance=tolerances.MODEL_QUANTIZED)
    return result, report


def source_for(ckpt_dir: str | Path, weight: str = "declared"):
    """The declared-format source of a checkpoint directory (what export selects)."""
    from metrale_export.exporter.checkpoint import Checkpoint
    from metrale_export.exporter.session import select_source
    from metrale_export.exporter.quantization import QuantRequest

    return select_source(Checkpoint.open(ckpt_dir), QuantRequest(weight=weight))


def contract_weight(source, name: str, n: int, k: int) -> torch.Tensor:
    """The float32 weight [N, K] the contract computes from ``source``'s tensors for ``name``."""
    from metrale_export.ops import w4a4, w4a16

    spec = source.spec(name, n, k, "ffn")
    t = source.load(spec)
    if spec.kind == "w4a16":
        return w4a16.dequantize(t["weight"], t["weight_scale"], t.get("zero_point"), int(spec.attrs["group_size"]))
    if spec.kind == "w8a8":
        return w8a8.dequantize(t["weight"], t["weight_scale"], str(spec.attrs["weight_scale_granularity"]))
    if spec.kind == "w4a4":
        return w4a4.dequantize(t["weight"], t["weight_scale"], t["weight_global_scale"])
    return t["weight"]


def add_mtp_head(path, seed: int = 3) -> None:
    """Random ``mtp.*`` tensors in the public Qwen3-Next layout: the head's own norms and ``fc``, and
    one decoder layer shaped as the model's full-attention layer (1) with layer 0's MLP (the MoE
    block: the config's rule for layer index 0)."""
    file = path / "model.safetensors"
    tensors = load_file(str(file))
    g = torch.Generator().manual_seed(seed)
    h = tensors["model.norm.weight"].shape[0]
    shapes = {"mtp.fc.weight": (h, 2 * h), "mtp.pre_fc_norm_embedding.weight": (h,),
              "mtp.pre_fc_norm_hidden.weight": (h,), "mtp.norm.weight": (h,)}
    for name, t in tensors.items():
        for src in ("model.layers.1.input_layernorm", "model.layers.1.post_attention_layernorm",
                    "model.layers.1.self_attn.", "model.layers.0.mlp."):
            if name.startswith(src):
                shapes["mtp.layers.0." + name.split(".", 3)[3]] = tuple(t.shape)
    for name, shape in sorted(shapes.items()):
        scale = 0.2 if "norm" in name else 0.1
        tensors[name] = scale * torch.randn(shape, generator=g)
    save_file(tensors, str(file), metadata={"format": "pt"})
