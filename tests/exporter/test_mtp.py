"""Qwen3-Next's MTP head (``layers/mtp.py``): a tiny random ``Qwen3NextForCausalLM`` saved by
transformers, with random ``mtp.*`` tensors added in the public Qwen3-Next layout, exports
``mtp.onnx`` beside ``model.onnx`` (named in the manifest) and the main graph gains its
``hidden_states`` output. ONNX Runtime's head matches the PyTorch reference of the same quantized
head within docs/ops.md's bound, in every weight format, over a prefill and decode steps with its KV
cache carried; the float reference itself matches a head assembled from transformers' own Qwen3-Next
modules. A checkpoint missing one ``mtp.*`` tensor is refused with exit 2, naming it.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file
from support.checkpoints import add_mtp_head
from support.stateful import rel

from metrale_export import contract
from metrale_export.cli.main import cli
from metrale_export.exporter.checkpoint import Checkpoint
from metrale_export.exporter.config import parse_config
from metrale_export.exporter.export import ExportOptions, export
from metrale_export.exporter.layers.model import CausalLM
from metrale_export.exporter.layers.mtp import MtpHead
from metrale_export.exporter.projection import DEFAULT_ACTIVATION
from metrale_export.exporter.quantization import FloatSource, QuantRequest
from metrale_export.ops import tolerances
from metrale_export.ops.ort import reference_session

transformers = pytest.importorskip("transformers")
from test_qwen3_next import save_tiny  # noqa: E402  (after the importorskip)

CHUNKS = [5, 1, 1]  # a prefill of five tokens and two decode steps
# About 100 s an export on the shared CPU: W4A16 in the default run, the other two marked slow.
FORMATS = ["w4a16", pytest.param("w8a8", marks=pytest.mark.slow), pytest.param("w4a4", marks=pytest.mark.slow)]


@pytest.fixture(scope="module")
def hf_mtp(tmp_path_factory):
    model, path = save_tiny(tmp_path_factory.mktemp("qwen3_next_mtp") / "hf")
    add_mtp_head(path)
    return model, path


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 96, (2, sum(CHUNKS) + 1), generator=torch.Generator().manual_seed(1)).numpy()


def _source(path, request):
    ckpt = Checkpoint.open(path)
    return parse_config(ckpt.config), FloatSource(ckpt, request)


def reference_head(path, request: QuantRequest) -> MtpHead:
    cfg, source = _source(path, request)
    return MtpHead(cfg, source).load_weights(source)


def reference_model(path, request: QuantRequest) -> CausalLM:
    cfg, source = _source(path, request)
    return CausalLM(cfg, source, hidden_output=True).load_weights(source)


def _pos(batch, start, n):
    return np.tile(np.arange(start, start + n, dtype=np.int64), (batch, 1))


def _empty_cache(head: MtpHead, batch: int) -> dict[str, np.ndarray]:
    return {f"{s.name}.{i}": s.example(batch, 0, torch.float32, "cpu").numpy() for i, s in head.state_specs()}


def ort_head_steps(sess, hidden, ids, cache):
    """Draft logits per chunk from ONNX Runtime: hidden state of position p with the token at p + 1."""
    names = [o.name for o in sess.get_outputs()]
    out, pos = [], 0
    for n in CHUNKS:
        feeds = {"input_ids": ids[:, pos + 1:pos + 1 + n], "position_ids": _pos(ids.shape[0], pos, n),
                 "hidden_states": hidden[:, pos:pos + n], **cache}
        res = dict(zip(names, sess.run(None, feeds)))
        out.append(res["logits"])
        cache = {k: res["present" + k[4:]] for k in cache}
        pos += n
    return out


def torch_head_steps(head: MtpHead, hidden, ids, cache):
    cache = [torch.from_numpy(v) for v in cache.values()]
    out, pos = [], 0
    with torch.no_grad():
        for n in CHUNKS:
            logits, *cache = head(torch.from_numpy(ids[:, pos + 1:pos + 1 + n]),
                                  torch.from_numpy(_pos(ids.shape[0], pos, n)),
                                  torch.from_numpy(hidden[:, pos:pos + n]), *cache)
            out.append(logits.numpy())
            pos += n
    return out


def _main_hidden(path, request, ids):
    """The main model's ``hidden_states`` for ``ids`` (the PyTorch reference, prefill)."""
    model = reference_model(path, request)
    states = [s.example(ids.shape[0], 0, torch.float32, "cpu") for _, s in model.state_specs()]
    with torch.no_grad():
        *_, hidden = model(torch.from_numpy(ids), torch.from_numpy(_pos(ids.shape[0], 0, ids.shape[1])), *states)
    return hidden.numpy()


def test_reference_matches_transformers_modules(hf_mtp, ids):
    """The float ``MtpHead`` against the head assembled from transformers' Qwen3-Next modules (its
    RMSNorm, a full-attention ``Qwen3NextDecoderLayer`` at index 0 loaded from ``mtp.layers.0.*``, its
    rotary embedding), as vLLM's ``Qwen3NextMultiTokenPredictor`` composes them; prefill."""
    hf, path = hf_mtp
    mq = transformers.models.qwen3_next.modeling_qwen3_next
    cfg = hf.config
    tensors = load_file(str(path / "model.safetensors"))
    layer_cfg = type(cfg)(**{**cfg.to_dict(), "layer_types": ["full_attention"] * cfg.num_hidden_layers})
    layer_cfg._attn_implementation = "eager"
    layer = mq.Qwen3NextDecoderLayer(layer_cfg, 0).float().eval()
    own = {k[len("mtp.layers.0."):]: v for k, v in tensors.items() if k.startswith("mtp.layers.0.")}
    fused = layer.state_dict()
    if "mlp.experts.gate_up_proj" in fused:  # transformers holds the experts fused in memory
        e = range(cfg.num_experts)
        gate_up = torch.stack([torch.cat((own.pop(f"mlp.experts.{i}.gate_proj.weight"),
                                          own.pop(f"mlp.experts.{i}.up_proj.weight"))) for i in e])
        down = torch.stack([own.pop(f"mlp.experts.{i}.down_proj.weight") for i in e])
        assert gate_up.shape == fused["mlp.experts.gate_up_proj"].shape
        own["mlp.experts.gate_up_proj"], own["mlp.experts.down_proj"] = gate_up, down
    layer.load_state_dict(own)
    norms = {}
    for name in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        norms[name] = mq.Qwen3NextRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        norms[name].load_state_dict({"weight": tensors[f"mtp.{name}.weight"]})
    rotary = mq.Qwen3NextRotaryEmbedding(cfg)
    n = ids.shape[1] - 1
    hidden = torch.from_numpy(_main_hidden(path, QuantRequest(), ids[:, :n]))
    tokens = torch.from_numpy(ids[:, 1:])
    pos = torch.from_numpy(_pos(ids.shape[0], 0, n))
    with torch.no_grad():
        e = hf.model.embed_tokens(tokens)
        x = torch.cat((norms["pre_fc_norm_embedding"](e), norms["pre_fc_norm_hidden"](hidden)), dim=-1)
        x = x @ tensors["mtp.fc.weight"].T
        mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
        out = layer(x, position_embeddings=rotary(x, pos), attention_mask=mask, position_ids=pos)
        x = out[0] if isinstance(out, tuple) else out
        want = hf.lm_head(norms["norm"](x)).numpy()
    head = reference_head(path, QuantRequest())
    cache = _empty_cache(head, ids.shape[0])
    with torch.no_grad():
        got, *_ = head(tokens, pos, hidden, *(torch.from_numpy(v) for v in cache.values()))
    # the Attention op rounds q, k, v and P to bf16 (docs/ops.md): the unquantized-vs-transformers bound
    assert rel(got.numpy(), want) < tolerances.TRANSFORMERS


@pytest.mark.parametrize("fmt", FORMATS)
def test_mtp_export_matches_torch_reference(hf_mtp, ids, tmp_path, fmt):
    _, path = hf_mtp
    request = QuantRequest(weight=fmt, group_size=32)
    result = export(path, tmp_path / fmt, ExportOptions(request=request))
    out, manifest = result.out_dir, result.manifest
    assert manifest["mtp"]["onnx"] == "mtp.onnx" and "mtp.onnx" in manifest["files"]
    assert [v["name"] for v in manifest["mtp"]["inputs"]] == ["input_ids", "position_ids", "hidden_states",
                                                              "past_key.0", "past_value.0"]
    assert [v["name"] for v in manifest["mtp"]["outputs"]] == ["logits", "present_key.0", "present_value.0"]
    assert manifest["outputs"][-1]["name"] == "hidden_states"
    shown = CliRunner().invoke(cli, ["inspect", str(out)])
    assert shown.exit_code == 0 and "MTP head: mtp.onnx" in shown.output, shown.output
    graph = onnx.load(str(out / "mtp.onnx"), load_external_data=False).graph
    nodes = [n for n in graph.node if n.domain == contract.DOMAIN]
    names = {next(a.s.decode() for a in n.attribute if a.name == "name"): n.op_type for n in nodes}
    assert names["mtp.fc"] in contract.projections()
    assert names["mtp.layers.0.self_attn.qkv_proj"] in contract.projections()
    assert names["mtp.layers.0.mlp.experts.gate_up_proj"].endswith("MoEProj")
    assert [n.op_type for n in nodes].count("Attention") == 1
    assert names["mtp.norm"] == names["mtp.pre_fc_norm_hidden"] == "RMSNorm"
    assert all(next(a.i for a in n.attribute if a.name == "weight_offset") == 1
               for n in nodes if n.op_type == "RMSNorm")

    # The main graph's hidden_states (ONNX Runtime) feed both heads; it matches the reference's too.
    main = reference_session(out / "model.onnx")
    feeds = {"input_ids": ids, "position_ids": _pos(ids.shape[0], 0, ids.shape[1])}
    for inp in main.get_inputs()[2:]:
        feeds[inp.name] = np.zeros([ids.shape[0] if a == 0 else (d if isinstance(d, int) else 0)
                                    for a, d in enumerate(inp.shape)], np.float32)
    hidden = main.run(["hidden_states"], feeds)[0]
    depth = json.loads((path / "config.json").read_text())["num_hidden_layers"]
    bound = tolerances.end_to_end_bound([DEFAULT_ACTIVATION[fmt]], depth)
    assert rel(hidden, _main_hidden(path, request, ids)) < bound

    head = reference_head(path, request)
    cache = _empty_cache(head, ids.shape[0])
    got = ort_head_steps(reference_session(out / "mtp.onnx"), hidden, ids, cache)
    want = torch_head_steps(head, hidden, ids, cache)
    head_bound = tolerances.end_to_end_bound([DEFAULT_ACTIVATION[fmt]], 1)
    for n, a, b in zip(CHUNKS, got, want):
        assert rel(a, b) < head_bound, (fmt, n, rel(a, b), head_bound)


@pytest.mark.parametrize("missing", ["mtp.fc.weight", "mtp.layers.0.mlp.experts.2.up_proj.weight", "mtp.norm.weight"])
def test_partial_mtp_head_is_refused(hf_mtp, tmp_path, missing):
    _, path = hf_mtp
    partial = tmp_path / "partial"
    shutil.copytree(path, partial)
    tensors = load_file(str(partial / "model.safetensors"))
    del tensors[missing]
    save_file(tensors, str(partial / "model.safetensors"), metadata={"format": "pt"})
    result = CliRunner().invoke(cli, ["export", str(partial), "-o", str(tmp_path / "out"), "--weight-quantization", "w4a16",
                                      "--group-size", "32"])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and repr(missing) in lines[0] and "MTP head" in lines[0], result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # an export of about 300 s here (dense experts trace one node set per expert) and a 40 s build
def test_mtp_engines_build_with_tensorrt_rtx(hf_mtp, tmp_path):
    """``build EXPORT/mtp.onnx``: the head's qdq engines per profile, built by TensorRT-RTX for SM 8.9
    (the qdq lowering needs --moe-experts dense: it cannot express the grouped-expert ops)."""
    from metrale_export.engines import backends
    from metrale_export.engines.build import BuildOptions, build_engines
    from metrale_export.engines.policy import parse_policy
    from metrale_export.engines.profiles import parse_profiles

    if backends.available()["tensorrt-rtx"] is None:
        pytest.skip(f"the TensorRT-RTX wheels do not import: {backends.INSTALL['tensorrt-rtx']}")
    request = QuantRequest(weight="w4a16", group_size=32, moe_experts="dense")
    out = export(hf_mtp[1], tmp_path / "w4a16", ExportOptions(request=request)).out_dir
    options = BuildOptions(parse_profiles("1,2-8"), parse_policy("declared"), backend="tensorrt-rtx", lowering="qdq")
    manifest = build_engines(out / "mtp.onnx", tmp_path / "engines", options)
    assert [e["label"] for e in manifest["engines"]] == ["1", "2-8"] and manifest["complete"] is True
    assert all((tmp_path / "engines" / e["file"]).is_file() for e in manifest["engines"])
