"""ONNX -> TensorRT engines: row-count profiles, the activation-format policy, graph lowering, builds.

``profiles`` (which engine serves M rows, its optimization profiles), ``policy`` (which activation
format an op runs), ``lowering`` (qdq rewrite, per-engine formats), ``backends`` (TensorRT or
TensorRT-RTX through Polygraphy), ``build`` (engines, manifest, skip-if-unchanged).
"""
