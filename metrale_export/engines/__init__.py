"""ONNX -> TensorRT engines: row-count profiles, the activation-format policy, graph lowering, builds.

``profiles`` (the ranges, which engine serves M rows, its optimization profiles), ``policy`` (which
activation format an op runs, and whether row invariance is promised), ``nodes`` (metrale nodes
checked against the contract, read through ``onnx_nodes``), ``lowering`` (the qdq rewrite and the plugin path's per-engine formats), with
``qdq`` (the qdq lowering, a module per weight format) and ``emitter`` (the node builder they and ``expand``
share), ``backends`` (TensorRT or TensorRT-RTX behind Polygraphy), ``source`` (the source graph's
facts, read once), ``plan`` (the build as a pure plan: keys, refusals, reuse, removals), ``build`` (the
executor: lowered graphs and engines), ``manifest`` (the engine manifest, its writer and readers),
``select`` (the engine and profile of a batch, for runners), ``weights`` (an engine's float
weights and its weight bytes) and ``cancel`` (Ctrl-C during a build). See docs/engines.md.
"""
