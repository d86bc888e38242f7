"""The numbers a comparison reports: relative error (of a value, or of a layer's update), cosine
similarity, top-1 agreement and KL divergence of logits. float64 throughout; numpy in, floats out.
"""

from __future__ import annotations

import numpy as np


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def rel_error(got, ref, base=None) -> float:
    """||got - ref|| / ||ref - base|| (Frobenius): the error relative to what was computed; ``base``
    (a layer's input, for a layer's output) takes out what the computation passed through. With a
    zero denominator the absolute error."""
    got, ref = _f64(got), _f64(ref)
    if got.shape != ref.shape:
        return float("inf")
    denom = np.linalg.norm(ref if base is None else ref - _f64(base))
    diff = np.linalg.norm(got - ref)
    return float(diff / denom) if denom > 0 else float(diff)


def max_abs(got, ref) -> float:
    got, ref = _f64(got), _f64(ref)
    return float(np.abs(got - ref).max(initial=0.0)) if got.shape == ref.shape else float("inf")


def cosine(got, ref) -> float:
    got, ref = _f64(got).ravel(), _f64(ref).ravel()
    denom = np.linalg.norm(got) * np.linalg.norm(ref)
    return float(got @ ref / denom) if denom > 0 else 1.0


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def top1_agreement(got, ref) -> float:
    """Fraction of positions (all but the last axis) whose argmax logit is the same."""
    got, ref = _f64(got), _f64(ref)
    return float((got.argmax(-1) == ref.argmax(-1)).mean())


def kl_divergence(got, ref) -> float:
    """Mean over positions of KL(softmax(ref) || softmax(got)), in nats."""
    lp, lq = _log_softmax(_f64(ref)), _log_softmax(_f64(got))
    return float((np.exp(lp) * (lp - lq)).sum(-1).mean())
