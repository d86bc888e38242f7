"""Step an exported graph (ONNX Runtime) or its PyTorch model through a sequence in chunks, carrying
every layer's state (KV cache, GDN conv and recurrent states) from one call to the next.

A helper for the layer-kind tests: ``chunks`` such as ``[5, 1, 1]`` are a prefill of five tokens and
two decode steps; ``[2, 1, 3, 1]`` also continues a prefill from a non-empty state.
"""

from __future__ import annotations

import numpy as np
import torch


def rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _positions(batch: int, start: int, n: int) -> np.ndarray:
    return np.tile(np.arange(start, start + n, dtype=np.int64), (batch, 1))


def ort_steps(sess, ids: np.ndarray, chunks: list[int]) -> list[np.ndarray]:
    """Logits of each chunk, from an ONNX Runtime session of an export."""
    batch = ids.shape[0]
    states = {}
    for inp in sess.get_inputs()[2:]:
        # dim 0 is the batch; any other symbolic dim is a cache length, empty before the first step
        shape = [batch if a == 0 else (d if isinstance(d, int) else 0) for a, d in enumerate(inp.shape)]
        states[inp.name] = np.zeros(shape, np.float32)
    names = [o.name for o in sess.get_outputs()]
    out, pos = [], 0
    for n in chunks:
        feeds = {"input_ids": ids[:, pos:pos + n], "position_ids": _positions(batch, pos, n), **states}
        res = dict(zip(names, sess.run(None, feeds)))
        out.append(res["logits"])
        for name in states:  # past_key.i -> present_key.i, conv_state.i -> present_conv_state.i
            states[name] = res["present" + name[4:] if name.startswith("past_") else "present_" + name]
        pos += n
    return out


def torch_steps(model, ids: np.ndarray, chunks: list[int]) -> list[np.ndarray]:
    """Logits of each chunk, from a ``CausalLM`` with its weights loaded (the PyTorch reference)."""
    batch = ids.shape[0]
    states = [s.example(batch, 0, model.dtype, "cpu") for _, s in model.state_specs()]
    out, pos = [], 0
    with torch.no_grad():
        for n in chunks:
            logits, *states = model(torch.from_numpy(ids[:, pos:pos + n]),
                                    torch.from_numpy(_positions(batch, pos, n)), *states)
            out.append(logits.float().numpy())
            pos += n
    return out
