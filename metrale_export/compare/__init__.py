"""Comparisons of an export's runtimes: ONNX Runtime (reference ops) against the PyTorch model."""
