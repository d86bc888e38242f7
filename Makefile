# metrale-export: the commands README.md documents.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
DEMO    := build/demo

.PHONY: setup test test-all demo plugins bench bench-export clean

# A virtual environment with the CPU build of torch (from this machine's disk when present), the
# package in editable mode, the test tools and TensorRT-RTX (CPU-only engine building). torch is
# named again beside the extras so that no dependency can replace the CPU build.
setup:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[test,tensorrt-rtx]' torch==2.13.0

# The default suite: export, reference ops, CLI, engine building (TensorRT-RTX), plugin compile
# checks. GPU tests (-m gpu) run on a CUDA machine; slow ones with 'make test-all'.
test:
	$(BIN)/python -m pytest

test-all:
	$(BIN)/python -m pytest -m 'not gpu'

# The main job on the built-in demo model.
demo:
	$(BIN)/metrale-export demo-model $(DEMO)
	$(BIN)/metrale-export $(DEMO)/model.safetensors -o build/demo.metrale --force

# The CUDA kernels (needs nvcc; no GPU needed to compile).
plugins:
	$(MAKE) -C plugins

# Kernel benchmark (on a GPU): see benchmarks/.
bench:
	$(BIN)/python -m benchmarks.bench_kernels

# Export benchmark on the CPU: installs the peer exporter (the bench extra) first; the quantizer's
# weight error against the peer's int4 (bench_quant) comes first. SHAPES picks
# the checkpoint shapes (one results file), e.g. make bench-export SHAPES=qwen3-8b.
SHAPES ?= qwen3-1.7b,qwen3-8b
bench-export:
	$(BIN)/python -m pip install -q -e '.[bench]' torch==2.13.0
	$(BIN)/python -m benchmarks.bench_quant
	$(BIN)/python -m benchmarks.bench_export --shape $(SHAPES)

clean:
	rm -rf build
