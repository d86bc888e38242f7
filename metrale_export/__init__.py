"""metrale-export: quantized Qwen3-family checkpoints to ONNX and row-invariant TensorRT engines."""

__version__ = "0.1.0"
