"""The metrale projection ops: numerics, per-format reference implementations, torch and ONNX bindings."""
