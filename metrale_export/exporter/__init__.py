"""Checkpoint -> torch layers -> ONNX."""
