"""The cost of W4A16Proj version 2's bfloat16 group scales, measured on the demo models.

For each demo model (dense Qwen3 and the hybrid Qwen3-Next demo) and W4A16 setting, the PyTorch
reference's logits (the CPU reference ops, float32) of a seeded prompt, relative Frobenius error
against the unquantized model's: with the group scales stored as float32 (version 1) and rounded
once to bfloat16 (version 2, ``w4a16.store_scale``), and between the two. Version 1 is recreated by
making ``store_scale`` keep float32, so both runs quantize the same weights with the same
round-to-nearest quantizer. Prints a Markdown table.

    python -m benchmarks.diagnostics.w4a16_scale_rounding [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path

import numpy as np
import torch

from metrale_export.exporter.checkpoint import Checkpoint
from metrale_export.exporter.config import parse_config
from metrale_export.exporter.demo import write_demo
from metrale_export.exporter.demo_hybrid import write_hybrid_demo
from metrale_export.exporter.layers.model import CausalLM
from metrale_export.exporter.quantization import FloatSource, QuantRequest
from metrale_export.ops import w4a16


@contextlib.contextmanager
def float32_scales():
    """Version 1's storage: group scales kept in float32."""
    saved = w4a16.store_scale, w4a16.SCALE_DTYPE
    w4a16.store_scale, w4a16.SCALE_DTYPE = (lambda s: s.to(torch.float32)), torch.float32
    try:
        yield
    finally:
        w4a16.store_scale, w4a16.SCALE_DTYPE = saved


def logits(path: Path, request: QuantRequest, ids: torch.Tensor) -> np.ndarray:
    ckpt = Checkpoint.open(path)
    source = FloatSource(ckpt, request)
    model = CausalLM(parse_config(ckpt.config), source).load_weights(source).eval()
    batch, seq = ids.shape
    states = [s.example(batch, 0, model.dtype, "cpu") for _, s in model.state_specs()]
    pos = torch.arange(seq).expand(batch, seq).contiguous()
    with torch.no_grad():
        return model(ids, pos, *states)[0].double().numpy()


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write the table here")
    args = ap.parse_args()
    rows = ["| model | group | zero points | v1 (fp32 scales) vs float | v2 (bf16 scales) vs float | v2 vs v1 |",
            "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        models = {"demo (Qwen3)": write_demo(Path(tmp) / "demo"),
                  "hybrid demo (Qwen3-Next)": write_hybrid_demo(Path(tmp) / "hybrid")}
        for label, path in models.items():
            vocab = parse_config(Checkpoint.open(path).config).vocab_size
            ids = torch.randint(0, vocab, (2, 16), generator=torch.Generator().manual_seed(3))
            ref = logits(path, QuantRequest(), ids)
            for group in (32, 128):
                for symmetric in (True, False):
                    req = QuantRequest(weight="w4a16", group_size=group, symmetric=symmetric)
                    with float32_scales():
                        v1 = logits(path, req, ids)
                    v2 = logits(path, req, ids)
                    rows.append(f"| {label} | {group} | {'no' if symmetric else 'yes'} | {rel(v1, ref):.4f} | "
                                f"{rel(v2, ref):.4f} | {rel(v2, v1):.2e} |")
    table = "\n".join(rows)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
