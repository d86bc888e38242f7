"""The Qwen3-family layers, built in PyTorch from a ModelConfig and traced to ONNX."""
