"""Acceptance: a tiny random Qwen3ForCausalLM saved by transformers (an outside reference) exports
unquantized and ONNX Runtime matches transformers' float32 forward, prefill and decode with cache."""

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from metrale_export.exporter.export import ExportOptions, export  # noqa: E402
from metrale_export.exporter.quantization import QuantRequest  # noqa: E402
from metrale_export.ops import tolerances  # noqa: E402
from metrale_export.ops.ort import reference_session  # noqa: E402


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("tie", [False, True])
def test_unquantized_export_matches_transformers(tmp_path, tie):
    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(
        vocab_size=320, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
        tie_word_embeddings=tie, rope_theta=10000.0)
    hf = transformers.Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():  # non-trivial norms, so a wrong norm placement shows
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    hf.save_pretrained(tmp_path / "hf")
    out = export(tmp_path / "hf", tmp_path / "onnx", ExportOptions(request=QuantRequest(weight="none"))).out_dir
    sess = reference_session(out / "model.onnx")

    ids = torch.randint(0, 320, (2, 6))
    with torch.no_grad():
        full = hf(ids).logits.numpy()
    # Prefill the first 5 tokens, then decode the 6th with the KV cache the graph returned.
    kv = {f"past_{kind}.{i}": np.zeros((2, 2, 0, 32), np.float32) for i in range(2) for kind in ("key", "value")}
    pos = np.arange(5)[None].repeat(2, 0)
    outs = sess.run(None, {"input_ids": ids[:, :5].numpy(), "position_ids": pos, **kv})
    names = [o.name for o in sess.get_outputs()]
    prefill = dict(zip(names, outs))
    assert rel(prefill["logits"], full[:, :5]) < tolerances.TRANSFORMERS
    kv = {k.replace("present", "past"): v for k, v in prefill.items() if k.startswith("present")}
    outs = sess.run(None, {"input_ids": ids[:, 5:].numpy(), "position_ids": np.full((2, 1), 5), **kv})
    decode = dict(zip(names, outs))
    assert decode["present_key.0"].shape == (2, 2, 6, 32)
    assert rel(decode["logits"], full[:, 5:]) < tolerances.TRANSFORMERS
